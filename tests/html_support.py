"""Reading pages as a user would: the standard library's ``html.parser`` builds a tree, and tests
find elements by tag, id, class, attribute, ARIA role or visible text, then assert on what they
say (their text, their state attributes), never on exact markup.

``parse_html(html)`` returns the document's root :class:`Node`.
"""

from __future__ import annotations

from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


class Node:
    """An element: ``tag``, ``attrs`` (``{name: value}``, ``""`` for a bare attribute) and its
    children (elements and text)."""

    def __init__(self, tag: str, attrs: dict, parent: Node | None = None):
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node | str] = []

    def text(self) -> str:
        """The visible text, whitespace collapsed."""
        parts = [c if isinstance(c, str) else c.text() for c in self.children]
        return " ".join(" ".join(parts).split())

    def iter(self):
        """Every element below this one, in document order."""
        for c in self.children:
            if isinstance(c, Node):
                yield c
                yield from c.iter()

    def find_all(
        self,
        tag: str | None = None,
        *,
        cls: str | None = None,
        role: str | None = None,
        text: str | None = None,
        **attrs,
    ) -> list[Node]:
        """Descendants by tag, CSS class, ARIA role, contained text and attributes
        (``data_user="ann"`` is ``data-user``; ``True`` matches a bare or any value)."""
        want = {k.replace("_", "-"): v for k, v in attrs.items()}
        return [
            n
            for n in self.iter()
            if (tag is None or n.tag == tag)
            and (cls is None or cls in (n.attrs.get("class") or "").split())
            and (role is None or n.attrs.get("role") == role)
            and (text is None or text in n.text())
            and all((k in n.attrs) if v is True else n.attrs.get(k) == v for k, v in want.items())
        ]

    def find(self, tag: str | None = None, **kw) -> Node:
        """The first of :meth:`find_all`; fails the test when there is none."""
        found = self.find_all(tag, **kw)
        assert found, f"no <{tag or '*'}> with {kw} in the page"
        return found[0]

    def by_id(self, id_: str) -> Node | None:
        """The element with ``id``, or ``None``."""
        found = self.find_all(id=id_)
        return found[0] if found else None

    def root(self) -> Node:
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def description(self) -> str:
        """The text of the element(s) this one's ``aria-describedby`` names ("" without)."""
        ids = (self.attrs.get("aria-describedby") or "").split()
        return " ".join(n.text() for n in map(self.root().by_id, ids) if n is not None)

    def tags(self) -> set[str]:
        """Every element tag below this one: ``"script" not in page.tags()``."""
        return {n.tag for n in self.iter()}


def parse_html(html: str) -> Node:
    """The document's root (tag ``#document``)."""
    root = Node("#document", {})

    class Builder(HTMLParser):
        cur = root

        def handle_starttag(self, tag, attrs):
            node = Node(tag, {k: (v if v is not None else "") for k, v in attrs}, self.cur)
            self.cur.children.append(node)
            if tag not in VOID:
                self.cur = node

        def handle_startendtag(self, tag, attrs):
            self.cur.children.append(
                Node(tag, {k: (v if v is not None else "") for k, v in attrs}, self.cur)
            )

        def handle_endtag(self, tag):
            n = self.cur
            while n is not root and n.tag != tag:
                n = n.parent
            if n is not root:
                self.cur = n.parent

        def handle_data(self, data):
            self.cur.children.append(data)

    b = Builder(convert_charrefs=True)
    b.feed(html)
    b.close()
    return root

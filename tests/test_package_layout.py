"""The package's house rules, read from its source (issue 24's "done when"): no import circles
between its modules (deferred and ``TYPE_CHECKING`` imports count: they are design
dependencies), no module much over 400 lines without a line near its top saying why it is long,
and only the backends import ``docker``. No engine, no import of the package: ``ast`` only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parents[1] / "jupyterhub_gpulab"
#: "modules of one job, ~400 lines at most without a stated reason" (the brief)
MAX_LINES = 410


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for f in root.rglob("*.py"):
        if "migrations" in f.parts:
            continue
        rel = f.relative_to(root.parent).with_suffix("")
        out[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = f
    return out


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """``{module: the package's modules it imports}``, anywhere in its body: every name of an
    import statement (``from . import a, b``: both), each as the module it is or is in."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        here = m.split(".") if f.name == "__init__.py" else m.split(".")[:-1]
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = here[: len(here) - (node.level - 1)]
                    base = ".".join(parent + ([node.module] if node.module else []))
                # a name that is no module (a function, a class) stands for the module it is in
                targets = [f"{base}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != m:
                    edges[m].add(t)
    return edges


def circles(edges: dict[str, set[str]], mods: dict[str, Path]) -> list[list[str]]:
    """Strongly connected groups of two or more modules that are not just a package's
    ``__init__`` re-exporting its children (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []
    counter = 0
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                group = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    group.append(w)
                    if w == v:
                        break
                if len([g for g in group if mods[g].name != "__init__.py"]) > 1:
                    found.append(sorted(group))
    return found


def test_no_module_of_the_package_imports_its_way_back_to_itself():
    mods = modules()
    assert not circles(imports(mods), mods)


def _package(root: Path, files: dict[str, str]) -> Path:
    """A throwaway package ``pkg`` under ``root`` holding ``files`` (name: source)."""
    pkg = root / "pkg"
    pkg.mkdir()
    for name, text in {"__init__.py": "", **files}.items():
        (pkg / name).write_text(text)
    return pkg


def test_the_circle_check_sees_a_deferred_import(tmp_path):
    pkg = _package(
        tmp_path, {"a.py": "from . import b\n", "b.py": "def f():\n    from .a import x\n"}
    )
    mods = modules(pkg)
    assert circles(imports(mods), mods) == [["pkg.a", "pkg.b"]]
    (pkg / "b.py").write_text("def f():\n    pass\n")
    assert circles(imports(modules(pkg)), modules(pkg)) == []


def test_the_circle_check_follows_every_name_of_one_import(tmp_path):
    """``from . import c, b``: the circle runs through ``b``, the second name."""
    files = {"a.py": "from . import c, b\n", "b.py": "def f():\n    from . import a\n", "c.py": ""}
    mods = modules(_package(tmp_path, files))
    assert imports(mods)["pkg.a"] == {"pkg.b", "pkg.c"}
    assert circles(imports(mods), mods) == [["pkg.a", "pkg.b"]]


def test_every_long_module_says_why_it_is_long():
    long = []
    for f in modules().values():
        lines = f.read_text(encoding="utf-8").splitlines()
        head = "\n".join(lines[:20]).lower()
        if len(lines) > MAX_LINES and "long because" not in head:
            long.append(f"{f.relative_to(PACKAGE.parent)}: {len(lines)} lines")
    assert not long, "split it, or say near its top why it is long ('Long because …')"


def test_only_the_backends_import_docker():
    outside = []
    for m, f in modules().items():
        if m.startswith("jupyterhub_gpulab.backends"):
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            if any(n == "docker" or n.startswith("docker.") for n in names):
                outside.append(f"{m}:{node.lineno}")
    assert not outside, "engine calls go through jupyterhub_gpulab.backends"

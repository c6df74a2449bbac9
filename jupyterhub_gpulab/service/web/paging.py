"""Server-side paging, filtering and sorting for the API's lists and the admin page's tables,
in JupyterHub's own shape (JupyterHub >= 2.0, ``jupyterhub/apihandlers/base.py``).

Query arguments: ``offset`` (a whole number from 0 to :data:`MAX_OFFSET`, default 0),
``limit`` (a whole number >= 1, default :data:`DEFAULT_LIMIT`; above :data:`MAX_LIMIT` it is
lowered to it, as JupyterHub does), ``sort`` (a field the list names, ``-field`` for descending)
and the list's filters (exact matches, printable text). A malformed ``offset``, ``limit``, ``sort``
or filter is a 400 saying the accepted form (where JupyterHub takes ``abs()`` of a negative
number, we refuse it: a client sending one has a bug; and where an ``offset`` past the 64-bit
integers the databases take would be their error, we refuse it before the query).

A client sending ``Accept: application/jupyterhub-pagination+json`` gets JupyterHub's paginated
model: ``{"items": [...], "_pagination": {"offset", "limit", "total", "next"}}``, ``next``
``null`` on the last page, else ``{"offset", "limit", "url"}``. Without it the list keeps its
older key (``allocations``) with :data:`MAX_LIMIT` rows at most, as JupyterHub serves clients
that predate paging, and ``_pagination`` beside it so such a client can see there is more.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlencode, urlparse, urlunparse

from .inputs import MAX_ID, MAX_NAME, shown

PAGINATION_MEDIA_TYPE = "application/jupyterhub-pagination+json"
#: JupyterHub's own defaults (``JupyterHub.api_page_default_limit`` / ``api_page_max_limit``).
DEFAULT_LIMIT = 50
MAX_LIMIT = 200
#: The largest ``offset``: allocation ids are 32-bit (:data:`~.inputs.MAX_ID`), so no list has
#: more rows, and every larger number would either read past the end or, past 2**63, overflow
#: the databases' ``OFFSET`` (SQLite's ``OverflowError``, PostgreSQL's "bigint out of range").
MAX_OFFSET = MAX_ID


class PageError(ValueError):
    """A malformed paging argument; the message says the accepted form (a 400)."""


@dataclass(frozen=True)
class Page:
    """One page of a list: rows ``[offset, offset + limit)`` sorted by ``sort`` (ascending
    unless ``descending``), after the exact-match ``filters`` (``{name: value}``)."""

    offset: int = 0
    limit: int = DEFAULT_LIMIT
    sort: str = "id"
    descending: bool = False
    filters: Mapping[str, str] = field(default_factory=dict)


def accepts_pagination(accept_header: str | None) -> bool:
    """Whether an ``Accept`` header asks for JupyterHub's paginated model."""
    accepts = {s.strip().lower() for s in (accept_header or "").split(",")}
    return PAGINATION_MEDIA_TYPE in accepts


def _whole(name: str, raw: str | None, default: int, least: int, most: int | None = None) -> int:
    """``raw`` as a whole number in ASCII digits (``int()`` alone also takes ``+5``, ``5_0`` and
    other scripts' digits), from ``least`` to ``most`` (``None``: no bound); ``default`` when
    absent or empty."""
    if raw is None or raw == "":
        return default
    ok = raw.isascii() and raw.isdigit() and (most is None or len(raw) <= len(str(most)))
    value = int(raw) if ok and len(raw) <= 4000 else None
    if value is None or value < least or (most is not None and value > most):
        form = f"of at least {least}" if most is None else f"from {least} to {most}"
        raise PageError(f"{name} must be a whole number {form}, not {shown(raw)}.")
    return value


def parse_page(
    args: Mapping[str, str | None],
    *,
    sorts: Sequence[str],
    filters: Sequence[str] = (),
    default_sort: str = "id",
    paginated: bool = True,
    choices: Mapping[str, Sequence[str]] | None = None,
) -> Page:
    """The :class:`Page` that query arguments ``args`` (``{name: value or None}``) ask for.
    ``sorts``: the fields the list sorts by; ``filters``: its exact-match filters; without
    ``paginated`` (no pagination Accept header) the default limit is :data:`MAX_LIMIT`;
    ``choices``: the values a filter may take (``{"kind": ("gpu", "mig", "shared")}``).
    Raises :class:`PageError`."""
    offset = _whole("offset", args.get("offset"), 0, 0, MAX_OFFSET)
    limit = min(_whole("limit", args.get("limit"), DEFAULT_LIMIT if paginated else MAX_LIMIT, 1),
                MAX_LIMIT)  # fmt: skip
    raw_sort = args.get("sort") or default_sort
    descending = raw_sort.startswith("-")
    sort = raw_sort[1:] if descending else raw_sort
    if sort not in sorts:
        raise PageError(
            f"sort must be one of {', '.join(sorts)} (with '-' before it for descending), "
            f"not {shown(raw_sort)}."
        )
    wanted = {}
    for name in filters:
        value = args.get(name)
        if value is None or value == "":
            continue
        if len(value) > MAX_NAME:
            raise PageError(f"{name} is at most {MAX_NAME} characters, not {len(value)}.")
        if not value.isprintable():
            # a NUL would be PostgreSQL's error; a name never holds a control character
            raise PageError(
                f"{name} must be printable text (no control characters such as NUL or a line "
                f"break), not {shown(value)}."
            )
        allowed = (choices or {}).get(name)
        if allowed is not None and value not in allowed:
            raise PageError(f"{name} must be one of {', '.join(allowed)}, not {shown(value)}.")
        wanted[name] = value
    return Page(offset, limit, sort, descending, wanted)


def paginated_model(items: list, page: Page, total: int, full_url: str) -> dict:
    """JupyterHub's paginated model of ``items`` (one page of ``total`` rows), ``next`` built
    from ``full_url`` (the request's URL) with the next page's ``offset`` and ``limit``."""
    data = {
        "items": items,
        "_pagination": pagination(page, total, full_url),
    }
    return data


def pagination(page: Page, total: int, full_url: str) -> dict:
    """``{"offset", "limit", "total", "next"}`` (module docstring) for ``page`` of ``total``."""
    out = {"offset": page.offset, "limit": page.limit, "total": total, "next": None}
    following = page.offset + page.limit
    if following < total:
        parsed = urlparse(full_url)
        query = parse_qs(parsed.query, keep_blank_values=True)
        query["offset"], query["limit"] = [str(following)], [str(page.limit)]
        url = urlunparse(parsed._replace(query=urlencode(query, doseq=True)))
        out["next"] = {"offset": following, "limit": page.limit, "url": url}
    return out


def pager(
    page: Page, total: int, extra: Mapping[str, str] | None = None, offset_name: str = "offset"
) -> dict:
    """What a page's table shows above its rows: ``first``/``last`` (1-based, ``0`` when
    empty or past the end), ``total``, ``range`` (``"1–50 of 7000"``, ``"none at 100 of 7"``
    past the end, ``"none"``), the query strings of the previous and next pages (``None`` at either
    end), and the current ``sort`` (``-field`` for descending) and ``filters`` for the filter
    form, with ``extra`` (the other arguments of the page's URL) as its hidden fields, so
    filtering one table keeps the period and the other tables' places. The links keep
    ``extra`` and, for the ``offset`` pager, the filters, sort and limit; ``offset_name`` names
    the argument moved (a second table on the same page has its own). Past the end, the
    previous page is the last one."""
    sort = ("-" if page.descending else "") + page.sort
    keep = dict(extra or {})
    if offset_name == "offset":
        keep.update({**page.filters, "sort": sort, "limit": str(page.limit)})

    def link(offset: int) -> str:
        return "?" + urlencode({**keep, offset_name: str(offset)})

    following = page.offset + page.limit
    first = page.offset + 1 if total > page.offset else 0
    last = min(total, following) if first else 0
    if first:
        shown_range = f"{first}–{last} of {total}"
    elif total:  # an offset past the end (a stale link, a typed URL): back to the last page
        shown_range = f"none at {page.offset + 1} of {total}"
    else:
        shown_range = "none"
    if page.offset >= total > 0:
        prev = link((total - 1) // page.limit * page.limit)
    else:
        prev = link(max(0, page.offset - page.limit)) if page.offset > 0 else None
    return {
        "first": first,
        "last": last,
        "total": total,
        "range": shown_range,
        "prev": prev,
        "next": link(following) if following < total else None,
        "sort": sort,
        "filters": dict(page.filters),
        "limit": page.limit,
        "extra": dict(extra or {}),
    }


def paging_parameters(
    sorts, filters: dict[str, str], *, ties: str = "by id", default: str = "id"
) -> list[dict]:
    """The query parameters of a paged list (:mod:`.paging`): ``offset``, ``limit``, ``sort``
    (one of ``sorts``, ``-`` for descending; ``default``, ``ties`` broken as said) and
    ``filters`` (``{name: description}``)."""
    return [
        {"name": "offset", "in": "query", "required": False,
         "schema": {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET, "default": 0},
         "description": "rows to skip (past the end: an empty page with the total); not a "
         f"whole number in ASCII digits from 0 to {MAX_OFFSET}, a 400"},
        {"name": "limit", "in": "query", "required": False,
         "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                    "default": DEFAULT_LIMIT},
         "description": f"rows on the page (default {DEFAULT_LIMIT} with the pagination Accept "
         f"header, else {MAX_LIMIT}); above {MAX_LIMIT} it is lowered to {MAX_LIMIT}, as "
         "JupyterHub does; below 1 or malformed, a 400"},
        {"name": "sort", "in": "query", "required": False,
         "schema": {"type": "string", "enum": [*sorts, *(f"-{f}" for f in sorts)],
                    "default": default},
         "description": f"the field to sort by, `-field` for descending (ties: {ties})"},
        *(
            {"name": n, "in": "query", "required": False,
             "schema": {"type": "string", "maxLength": MAX_NAME, "pattern": "^[^\\x00-\\x1f\\x7f]*$"},
             "description": d + " (printable text: a control character such as NUL is a 400)"}
            for n, d in filters.items()
        ),
    ]  # fmt: skip


#: users the admin page's GPU-hours table shows at once (a campus has thousands; the CSV has all)
USERS_PER_PAGE = 50

#: GPUs the admin page's Devices section shows at once (each row carries its slices' chips:
#: about 4 kB for a 16-seat GPU, so 50 keep the page near 200 kB)
DEVICES_PER_PAGE = 50


def device_window(
    nodes: list[dict], offset: int, limit: int = DEVICES_PER_PAGE
) -> tuple[list[dict], int]:
    """``(nodes, total)``: the inventory view's ``nodes`` (each with its ``devices``) cut to
    devices ``[offset, offset + limit)`` in their order, and how many devices there are. A node
    without GPUs (CPU-only) is always kept, a node with GPUs only while some are in the window.
    The rule the admin page's database read follows (:func:`~...ledger.listing.devices_page`,
    :mod:`.admindata`), which its tests check against this cut of the whole inventory."""
    out, seen = [], 0
    for node in nodes:
        devices = node["devices"]
        if not devices:
            out.append(node)
            continue
        shown = devices[max(0, offset - seen) : max(0, offset + limit - seen)]
        seen += len(devices)
        if shown:
            out.append({**node, "devices": shown})
    return out, seen

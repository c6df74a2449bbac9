"""Paging, filtering and sorting of the service's lists (``service.web.paging``) over the real
ledger's page query (``ledger.listing``) on SQLite: the arguments JupyterHub's API takes, a 400
for malformed ones, and pages that cover every row once in the asked order."""

from __future__ import annotations

import pytest
from ledger_support import LAB, lab_inventory

from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.ledger import Ledger
from jupyterhub_gpulab.ledger.listing import FILTERS, KINDS, SORTS, open_allocations_page
from jupyterhub_gpulab.service.web.paging import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    Page,
    PageError,
    accepts_pagination,
    device_window,
    pager,
    paginated_model,
    parse_page,
)

SEAT = SliceRequest(kind=SliceKind.SHARED)
MIG = SliceRequest(kind=SliceKind.MIG, mig_profile="1g.5gb")
#: the shared-seat T4 of the test lab with 40 seats: room for a page to walk
BIG_LAB = [
    *LAB[:4],
    {**LAB[4], "shared": {"seats": 40, "memory_per_seat": "400MiB", "compute_share": 0.025}},
]


def page(**args):
    return parse_page(args, sorts=tuple(SORTS), filters=tuple(FILTERS), choices={"kind": KINDS})


@pytest.mark.parametrize(
    "args, says",
    [
        pytest.param({"offset": "-1"}, "offset must be a whole number from 0 to", id="neg"),
        pytest.param({"offset": "ten"}, "offset must be a whole number", id="word"),
        pytest.param({"offset": "1.5"}, "offset must be a whole number", id="fraction"),
        pytest.param({"limit": "0"}, "limit must be a whole number of at least 1", id="zero"),
        pytest.param({"limit": "-5"}, "limit must be a whole number of at least 1", id="neg-lim"),
        pytest.param({"sort": "password"}, "sort must be one of id, user", id="sort"),
        pytest.param({"sort": "--user"}, "sort must be one of", id="sort-dashes"),
        pytest.param({"kind": "tpu"}, "kind must be one of gpu, mig, shared", id="kind"),
        pytest.param({"user": "x" * 300}, "user is at most 255 characters", id="long"),
        # past 2**63 the databases' OFFSET overflows (a 500); no list has 2**31 rows
        pytest.param(
            {"offset": str(2**63)},
            "offset must be a whole number from 0 to 2147483647",
            id="offset-2^63",
        ),
        pytest.param({"offset": str(2**31)}, "from 0 to 2147483647", id="offset-2^31"),
        # int() takes these; a client sending them has a bug, and they are not whole numbers
        # as people write them in a URL
        pytest.param({"limit": "+5"}, "limit must be a whole number", id="plus"),
        pytest.param({"limit": "5_0"}, "limit must be a whole number", id="underscore"),
        pytest.param({"offset": "\u0665"}, "offset must be a whole number", id="arabic-digit"),
        # PostgreSQL's text refuses NUL (a 500); no user name holds a control character
        pytest.param({"user": "ada\x00"}, "user must be printable text", id="NUL"),
        pytest.param({"node": "a\nb"}, "node must be printable text", id="newline"),
    ],
)
def test_a_malformed_argument_is_refused_with_the_form_it_takes(args, says):
    with pytest.raises(PageError, match=says):
        page(**args)


def test_limits_follow_jupyterhub():
    assert page() == Page(0, DEFAULT_LIMIT, "id", False, {})
    # a client without the pagination Accept header gets the larger page, as in JupyterHub
    no_header = parse_page({}, sorts=("id",), paginated=False)
    assert no_header.limit == MAX_LIMIT
    assert page(limit="5000").limit == MAX_LIMIT  # lowered, not refused
    assert page(limit="9" * 40).limit == MAX_LIMIT  # however large
    assert page(offset=str(2**31 - 1)).offset == 2**31 - 1  # past the end: an empty page
    assert page(user="édith.o-b_C").filters == {"user": "édith.o-b_C"}  # any printable name
    assert page(offset="40", limit="7", sort="-started_at", user="ada") == Page(
        40, 7, "started_at", True, {"user": "ada"}
    )
    assert accepts_pagination("text/html, application/jupyterhub-pagination+json")
    assert not accepts_pagination("application/json") and not accepts_pagination(None)


@pytest.fixture
def ledger(tmp_path, at):
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    led.sync_inventory(lab_inventory(BIG_LAB))
    # 30 seats for 6 users (ada0 … ada5), a minute apart, and 2 MIG slices
    for i in range(30):
        led.claim(SEAT, user=f"ada{i % 6}", profile="seat", server_name=f"s{i}")
        at.move(60)
    for i in range(2):
        led.claim(MIG, user=f"mig{i}", profile="mig")
    yield led
    led.close()


def walk(ledger, **kw):
    """Every page of ``limit`` 7 in turn, as a client follows ``next``: the rows and totals."""
    rows, totals, offset = [], set(), 0
    while True:
        got, total, slices = open_allocations_page(ledger, offset=offset, limit=7, **kw)
        assert {a.slice_id for a in got} == set(slices)  # each row's slice, and only those
        rows += got
        totals.add(total)
        offset += 7
        if offset >= total:
            return rows, totals


def test_pages_cover_every_row_once_in_the_asked_order(ledger):
    everything = ledger.open_allocations()
    rows, totals = walk(ledger)
    assert [a.id for a in rows] == [a.id for a in everything] and totals == {32}
    rows, _ = walk(ledger, sort="started_at", descending=True)
    assert [a.id for a in rows] == [a.id for a in sorted(everything, key=lambda a: a.id)][::-1]
    rows, _ = walk(ledger, sort="user")
    # by user, ties by id: no row twice, none skipped between pages
    assert [(a.user, a.id) for a in rows] == sorted((a.user, a.id) for a in everything)
    for field in ("user", "profile"):  # one with an index, one without
        rows, _ = walk(ledger, sort=field, descending=True)
        want = sorted(((getattr(a, field), a.id) for a in everything), reverse=True)
        assert [(getattr(a, field), a.id) for a in rows] == want


def test_filters_narrow_the_rows_and_the_total(ledger):
    rows, totals = walk(ledger, filters={"user": "ada2"})
    assert {a.user for a in rows} == {"ada2"} and len(rows) == 5 and totals == {5}
    rows, totals = walk(ledger, filters={"kind": "mig"})
    assert {a.user for a in rows} == {"mig0", "mig1"} and totals == {2}
    rows, totals = walk(ledger, filters={"kind": "shared", "profile": "seat", "user": "ada0"})
    assert len(rows) == 5 and totals == {5}
    got, total, _ = open_allocations_page(ledger, offset=100, limit=7)
    assert got == [] and total == 32  # past the end: an empty page, the total still told


def test_the_paginated_model_is_jupyterhubs():
    url = "http://hub/services/gpulab/api/allocations?user=ada&offset=0&limit=7"
    first = paginated_model(["a"] * 7, Page(0, 7), 16, url)
    assert first["items"] == ["a"] * 7
    p = first["_pagination"]
    assert (p["offset"], p["limit"], p["total"]) == (0, 7, 16)
    assert (p["next"]["offset"], p["next"]["limit"]) == (7, 7)
    assert (
        p["next"]["url"] == "http://hub/services/gpulab/api/allocations?user=ada&offset=7&limit=7"
    )
    last = paginated_model(["a"] * 2, Page(14, 7), 16, url)["_pagination"]
    assert last["next"] is None


def test_the_device_window_cuts_across_nodes_and_keeps_cpu_only_nodes():
    nodes = [
        {"name": "a", "devices": [{"uuid": f"a{i}"} for i in range(3)]},
        {"name": "cpu", "devices": []},
        {"name": "b", "devices": [{"uuid": f"b{i}"} for i in range(4)]},
    ]
    shown, total = device_window(nodes, 2, 3)
    assert total == 7
    assert [(n["name"], [d["uuid"] for d in n["devices"]]) for n in shown] == [
        ("a", ["a2"]), ("cpu", []), ("b", ["b0", "b1"])
    ]  # fmt: skip
    shown, _ = device_window(nodes, 3, 50)
    assert [n["name"] for n in shown] == ["cpu", "b"]
    p = pager(Page(offset=50, limit=50), 120, {"start": "2026-11-30"}, offset_name="devices_offset")
    assert (p["first"], p["last"]) == (51, 100)
    assert p["prev"] == "?start=2026-11-30&devices_offset=0"
    assert p["next"] == "?start=2026-11-30&devices_offset=100"


def test_a_page_past_the_end_says_so_and_leads_back_to_the_last_page():
    # a stale link or a typed offset: the table says no row is there (not "1-7 of 7") and its
    # previous link is the last page, not offset - limit (still past the end)
    p = pager(Page(offset=99_999, limit=50), 7, {"start": "2026-11-30"})
    assert (p["first"], p["last"], p["range"]) == (0, 0, "none at 100000 of 7")
    assert p["prev"] == "?start=2026-11-30&sort=id&limit=50&offset=0" and p["next"] is None
    p = pager(Page(offset=120, limit=50), 120)
    assert p["range"] == "none at 121 of 120" and "offset=100" in p["prev"]
    assert pager(Page(offset=50, limit=50), 120)["range"] == "51–100 of 120"
    assert pager(Page(offset=0, limit=50), 0)["range"] == "none"
    assert pager(Page(offset=0, limit=50), 0)["prev"] is None


def test_usage_pages_its_users_most_first_ties_by_name_and_each_user_once():
    """``GET api/usage``'s GPU-hours per user a page at a time: most first by default, equal
    hours by name (so a walk never shows a user twice or skips one), the CSV rows of the page's
    users only, the ``user`` filter exact."""
    from datetime import datetime, timezone

    from jupyterhub_gpulab.fairuse.accounting import Usage, UsageRow
    from jupyterhub_gpulab.service.web.usageview import USER_SORTS, usage_view, user_hours_page

    t0 = datetime(2026, 11, 30, tzinfo=timezone.utc)
    seconds = {
        "Ada": 7200.0,
        "a-b": 3600.0,
        "a_b": 3600.0,
        "a.b": 3600.0,
        "édith": 10.0,
        "zoë": 3600.0,
    }
    t1 = t0.replace(day=7)
    rows = tuple(
        UsageRow(t0, t1, u, "g", "seat", "shared", 1, s) for u, s in sorted(seconds.items())
    )
    u = Usage(t0, t1, rows, by_user=dict(seconds))
    view = usage_view(u)

    def users(**args):
        page = parse_page(args, sorts=USER_SORTS, filters=("user",), default_sort="-gpu_hours")
        by_user, csv_rows, total = user_hours_page(u, view, page)
        assert {r["user"] for r in csv_rows} == {r["user"] for r in by_user}  # their rows only
        return [r["user"] for r in by_user], total

    walked = []
    for offset in range(0, 6, 4):
        got, total = users(offset=str(offset), limit="4")
        walked += got
        assert total == 6
    assert walked == ["Ada", "a-b", "a.b", "a_b", "zoë", "édith"]  # 1 h ties: by name
    assert users(sort="gpu_hours", limit="3") == (["édith", "a-b", "a.b"], 6)
    assert users(sort="-user", limit="2") == (["édith", "zoë"], 6)  # by code point
    assert users(user="a.b") == (["a.b"], 1)
    assert users(user="A.B") == ([], 0)  # exact, as JupyterHub's names are
    assert users(offset="6") == ([], 6)  # past the end: no users, the total still told

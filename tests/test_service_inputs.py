"""Every input to the service is bounded: out-of-range ids, far or malformed dates, long names and
reasons, unknown fields, deep or oversized bodies are each a 4xx with a short message, and change
nothing. Against a real hub starting the real service, through the proxy, as a client would.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from urllib.parse import parse_qs, urlencode, urlparse

import pytest
import requests
from html_support import parse_html
from ledger_support import release_all, undrain_all
from service_support import PREFIX, login, user_token

from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.service.web.paging import PAGINATION_MEDIA_TYPE as PAGINATION

#: every response of the service's api/ is checked against its OpenAPI document
pytestmark = pytest.mark.usefixtures("api_contract")

TARGET_GPU = "GPU-p40-0003"
SEAT = SliceRequest(kind=SliceKind.SHARED)
MIG_1G = SliceRequest(kind=SliceKind.MIG, mig_profile="1g.5gb")
#: No message quotes more than a short piece of what it was sent.
MAX_MESSAGE = 300


@pytest.fixture(scope="module")
def hub(service_hub):
    return service_hub


@pytest.fixture(scope="module")
def admin(hub):
    return login(hub, "admin")


@pytest.fixture(scope="module")
def token(hub, admin):
    return user_token(hub, admin, "admin")


@pytest.fixture
def lab(ledger):
    """An allocation held, nothing drained; yields what the ledger holds, to compare after."""
    a = ledger.claim(SEAT, user="researcher", profile="shared-seat").allocation
    yield (
        lambda: (
            sorted((d["uuid"], bool(d["drained"]), d["drain_reason"]) for d in ledger.devices()),
            sorted((x.id, x.user, x.slice_id) for x in ledger.open_allocations()),
        ),
        a,
    )
    undrain_all(ledger)
    release_all(ledger)


def deep_json(depth: int) -> bytes:
    return b'{"reason": ' + b"[" * depth + b"]" * depth + b"}"


API_CASES = [
    pytest.param("DELETE", f"allocations/{2**63}", None, 400, id="id-2^63"),
    pytest.param("DELETE", f"allocations/{2**31}", None, 400, id="id-2^31"),
    pytest.param("DELETE", "allocations/-1", None, 400, id="id-negative"),
    pytest.param("DELETE", "allocations/0", None, 400, id="id-zero"),
    pytest.param("GET", "usage?start=0001-01-01", None, 400, id="usage-year-1"),
    pytest.param("GET", "usage?end=0001-01-03", None, 400, id="usage-end-year-1"),
    pytest.param("GET", "usage?start=9999-12-31", None, 400, id="usage-year-9999"),
    pytest.param("GET", "usage.csv?start=9999-12-25", None, 400, id="csv-year-9999"),
    # the download takes the period only: a filter it would ignore answers everyone's rows
    pytest.param("GET", "usage.csv?user=pg.b", None, 400, id="csv-filter-ignored"),
    pytest.param("GET", "usage.csv?usr=x", None, 400, id="csv-misspelt"),
    pytest.param("GET", "usage?start=" + "2" * 5000, None, 400, id="usage-malformed-long"),
    pytest.param(
        "POST", f"devices/{TARGET_GPU}/drain", {"reason": "r" * 20_000}, 400, id="reason-20kB"
    ),
    pytest.param(
        "POST", f"devices/{TARGET_GPU}/drain", {"reason": "x", "drained": False}, 400,
        id="unknown-field",
    ),
    pytest.param("POST", f"devices/{TARGET_GPU}/drain", deep_json(30_000), 400, id="deep-json"),
    pytest.param(
        "POST", f"devices/{TARGET_GPU}/drain", {"reason": "x", "pad": "p" * 200_000}, 413,
        id="body-200kB",
    ),
    pytest.param(
        "POST", f"devices/{TARGET_GPU}/drain", b" " * (5 * 2**20) + b"{}", 413, id="body-5MB"
    ),
    # text no database can hold: SQLite cannot encode a lone surrogate (a JSON "\udcff"
    # escape), PostgreSQL's text refuses NUL; both were a 500
    pytest.param(
        "POST", f"devices/{TARGET_GPU}/drain", b'{"reason": "\\udcff"}', 400, id="reason-surrogate"
    ),
    pytest.param(
        "POST", f"devices/{TARGET_GPU}/drain", b'{"reason": "fan\\u0000"}', 400, id="reason-NUL"
    ),
    pytest.param("POST", "nodes/lab-node/drain", b'{"reason": "\\ud800"}', 400,
                 id="node-reason-surrogate"),
    # paging: an offset past the databases' 64-bit OFFSET was a 500; a filter of control
    # characters (tornado turns them into spaces and strips them) and a misspelt filter
    # answered every open allocation as if it matched
    pytest.param("GET", f"allocations?offset={2**63}", None, 400, id="offset-2^63"),
    pytest.param("GET", "allocations?offset=" + "9" * 40, None, 400, id="offset-40-digits"),
    pytest.param("GET", "allocations?user=%00", None, 400, id="filter-NUL"),
    pytest.param("GET", "allocations?user=ada%0A", None, 400, id="filter-newline"),
    pytest.param("GET", "allocations?usr=researcher", None, 400, id="filter-misspelt"),
    pytest.param("DELETE", f"devices/{'G' * 500}/drain", None, 400, id="uuid-500"),
    pytest.param("DELETE", f"users/{'u' * 5000}/server", None, 400, id="user-5000"),
    pytest.param("DELETE", f"users/student/servers/{'n' * 300}", None, 400, id="server-300"),
]  # fmt: skip


@pytest.mark.parametrize("method, path, body, status", API_CASES)
def test_bad_api_input_is_a_4xx_with_a_short_message_and_changes_nothing(
    hub, token, lab, method, path, body, status
):
    snapshot, _ = lab
    before = snapshot()
    kw = {"data": body} if isinstance(body, bytes) else {"json": body} if body else {}

    r = requests.request(
        method,
        hub.url + PREFIX + "api/" + path,
        headers={"Authorization": f"token {token}"},
        timeout=60,
        **kw,
    )

    assert r.status_code == status, r.text[:500]
    assert r.headers["Content-Type"].startswith("application/json")
    error = r.json()
    assert error["status"] == status and error["message"], error
    assert len(error["message"]) <= MAX_MESSAGE, error["message"]
    assert snapshot() == before


def form_cases(allocation_id: int) -> list[tuple[str, dict, int]]:
    return [
        ("release", {"allocation": str(2**63)}, 400),
        ("release", {"allocation": "-1"}, 400),
        ("stop", {"allocation": str(2**63)}, 400),
        ("drain", {"device": TARGET_GPU, "reason": "r" * 20_000}, 400),
        ("drain", {"device": TARGET_GPU, f"reason:{TARGET_GPU}": "r" * 20_000}, 400),
        ("drain", {"device": "G" * 20_000}, 400),
        ("undrain", {"device": "G" * 20_000}, 400),
        ("stop", {"user": "u" * 5000}, 400),
        ("stop", {"user": "student", "server": "s" * 300}, 400),
        ("drain", {"device": TARGET_GPU, "reason": "ok", "pad": "p" * 200_000}, 413),
        # a NUL in a form field: refused, not stored as the space Tornado would make of it
        ("drain", {"device": TARGET_GPU, "reason": "fan\x00"}, 400),
    ]


def test_bad_form_input_on_the_admin_page_is_a_4xx_and_changes_nothing(hub, admin, lab):
    snapshot, a = lab
    before = snapshot()
    xsrf = admin.cookies.get("_xsrf", path=PREFIX)
    for action, fields, status in form_cases(a.id):
        r = admin.post(
            hub.url + PREFIX + "actions/" + action,
            data={**fields, "_xsrf": xsrf},
            allow_redirects=False,
            timeout=60,
        )
        what = f"{action} {json.dumps({k: len(v) for k, v in fields.items()})}"
        assert r.status_code == status, (what, r.status_code, r.text[:300])
        # the page says why, and no cookie (the flash message) grows with the input
        assert "text/html" in r.headers["Content-Type"], what
        assert len(r.headers.get("Set-Cookie", "")) < 1000, what
        assert snapshot() == before, what
    # the admin page still works
    assert admin.get(hub.url + PREFIX, timeout=30).status_code == 200


@pytest.mark.parametrize(
    "query, says",
    [
        pytest.param(f"offset={2**63}", "offset must be a whole number from 0 to", id="offset"),
        pytest.param(f"users_offset={2**63}", "users_offset must be a whole number from 0 to",
                     id="users-offset"),
        pytest.param("user=%00", "user must be printable text", id="filter-NUL"),
    ],
)  # fmt: skip
def test_a_bad_paging_argument_on_the_admin_page_is_a_400_page_saying_the_form(
    hub, admin, lab, query, says
):
    """An offset past the databases' OFFSET was a 500 page; a NUL filter showed every row."""
    r = admin.get(hub.url + PREFIX + "?" + query, timeout=60)
    assert r.status_code == 400, (r.status_code, r.text[:300])
    assert "text/html" in r.headers["Content-Type"] and says in r.text


def test_the_admin_pages_allocation_links_and_filters_keep_the_period_and_other_tables(
    hub, admin, ledger, lab
):
    """Paging or filtering the open allocations keeps the GPU-hours period and the other tables'
    places (the next link dropped the users table's place, the filter form the period and both
    places), and a sort the form does not list stays chosen (Show reset it to oldest first)."""
    ledger.claim(SEAT, user="student", profile="shared-seat")  # two open: a next page at limit=1
    keep = {"start": "2026-11-30", "end": "2026-12-14", "devices_offset": "0", "users_offset": "50"}
    query = urlencode({**keep, "sort": "server_name", "limit": "1"})
    page = parse_html(admin.get(f"{hub.url}{PREFIX}?{query}", timeout=60).text)
    following = parse_qs(
        urlparse(page.find("p", cls="pager").find("a", cls="next").attrs["href"]).query
    )
    assert {k: v[0] for k, v in following.items()} == {
        **keep,
        "sort": "server_name",
        "limit": "1",
        "offset": "1",
    }
    form = page.find("form", cls="allocation-filters")
    hidden = {i.attrs["name"]: i.attrs["value"] for i in form.find_all("input", type="hidden")}
    assert hidden == {**keep, "limit": "1"}
    chosen = [
        o.attrs["value"] for o in form.find("select", name="sort").find_all("option", selected=True)
    ]
    assert chosen == ["server_name"]


def test_a_token_in_the_url_is_no_unknown_argument(hub, token, lab):
    """``?token=`` is HubAuth's (where ``JUPYTERHUB_ALLOW_TOKEN_IN_URL`` lets it take one): the
    allocations list's rule against unknown arguments lets it through."""
    r = requests.get(
        f"{hub.url}{PREFIX}api/allocations?limit=1&token={token}",
        headers={"Authorization": f"token {token}"},
        timeout=60,
    )
    assert r.status_code == 200, r.text[:300]
    assert r.json()["_pagination"]["total"] == 1


def test_usage_pages_its_users_like_jupyterhubs_api(hub, token, ledger, lab):
    """``GET api/usage`` answers the period's users a page at a time (issue 26: a campus has
    tens of thousands): following ``next`` sees each user once, the filter and a misspelt
    argument are the allocations list's, and without the pagination header the older shape
    keeps at most a page of users with ``_pagination`` beside it."""
    names = ["pg-a", "pg.b", "pg_c", "Pg-D", "pgé"]
    for n in names[:3]:  # open: hours grow between requests, so the walk goes by name
        ledger.claim(SEAT, user=n, profile="shared-seat")
    for n in names[3:]:  # the lab's 3 other seats are taken: its two 1g.5gb MIG slices
        ledger.claim(MIG_1G, user=n, profile="mig-small")
    today = datetime.now(timezone.utc).date()
    period = f"start={today - timedelta(days=1)}&end={today + timedelta(days=2)}"
    auth = {"Authorization": f"token {token}"}

    def get(query, paged=True):
        headers = {**auth, **({"Accept": PAGINATION} if paged else {})}
        return requests.get(f"{hub.url}{PREFIX}api/usage?{query}", headers=headers, timeout=60)

    everyone = {
        u["user"] for u in get(period + "&limit=200", paged=False).json()["gpu_hours"]["by_user"]
    }
    assert set(names) <= everyone
    walked, url = [], f"{hub.url}{PREFIX}api/usage?{period}&sort=user&limit=2"
    while url:
        body = requests.get(url, headers={**auth, "Accept": PAGINATION}, timeout=60).json()
        walked += [u["user"] for u in body["items"]]
        assert {r["user"] for r in body["gpu_hours"]["rows"]} == {u["user"] for u in body["items"]}
        assert body["_pagination"]["total"] == len(everyone)
        url = body["_pagination"]["next"] and body["_pagination"]["next"]["url"]
    assert walked == sorted(everyone)
    assert [u["user"] for u in get(period + "&user=pg.b").json()["items"]] == ["pg.b"]
    old = get(period + "&limit=1", paged=False).json()
    assert len(old["gpu_hours"]["by_user"]) == 1 and old["_pagination"]["total"] == len(everyone)
    for query, says in (("offset=-1", "offset must be a whole number"),
                        ("sort=hours", "sort must be one of gpu_hours, user"),
                        ("usr=pg.b", "Unknown query argument 'usr'")):  # fmt: skip
        r = get(query)
        assert r.status_code == 400 and says in r.json()["message"], (query, r.text[:300])


def test_a_valid_reason_at_the_limit_is_kept_whole(hub, token, ledger, lab):
    reason = "fan " * 63 + "bad"  # 255 characters
    r = requests.post(
        f"{hub.url}{PREFIX}api/devices/{TARGET_GPU}/drain",
        headers={"Authorization": f"token {token}"},
        json={"reason": reason},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    assert next(d for d in ledger.devices() if d["uuid"] == TARGET_GPU)["drain_reason"] == reason


def nav_user(page: str) -> str | None:
    """Whom a page's nav shows logged in (``None``: it offers "Login")."""
    m = re.search(r'<span class="me-1">([^<]*)</span>', page)
    return m.group(1) if m and ">Logout</a>" in page else None


def test_a_refused_form_shows_its_page_to_the_user_who_sent_it(hub, lab):
    """A 403 (a form without its _xsrf token) and a 413 (a body over the limit) are refused
    without the user (the cookie is not taken), yet the page says it to them, logged in: their
    name and Logout in the nav, not Login, and what to do."""
    instructor = login(hub, "instructor")  # a reader: every form below is refused regardless
    snapshot, _ = lab
    before = snapshot()
    xsrf = instructor.cookies.get("_xsrf", path=PREFIX)
    for data, status, says in (
        ({"device": TARGET_GPU}, 403, "reload the page and send it again"),
        ({"device": TARGET_GPU, "pad": "p" * 200_000, "_xsrf": xsrf}, 413, "reads at most"),
    ):
        r = instructor.post(hub.url + PREFIX + "actions/drain", data=data, timeout=60)
        assert r.status_code == status, r.text[:300]
        assert nav_user(r.text) == "instructor", r.text[:2000]
        assert says in r.text
        assert ">Login</a>" not in r.text
    assert snapshot() == before
    # anonymous: the same form is refused with the login offered
    r = requests.post(hub.url + PREFIX + "actions/drain", data={"device": TARGET_GPU}, timeout=60)
    assert r.status_code == 403 and nav_user(r.text) is None and ">Login</a>" in r.text
    assert "Log in to the hub first" in r.text

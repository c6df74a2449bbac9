"""The gpulab service as deployed: started by a real JupyterHub (subprocess, real proxy) from
``configure_service``, users logged in through the hub and OAuth, API calls with hub tokens.

The authorisation matrix covers student, instructor (``custom:gpulab:read``), researcher,
admin (JupyterHub admin) and anonymous against every page and endpoint; every cell is asserted,
state-changing cells also check that the change happened, or did not.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone

import pytest
import requests
from api_contract import check_body
from html_support import parse_html
from hubtools import docker_available
from leakcheck import unique
from ledger_support import release_all, undrain_all
from service_support import (
    PEOPLE,
    PREFIX,
    login,
    real_servers,
    require_or_skip,
    running_service_hub,
    service_xsrf,
    user_token,
)

from jupyterhub_gpulab.inventory import SliceKind, SliceRequest

#: every response of the service's api/ is checked against its OpenAPI document
pytestmark = pytest.mark.usefixtures("api_contract")

MIG_1G = SliceRequest(kind=SliceKind.MIG, mig_profile="1g.5gb")
SEAT = SliceRequest(kind=SliceKind.SHARED)
WHO = ["anonymous", "student", "instructor", "researcher", "admin"]
TARGET_GPU = "GPU-p40-0003"


#: Servers are real: GPUDockerSpawner, attach mode "env", a node (and container prefix) of its own.
NODE = unique("gpulabhub")
SPAWNER = real_servers(NODE, hold_rows=True)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with running_service_hub(
        tmp_path_factory.mktemp("service-hub"), extra=SPAWNER, node=NODE
    ) as hub:
        yield hub


@pytest.fixture(scope="module")
def sessions(hub):
    found = {name: login(hub, name) for name in PEOPLE}
    found["anonymous"] = requests.Session()
    return found


@pytest.fixture(scope="module")
def tokens(hub, sessions):
    return {name: user_token(hub, sessions[name], name) for name in PEOPLE}


@dataclass
class Ctx:
    hub: object
    ledger: object
    sessions: dict
    tokens: dict

    def url(self, path: str) -> str:
        return self.hub.url + PREFIX + path

    def api(self, who: str, method: str, path: str, **kw) -> requests.Response:
        headers = kw.pop("headers", {})
        if who in self.tokens:
            headers["Authorization"] = f"token {self.tokens[who]}"
        return requests.request(method, self.url("api/" + path), headers=headers, timeout=30, **kw)

    def page(self, who: str, path: str) -> requests.Response:
        return self.sessions[who].get(self.url(path), allow_redirects=False, timeout=30)

    def form(self, who: str, path: str, data: dict) -> requests.Response:
        s = self.sessions[who]
        xsrf = s.cookies.get("_xsrf", path=PREFIX)
        return s.post(
            self.url(path), data={**data, "_xsrf": xsrf or ""}, allow_redirects=False, timeout=30
        )

    def drained(self, uuid: str = TARGET_GPU) -> bool:
        return next(d for d in self.ledger.devices() if d["uuid"] == uuid)["drained"]

    def node_drained(self) -> bool:
        return self.ledger.node(NODE).drained


@pytest.fixture
def ctx(hub, ledger, sessions, tokens):
    ctx = Ctx(hub, ledger, sessions, tokens)
    yield ctx
    # every cell starts from the same lab: nothing drained, nothing held
    undrain_all(ledger)
    ledger.set_node_drained(NODE, False)
    release_all(ledger)


# -- the matrix ---------------------------------------------------------------------------------
# Each endpoint runs its request as `who` and checks the outcome it is told to expect:
#   ok         2xx (or the redirect an action answers with), and the change happened
#   forbidden  403, and nothing changed
#   login      302 to the hub's OAuth / login
#   to-me      302 to the user page (people without read access, from the admin page)
#   read-only  200, with every device and allocation but no action buttons

READERS = {"instructor": "ok", "admin": "ok"}
ADMINS = {"admin": "ok"}


def expect(default: str, **cells: str) -> dict[str, str]:
    return {who: cells.get(who, default) for who in WHO}


EXPECTED = {
    "GET /": expect("to-me", anonymous="login", instructor="read-only", admin="ok"),
    "GET /me": expect("ok", anonymous="login"),
    "POST /actions/drain": expect("forbidden", admin="ok"),
    "POST /actions/release": expect("forbidden", admin="ok"),
    "GET api/inventory": expect("forbidden", **READERS),
    "GET api/allocations": expect("forbidden", **READERS),
    "GET api/usage": expect("forbidden", **READERS),
    "GET api/usage.csv": expect("forbidden", **READERS),
    "GET api/me": expect("ok", anonymous="forbidden"),
    "GET api/openapi.json": expect("ok"),
    "POST api/inventory/refresh": expect("forbidden", **ADMINS),
    "POST api/devices/{uuid}/drain": expect("forbidden", **ADMINS),
    "DELETE api/devices/{uuid}/drain": expect("forbidden", **ADMINS),
    "DELETE api/allocations/{id}": expect("forbidden", **ADMINS),
    "DELETE api/users/{user}/server": expect("forbidden", **ADMINS),
    "DELETE api/users/{user}/servers/{name}": expect("forbidden", admin="not-found"),
    "POST api/users/{user}/server/keep": expect("forbidden", student="conflict"),
    "POST api/users/{user}/servers/{name}/keep": expect("forbidden", student="conflict"),
    "POST api/users/{user}/server/move-to-cpu": expect("forbidden", student="conflict"),
    "POST api/users/{user}/servers/{name}/move-to-cpu": expect("forbidden", student="conflict"),
    "GET api/users/{user}/server/interaction": expect("forbidden", student="ok"),
    "POST api/users/{user}/server/interaction": expect("forbidden", student="ok"),
    "GET api/users/{user}/servers/{name}/interaction": expect("forbidden", student="ok"),
    "POST api/users/{user}/servers/{name}/interaction": expect("forbidden", student="ok"),
    "GET api/waitlist": expect("ok", anonymous="forbidden"),
    "POST api/waitlist": expect("ok", anonymous="forbidden"),
    "DELETE api/waitlist/{profile}": expect("ok", anonymous="forbidden"),
    "GET api/bookings": expect("forbidden", **READERS),
    "POST /actions/drainnode": expect("forbidden", admin="ok"),
    "GET api/nodes": expect("forbidden", **READERS),
    "POST api/nodes/{node}/drain": expect("forbidden", **ADMINS),
    "DELETE api/nodes/{node}/drain": expect("forbidden", **ADMINS),
    "POST api/nodes/{node}/token": expect("forbidden", **ADMINS),
    "DELETE api/nodes/{node}/token": expect("forbidden", **ADMINS),
    # a node agent's endpoint: no hub token may report, whoever holds it (test_service_nodes.py)
    "POST api/nodes/{node}/report": expect("forbidden"),
}


def check_status(r: requests.Response, outcome: str) -> None:
    if outcome == "forbidden":
        assert r.status_code == 403, (r.status_code, r.text[:300])
    elif outcome == "not-found":
        assert r.status_code == 404, (r.status_code, r.text[:300])
    elif outcome == "conflict":
        assert r.status_code == 409, (r.status_code, r.text[:300])
    elif outcome == "ok":
        assert 200 <= r.status_code < 400, (r.status_code, r.text[:300])
    else:
        raise AssertionError(outcome)


def is_json_error(r: requests.Response, status: int) -> bool:
    body = r.json()
    return body["status"] == status and isinstance(body["message"], str) and body["message"]


def cell_admin_page(ctx: Ctx, who: str, outcome: str) -> None:
    ctx.ledger.claim(SEAT, user="student", profile="shared-seat")
    r = ctx.page(who, "")
    if outcome == "login":
        assert r.status_code == 302 and "/hub/api/oauth2/authorize" in r.headers["Location"]
    elif outcome == "to-me":
        assert r.status_code == 302 and r.headers["Location"] == PREFIX + "me"
    else:
        assert r.status_code == 200
        assert r.headers["Content-Security-Policy"] == "frame-ancestors 'self'"  # no clickjacking
        page = parse_html(r.text)
        assert len(page.find_all("tr", cls="device")) == 5
        assert page.find_all("tr", cls="allocation", data_user="student")
        buttons = page.find_all("button", cls="drain") + page.find_all("button", cls="release")
        assert bool(buttons) == (outcome == "ok")


def cell_user_page(ctx: Ctx, who: str, outcome: str) -> None:
    r = ctx.page(who, "me")
    if outcome == "login":
        assert r.status_code == 302 and "/hub/api/oauth2/authorize" in r.headers["Location"]
    else:
        assert r.status_code == 200
        # their own page: the hub's nav bar shows who is logged in
        assert parse_html(r.text).find("span", cls="me-1").text() == who


def cell_form_drain(ctx: Ctx, who: str, outcome: str) -> None:
    r = ctx.form(who, "actions/drain", {"device": TARGET_GPU, "reason": "matrix"})
    if outcome == "ok":
        assert r.status_code == 302 and r.headers["Location"] == PREFIX
        assert ctx.drained()
    else:
        assert r.status_code == 403 and not ctx.drained()


def cell_form_release(ctx: Ctx, who: str, outcome: str) -> None:
    a = ctx.ledger.claim(SEAT, user="researcher", profile="shared-seat").allocation
    r = ctx.form(who, "actions/release", {"allocation": str(a.id)})
    if outcome == "ok":
        assert r.status_code == 302 and not ctx.ledger.get(a.id).open
    else:
        assert r.status_code == 403 and ctx.ledger.get(a.id).open


def cell_api_get(path: str, key: str):
    def cell(ctx: Ctx, who: str, outcome: str) -> None:
        r = ctx.api(who, "GET", path)
        check_status(r, outcome)
        if outcome == "ok":
            assert key in r.json()
        else:
            assert is_json_error(r, 403)

    return cell


def cell_api_usage_csv(ctx: Ctx, who: str, outcome: str) -> None:
    r = ctx.api(who, "GET", "usage.csv")
    check_status(r, outcome)
    if outcome == "ok":
        assert r.headers["Content-Type"].startswith("text/csv")
        assert r.text.startswith("period_start,period_end,user,group,")
    else:
        assert is_json_error(r, 403)


def cell_api_me(ctx: Ctx, who: str, outcome: str) -> None:
    r = ctx.api(who, "GET", "me")
    check_status(r, outcome)
    if outcome == "ok":
        assert r.json()["user"] == who


def cell_api_refresh(ctx: Ctx, who: str, outcome: str) -> None:
    r = ctx.api(who, "POST", "inventory/refresh")
    check_status(r, outcome)
    if outcome == "ok":
        assert r.json()["message"].startswith("Inventory re-read")


def cell_api_drain(ctx: Ctx, who: str, outcome: str) -> None:
    r = ctx.api(who, "POST", f"devices/{TARGET_GPU}/drain", json={"reason": "matrix"})
    check_status(r, outcome)
    assert ctx.drained() == (outcome == "ok")


def cell_api_undrain(ctx: Ctx, who: str, outcome: str) -> None:
    ctx.ledger.set_drained(TARGET_GPU, True, "before")
    r = ctx.api(who, "DELETE", f"devices/{TARGET_GPU}/drain")
    check_status(r, outcome)
    assert ctx.drained() == (outcome != "ok")


def cell_api_release(ctx: Ctx, who: str, outcome: str) -> None:
    a = ctx.ledger.claim(SEAT, user="researcher", profile="shared-seat").allocation
    r = ctx.api(who, "DELETE", f"allocations/{a.id}")
    check_status(r, outcome)
    assert ctx.ledger.get(a.id).open == (outcome != "ok")


def cell_api_stop(ctx: Ctx, who: str, outcome: str) -> None:
    # the student's server is not running: stopping it (a no-op for the hub) frees the slice
    # their stale allocation holds
    a = ctx.ledger.claim(MIG_1G, user="student", profile="mig-small").allocation
    r = ctx.api(who, "DELETE", "users/student/server")
    check_status(r, outcome)
    assert ctx.ledger.get(a.id).open == (outcome != "ok")


def cell_api_stop_named(ctx: Ctx, who: str, outcome: str) -> None:
    # the hub has no server "train" for the student: an admin is told so, others are refused
    # before anything is looked up
    a = ctx.ledger.claim(
        MIG_1G, user="student", profile="mig-small", server_name="train"
    ).allocation
    r = ctx.api(who, "DELETE", "users/student/servers/train")
    check_status(r, outcome)
    assert is_json_error(r, r.status_code)
    if outcome == "not-found":
        assert "no server named" in r.json()["message"]
    assert ctx.ledger.get(a.id).open


def cell_api_own_server(action: str, path: str):
    """Keep / Move to CPU on the student's server, which is not running: the student is told
    so (409), everyone else is refused (403) before anything is looked up; nothing is kept."""

    def cell(ctx: Ctx, who: str, outcome: str) -> None:
        r = ctx.api(who, "POST", f"users/student/{path}/{action}")
        check_status(r, outcome)
        assert is_json_error(r, r.status_code)
        assert ctx.ledger.latest_keeps() == {}

    return cell


def cell_api_interaction(method: str, path: str):
    """The JupyterLab extension's report of the student's last keystroke: only the student may
    send or read it (everyone else, admins included, 403 before anything is held); a report
    the student sends is the time then held."""

    def cell(ctx: Ctx, who: str, outcome: str) -> None:
        at = datetime.now(timezone.utc).isoformat()
        kw = {"json": {"at": at}} if method == "POST" else {}
        r = ctx.api(who, method, f"users/student/{path}/interaction", **kw)
        check_status(r, outcome)
        if outcome != "ok":
            assert is_json_error(r, r.status_code)
        elif method == "POST":
            assert r.json()["at"] == at

    return cell


def cell_api_waitlist(ctx: Ctx, who: str, outcome: str) -> None:
    if who != "anonymous":
        ctx.ledger.join_waitlist(who, "mig-small", MIG_1G)
    try:
        r = ctx.api(who, "GET", "waitlist")
        check_status(r, outcome)
        if outcome == "ok":
            body = r.json()
            assert [(e["profile"], e["position"]) for e in body["entries"]] == [("mig-small", 1)]
            assert ("queue" in body) == (who in READERS)
        else:
            assert is_json_error(r, 403)
    finally:
        ctx.ledger.leave_waitlist(who)


def cell_api_join(ctx: Ctx, who: str, outcome: str) -> None:
    try:
        r = ctx.api(who, "POST", "waitlist", json={"profile": "mig-small"})
        check_status(r, outcome)
        queued = [e.user for e in ctx.ledger.waitlist("mig-small")]
        assert queued == ([who] if outcome == "ok" else [])
        if outcome == "ok":
            assert r.status_code == 201 and "number 1 in line" in r.json()["message"]
            bad = ctx.api(who, "POST", "waitlist", json={"profile": "cpu"})
            assert bad.status_code == 400 and "mig-small" in bad.json()["message"]
    finally:
        ctx.ledger.leave_waitlist(who)


def cell_api_leave(ctx: Ctx, who: str, outcome: str) -> None:
    ctx.ledger.join_waitlist("student", "mig-small", MIG_1G)
    if who != "anonymous":
        ctx.ledger.join_waitlist(who, "mig-small", MIG_1G)
    try:
        r = ctx.api(who, "DELETE", "waitlist/mig-small")
        check_status(r, outcome)
        # only one's own entry goes
        left = {e.user for e in ctx.ledger.waitlist("mig-small")}
        assert left == ({"student"} - {who} if outcome == "ok" else {"student"})
    finally:
        for name in ("student", who):
            ctx.ledger.leave_waitlist(name)


def cell_api_bookings(ctx: Ctx, who: str, outcome: str) -> None:
    from datetime import datetime, timedelta, timezone

    start = datetime.now(timezone.utc) + timedelta(hours=2)
    ctx.ledger.book(
        holder="DL101", groups=["students"], profile="mig-small", request=MIG_1G, count=1,
        starts_at=start, ends_at=start + timedelta(hours=2), ref="matrix",
    )  # fmt: skip
    try:
        r = ctx.api(who, "GET", "bookings?hours=6")
        check_status(r, outcome)
        if outcome == "ok":
            body = r.json()
            assert [b["holder"] for b in body["bookings"]] == ["DL101"]
            mig = [h for h in body["calendar"] if h["profile"] == "mig-small"]
            assert len(mig) == 6 and max(h["reserved"] for h in mig) == 1
            assert ctx.api(who, "GET", "bookings?hours=0").status_code == 400
            page = parse_html(ctx.page(who, "").text)
            assert page.find_all("tr", cls="booking", data_holder="DL101")
            hours = page.find_all("tr", cls="calendar-hour", data_profile="mig-small")
            assert hours and "1 of 2" in hours[0].text()
        else:
            assert is_json_error(r, 403)
    finally:
        ctx.ledger.cancel_booking(ref="matrix")


def cell_form_drain_node(ctx: Ctx, who: str, outcome: str) -> None:
    r = ctx.form(who, "actions/drainnode", {"node": NODE, f"reason:node:{NODE}": "matrix"})
    if outcome == "ok":
        assert r.status_code == 302 and ctx.node_drained()
        assert ctx.ledger.node(NODE).drain_reason == "matrix"
        page = parse_html(ctx.page(who, "").text)
        node = page.find("div", cls="node", data_node=NODE)
        assert node.attrs["data-state"] == "drained" and "matrix" in node.text()
        assert node.find_all("button", cls="undrain-node")
    else:
        assert r.status_code == 403 and not ctx.node_drained()


def cell_api_nodes(ctx: Ctx, who: str, outcome: str) -> None:
    r = ctx.api(who, "GET", "nodes")
    check_status(r, outcome)
    if outcome == "ok":
        [node] = [n for n in r.json()["nodes"] if n["name"] == NODE]
        assert node["state"] == "in-service" and node["engine"]["kind"] is None


def cell_api_node_drain(ctx: Ctx, who: str, outcome: str) -> None:
    r = ctx.api(who, "POST", f"nodes/{NODE}/drain", json={"reason": "matrix"})
    check_status(r, outcome)
    assert ctx.node_drained() == (outcome == "ok")
    free = [s for s in ctx.ledger.slices() if s["node"] == NODE and s["available"]]
    assert bool(free) == (outcome != "ok")


def cell_api_node_undrain(ctx: Ctx, who: str, outcome: str) -> None:
    ctx.ledger.set_node_drained(NODE, True, "before")
    r = ctx.api(who, "DELETE", f"nodes/{NODE}/drain")
    check_status(r, outcome)
    assert ctx.node_drained() == (outcome != "ok")


def cell_api_node_token(ctx: Ctx, who: str, outcome: str) -> None:
    r = ctx.api(who, "POST", "nodes/matrix-node/token")
    check_status(r, outcome)
    if outcome == "ok":
        assert (
            r.status_code == 201 and ctx.ledger.node_for_token(r.json()["token"]) == "matrix-node"
        )
    else:
        assert "token" not in r.json()


def cell_api_node_revoke(ctx: Ctx, who: str, outcome: str) -> None:
    token = ctx.ledger.issue_node_token("matrix-node")
    r = ctx.api(who, "DELETE", "nodes/matrix-node/token")
    check_status(r, outcome)
    assert (ctx.ledger.node_for_token(token) is None) == (outcome == "ok")


def cell_api_node_report(ctx: Ctx, who: str, outcome: str) -> None:
    r = ctx.api(who, "POST", f"nodes/{NODE}/report", json={})
    check_status(r, outcome)
    assert "Not a node agent" in r.json()["message"]


CELLS = {
    "GET /": cell_admin_page,
    "GET /me": cell_user_page,
    "POST /actions/drain": cell_form_drain,
    "POST /actions/release": cell_form_release,
    "GET api/inventory": cell_api_get("inventory", "nodes"),
    "GET api/allocations": cell_api_get("allocations", "allocations"),
    "GET api/usage": cell_api_get("usage", "groups"),
    "GET api/usage.csv": cell_api_usage_csv,
    "GET api/me": cell_api_me,
    "GET api/openapi.json": cell_api_get("openapi.json", "paths"),
    "POST api/inventory/refresh": cell_api_refresh,
    "POST api/devices/{uuid}/drain": cell_api_drain,
    "DELETE api/devices/{uuid}/drain": cell_api_undrain,
    "DELETE api/allocations/{id}": cell_api_release,
    "DELETE api/users/{user}/server": cell_api_stop,
    "DELETE api/users/{user}/servers/{name}": cell_api_stop_named,
    "GET api/waitlist": cell_api_waitlist,
    "POST api/waitlist": cell_api_join,
    "DELETE api/waitlist/{profile}": cell_api_leave,
    "GET api/bookings": cell_api_bookings,
    "POST /actions/drainnode": cell_form_drain_node,
    "GET api/nodes": cell_api_nodes,
    "POST api/nodes/{node}/drain": cell_api_node_drain,
    "DELETE api/nodes/{node}/drain": cell_api_node_undrain,
    "POST api/nodes/{node}/token": cell_api_node_token,
    "DELETE api/nodes/{node}/token": cell_api_node_revoke,
    "POST api/nodes/{node}/report": cell_api_node_report,
    "POST api/users/{user}/server/keep": cell_api_own_server("keep", "server"),
    "POST api/users/{user}/servers/{name}/keep": cell_api_own_server("keep", "servers/train"),
    "POST api/users/{user}/server/move-to-cpu": cell_api_own_server("move-to-cpu", "server"),
    "POST api/users/{user}/servers/{name}/move-to-cpu": cell_api_own_server(
        "move-to-cpu", "servers/train"
    ),
    "GET api/users/{user}/server/interaction": cell_api_interaction("GET", "server"),
    "POST api/users/{user}/server/interaction": cell_api_interaction("POST", "server"),
    "GET api/users/{user}/servers/{name}/interaction": cell_api_interaction("GET", "servers/train"),
    "POST api/users/{user}/servers/{name}/interaction": cell_api_interaction(
        "POST", "servers/train"
    ),
}


@pytest.mark.parametrize("who", WHO)
@pytest.mark.parametrize("endpoint", list(EXPECTED))
def test_authorisation_matrix(ctx, endpoint, who):
    CELLS[endpoint](ctx, who, EXPECTED[endpoint][who])


def test_matrix_covers_every_route():
    """A new page or endpoint without its row in the matrix fails here."""
    from jupyterhub_gpulab.service.web.api import api_handlers

    names = {
        "(?P<allocation_id>[^/]+)": "{id}", "(?P<uuid>[^/]+)": "{uuid}",
        "(?P<user>[^/]+)": "{user}", "(?P<name>[^/]*)": "{name}", "\\.": ".",
        "(?P<profile>[^/]+)": "{profile}", "(?P<node>[^/]+)": "{node}",
    }  # fmt: skip
    routes = set()
    for pattern, handler in api_handlers(PREFIX):
        path = pattern[len(PREFIX) :]
        for regex, name in names.items():
            path = path.replace(regex, name)
        for method in ("get", "post", "delete"):
            if method in vars(handler) and path not in ("api/?", "api/.*"):
                routes.add(f"{method.upper()} {path}")
    assert routes == {e for e in EXPECTED if " api/" in e}
    assert set(CELLS) == set(EXPECTED)


# -- XSRF ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "xsrf",
    [pytest.param(None, id="missing"), pytest.param("forged", id="wrong")],
)
def test_form_action_without_the_pages_xsrf_token_is_refused(ctx, xsrf):
    s = ctx.sessions["admin"]
    data = {"device": TARGET_GPU, "reason": "csrf"}
    if xsrf:
        data["_xsrf"] = xsrf
    r = s.post(
        ctx.url("actions/drain"),
        data=data,
        # a form another site made the admin's browser submit
        headers={"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"},
        allow_redirects=False,
        timeout=30,
    )
    assert r.status_code == 403
    assert not ctx.drained()


def test_api_change_with_the_login_cookie_needs_the_xsrf_header(ctx):
    s = ctx.sessions["admin"]
    url = ctx.url(f"api/devices/{TARGET_GPU}/drain")
    r = s.post(url, json={"reason": "no header"}, headers={"Sec-Fetch-Mode": "cors"}, timeout=30)
    assert r.status_code == 403 and is_json_error(r, 403)
    assert not ctx.drained()
    r = s.post(
        url,
        json={"reason": "with header"},
        headers={"Sec-Fetch-Mode": "cors", "X-XSRFToken": service_xsrf(s)},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    assert ctx.drained()


# -- what people see ------------------------------------------------------------------------------


def test_admin_page_shows_allocations_groups_and_refusals(ctx):
    mig = ctx.ledger.claim(
        MIG_1G, user="student", profile="mig-small", charge_groups=[("students", 3)]
    ).allocation
    ctx.ledger.claim(
        SliceRequest(kind=SliceKind.GPU, model="A40"),
        user="researcher",
        profile="a40",
        server_name="big",
    )
    for _ in range(2):
        ctx.ledger.record_refusal("student", "mig-small", "quota", "You already hold 1 GPU slice")
    ctx.ledger.record_refusal("student", "a40", "not-entitled", "not allowed")
    ctx.ledger.set_drained("GPU-t4-0002", True, "fan noise")

    # the service asks the hub for running servers every 2 s (c.GPULabService.hub_poll_interval)
    deadline = time.monotonic() + 15
    while True:
        page = parse_html(ctx.page("admin", "").text)
        row = page.find("tr", cls="allocation", data_allocation=str(mig.id))
        if "stale" in row.text() or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert "stale" in row.text()  # the hub runs no server for it
    assert "student" in row.text() and "mig-small" in row.text()
    assert "MIG 1g.5gb on GPU 0 (NVIDIA A100-SXM4-40GB)" in row.text()
    assert row.find("button", cls="release")
    assert page.find("tr", cls="allocation", data_user="researcher", data_server="big")
    t4 = page.find("tr", cls="device", data_uuid="GPU-t4-0002")
    assert t4.attrs["data-drained"] == "true" and "fan noise" in t4.text()
    a100 = page.find("tr", cls="device", data_uuid="GPU-a100-0000")
    assert "MIG: 1g.5gb ×2, 2g.10gb, 3g.20gb" in a100.text()
    assert page.find("span", data_slice=mig.slice_id).attrs["data-state"] == "held"
    assert (
        page.find("tr", cls="group", data_group="students").find("td", cls="held").text()
        == "1 of 3"
    )
    assert page.find("tr", data_reason="quota").find("td", cls="count").text() == "2"
    assert page.find("tr", data_reason="not-entitled").find("td", cls="count").text() == "1"
    assert "no NVML on this host" in page.find("span", id="nvml-status").text()


@pytest.fixture
def servers(ctx):
    """``servers(user, profile)`` starts a real server (its spawner claims the slice); all are
    stopped afterwards."""
    require_or_skip(docker_available(), "Docker")
    started = []

    def start(user: str, profile: str) -> None:
        r = ctx.hub.spawn(user, {"profile": profile})
        assert r.status_code in (201, 202), r.text
        started.append(user)
        ctx.hub.wait_ready(user, timeout=90)

    yield start
    for user in started:
        ctx.hub.stop_server(user)


@pytest.mark.docker
def test_user_page_shows_my_slice_its_isolation_my_limits_and_what_i_may_start(ctx, servers):
    servers("student", "mig-small")
    servers("researcher", "shared-seat")

    page = parse_html(ctx.page("student", "me").text)

    [card] = page.find_all("div", cls="slice")
    text = card.text()
    assert "NVIDIA A100-SXM4-40GB" in text and "MIG instance 1g.5gb" in text
    assert card.find("span", cls="isolation").text() == "hard isolation"
    assert "You hold 1 of at most 1 GPU slice" in page.find("p", id="my-use").text()
    assert "1 of 3 in use" in page.find("tr", data_group="students").text()
    free = {
        r.attrs["data-profile"]: r.find("td", cls="free").text()
        for r in page.find_all("tr", cls="profile")
    }
    limit_note = "you hold all the slices you may; stop a server first"
    assert free == {
        "cpu": "no GPU needed",
        "mig-small": "1 of 2 free " + limit_note,
        "shared-seat": "3 of 4 free " + limit_note,
    }

    seat_page = parse_html(ctx.page("researcher", "me").text)
    assert seat_page.find("span", cls="isolation").text() == "soft isolation"
    assert not seat_page.find_all("small", cls="at-limit")  # researchers may hold more
    assert "a40" in {r.attrs["data-profile"] for r in seat_page.find_all("tr", cls="profile")}


def test_hub_home_page_links_to_the_service(ctx):
    r = ctx.sessions["student"].get(ctx.hub.url + "/hub/home", timeout=30)
    links = {a.attrs.get("href") for a in parse_html(r.text).find_all("a", cls="dropdown-item")}
    assert PREFIX in links


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method, path, body, status",
    [
        pytest.param("POST", "devices/GPU-nope/drain", None, 404, id="unknown-device"),
        pytest.param("DELETE", "allocations/999999", None, 404, id="unknown-allocation"),
        pytest.param("GET", "no-such-endpoint", None, 404, id="unknown-endpoint"),
        pytest.param("POST", f"devices/{TARGET_GPU}/drain", b"{not json", 400, id="bad-json"),
        pytest.param("DELETE", "users/nobody/server", None, 404, id="unknown-user"),
    ],
)
def test_api_errors_are_json(ctx, method, path, body, status):
    r = ctx.api("admin", method, path, data=body)
    assert r.status_code == status
    assert r.headers["Content-Type"].startswith("application/json")
    assert is_json_error(r, status)


@pytest.mark.parametrize(
    "method, path, body, says",
    [
        pytest.param(
            "DELETE",
            f"devices/{TARGET_GPU}/drain",
            b'{"zz',
            "not valid JSON",
            id="undrain-bad-json",
        ),
        pytest.param(
            "DELETE",
            f"devices/{TARGET_GPU}/drain",
            b'{"reason": "x"}',
            "Unknown field 'reason'",
            id="undrain-field",
        ),
        pytest.param(
            "DELETE", f"nodes/{NODE}/drain", b"[1]", "must be a JSON object", id="node-undrain-list"
        ),
        pytest.param(
            "POST", "inventory/refresh", b'{"reason": ', "not valid JSON", id="refresh-bad-json"
        ),
    ],
)
def test_an_action_that_takes_no_body_refuses_one_it_was_sent_and_changes_nothing(
    ctx, method, path, body, says
):
    """A client that sends a body means something by it: a truncated or unexpected one is a 400,
    not silently ignored while the action runs (here: the device and node stay drained)."""
    ctx.ledger.set_drained(TARGET_GPU, True)
    ctx.ledger.set_node_drained(NODE, True)
    r = ctx.api("admin", method, path, data=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and is_json_error(r, 400)
    assert says in r.json()["message"]
    assert ctx.drained() and ctx.node_drained()


# -- the API contract ------------------------------------------------------------------------------


def _renamed(body, path: tuple, new: str):
    """``body`` (decoded JSON) with the field at ``path`` renamed to ``new``."""
    body = json.loads(json.dumps(body))
    *parents, key = path
    node = body
    for p in parents:
        node = node[p]
    node[new] = node.pop(key)
    return body


@pytest.mark.parametrize(
    "method, path, status, field",
    [
        pytest.param(
            "GET",
            "inventory",
            200,
            ("nodes", 0, "devices", 0, "slices", 0, "holder"),
            id="inventory-slice-holder",
        ),
        pytest.param("GET", "allocations", 200, ("hub", "reachable"), id="allocations-hub"),
        pytest.param("GET", "usage", 200, ("gpu_hours", "period", "start_date"), id="usage-period"),
        pytest.param("GET", "me", 200, ("limits", "held"), id="me-limits"),
        pytest.param("GET", "no-such-endpoint", 404, ("message",), id="error-message"),
        pytest.param("DELETE", "allocations/999999", 404, ("status",), id="error-status"),
    ],
)
def test_a_renamed_response_field_breaks_the_api_contract(ctx, method, path, status, field):
    """Every real response is checked against the OpenAPI document (``api_contract``); this is
    the check's own test: the real body passes, the same body with one field renamed does not."""
    r = ctx.api("admin", method, path)
    assert r.status_code == status
    api_path = "/" + path
    check_body(api_path, method, status, r.json())
    with pytest.raises(AssertionError, match=f"'{field[-1]}' is a required property"):
        check_body(api_path, method, status, _renamed(r.json(), field, field[-1] + "_renamed"))


# -- paging ----------------------------------------------------------------------------------------

PAGED = {"Accept": "application/jupyterhub-pagination+json"}


def test_allocations_are_paged_like_jupyterhubs_api_and_the_admin_page_pages_them(ctx):
    held = [ctx.ledger.claim(SEAT, user=f"pager{i % 2}", profile="shared-seat",
                             server_name=f"s{i}").allocation for i in range(4)]  # fmt: skip
    held += [ctx.ledger.claim(MIG_1G, user="pager2", profile="mig-small").allocation
             for _ in range(2)]  # fmt: skip
    ids = [a.id for a in held]
    # a client that follows `next` sees every open allocation once, in id order
    r = ctx.api("admin", "GET", "allocations?limit=4", headers=dict(PAGED))
    assert r.status_code == 200, r.text
    body = r.json()
    assert [a["id"] for a in body["items"]] == ids[:4]
    assert body["_pagination"]["total"] == 6 and body["_pagination"]["limit"] == 4
    nxt = body["_pagination"]["next"]
    assert (nxt["offset"], nxt["limit"]) == (4, 4)
    r = requests.get(nxt["url"], headers={**PAGED, "Authorization": f"token {ctx.tokens['admin']}"},
                     timeout=30)  # fmt: skip
    assert [a["id"] for a in r.json()["items"]] == ids[4:]
    assert r.json()["_pagination"]["next"] is None
    # filtered and sorted on the server
    r = ctx.api("admin", "GET", "allocations?user=pager1&sort=-id", headers=dict(PAGED))
    assert [a["id"] for a in r.json()["items"]] == [ids[3], ids[1]]
    r = ctx.api("admin", "GET", "allocations?kind=mig", headers=dict(PAGED))
    assert {a["user"] for a in r.json()["items"]} == {"pager2"}
    # without the Accept header: the older shape, at most 200 rows, _pagination beside them
    r = ctx.api("admin", "GET", "allocations?limit=2")
    assert [a["id"] for a in r.json()["allocations"]] == ids[:2]
    assert r.json()["_pagination"]["total"] == 6
    # malformed arguments: a 400 that says the form, and nothing changes
    for query, says in (("offset=-3", "offset must be a whole number"),
                        ("limit=0", "limit must be a whole number of at least 1"),
                        ("sort=secret", "sort must be one of"),
                        ("kind=tpu", "kind must be one of gpu, mig, shared")):  # fmt: skip
        r = ctx.api("admin", "GET", f"allocations?{query}", headers=dict(PAGED))
        assert r.status_code == 400 and says in r.json()["message"], (query, r.text)
    assert [a.id for a in ctx.ledger.open_allocations()] == ids
    # the admin page shows one page of them, says how many there are and links the next page
    page = parse_html(ctx.page("admin", "?limit=4&sort=-id").text)
    shown = [int(tr.attrs["data-allocation"]) for tr in page.find_all("tr", cls="allocation")]
    assert shown == ids[::-1][:4]
    assert page.find("span", cls="allocations-total").text() == "6"
    assert "1–4 of 6" in page.find("p", cls="pager").text()
    following = page.find("a", cls="next").attrs["href"]
    page = parse_html(ctx.page("admin", following).text)
    assert [int(tr.attrs["data-allocation"]) for tr in page.find_all("tr", cls="allocation")] == [
        ids[1],
        ids[0],
    ]
    for query, says in (("offset=minus", "offset must be a whole number"),
                        ("devices_offset=-50", "devices_offset must be a whole number"),
                        ("users_offset=x", "users_offset must be a whole number")):  # fmt: skip
        r = ctx.page("admin", "?" + query)
        assert r.status_code == 400 and says in r.text, (query, r.status_code)

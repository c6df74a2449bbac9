"""Authorisation follows the scopes a request carries, and revocation takes effect within seconds.

A real hub starts the real service (``configure_service``); people log in through the hub's
login form and OAuth, tokens are made and revoked through the hub's REST API, as an admin would.
"""

from __future__ import annotations

import secrets
import time

import pytest
import requests
from html_support import parse_html
from inprocess_support import InProcessService
from ledger_support import release_all, undrain_all
from service_support import (
    PREFIX,
    login,
    make_hub,
    start_hub,
)

from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.service.web.grants import RoleGrants

#: every response of the service's api/ is checked against its OpenAPI document
pytestmark = pytest.mark.usefixtures("api_contract")

ACCESS = "access:services!service=gpulab"
TARGET_GPU = "GPU-p40-0003"
SEAT = SliceRequest(kind=SliceKind.SHARED)
#: c.GPULabService.auth_cache_max_age's default (seconds), plus the hub's and our polling.
REVOCATION_WITHIN = 5 + 3


@pytest.fixture(scope="module")
def hub(service_hub):
    return service_hub


@pytest.fixture(scope="module")
def admin(hub):
    return login(hub, "admin")


@pytest.fixture(autouse=True)
def clean_lab(ledger):
    yield
    undrain_all(ledger)
    release_all(ledger)


def make_token(hub, session: requests.Session, name: str, scopes: list[str] | None = None):
    """``name`` makes a token for themself on the hub (as on /hub/token), limited to
    ``scopes`` (``None``: all of their own)."""
    body = {"note": "scopes test"} if scopes is None else {"note": "scopes test", "scopes": scopes}
    return session.post(
        f"{hub.url}/hub/api/users/{name}/tokens",
        json=body,
        headers={"X-XSRFToken": session.cookies.get("_xsrf", path="/hub/")},
        timeout=30,
    )


def api(hub, token: str, method: str, path: str, **kw) -> requests.Response:
    return requests.request(
        method,
        hub.url + PREFIX + "api/" + path,
        headers={"Authorization": f"token {token}"},
        timeout=30,
        **kw,
    )


def drained(ledger) -> bool:
    return next(d for d in ledger.devices() if d["uuid"] == TARGET_GPU)["drained"]


def wait_until(check, timeout: float) -> float:
    """Seconds until ``check()`` holds; fails after ``timeout``."""
    t0 = time.monotonic()
    while not check():
        assert time.monotonic() - t0 < timeout, f"not within {timeout} s"
        time.sleep(0.2)
    return time.monotonic() - t0


# -- the admin flag is not a permission ---------------------------------------------------------


@pytest.mark.parametrize(
    "method, path",
    [
        ("POST", f"devices/{TARGET_GPU}/drain"),
        ("DELETE", f"devices/{TARGET_GPU}/drain"),
        ("DELETE", "allocations/{id}"),
        ("DELETE", "users/researcher/server"),
        ("POST", "inventory/refresh"),
        ("GET", "inventory"),
        ("GET", "allocations"),
        ("GET", "usage"),
    ],
)
def test_a_hub_admins_token_limited_to_access_may_not_act_or_read(hub, ledger, admin, method, path):
    token = make_token(hub, admin, "admin", [ACCESS]).json()["token"]
    if method == "DELETE" and "drain" in path:
        ledger.set_drained(TARGET_GPU, True, "before")
    a = ledger.claim(SEAT, user="researcher", profile="shared-seat").allocation

    r = api(hub, token, method, path.format(id=a.id))

    assert r.status_code == 403, r.text
    assert r.json()["message"] == (
        "This needs the scope custom:gpulab:" + ("read." if method == "GET" else "admin.")
    )
    assert drained(ledger) == (method == "DELETE" and "drain" in path)
    assert ledger.get(a.id).open
    # the same token still opens its owner's own page
    assert api(hub, token, "GET", "me").json()["user"] == "admin"


def test_a_token_with_the_gpulab_admin_scope_may_act(hub, ledger, admin):
    # JupyterHub admins hold custom:gpulab:admin through the gpulab-admin role, so they may put
    # it on a token of theirs (the hub refuses scopes the owner lacks)
    r = make_token(hub, admin, "admin", [ACCESS, "custom:gpulab:admin"])
    assert r.status_code == 201, r.text
    token = r.json()["token"]

    r = api(hub, token, "POST", f"devices/{TARGET_GPU}/drain", json={"reason": "scoped"})

    assert r.status_code == 200, r.text
    assert drained(ledger)
    assert api(hub, token, "GET", "inventory").status_code == 200  # admin includes read


def test_a_token_without_the_services_access_is_told_which_scope_it_lacks(hub, admin):
    """A valid hub token that lacks access to this service is not "no token": the answer names
    the scope, where an admin scripting the API would otherwise look for a typo in the header."""
    token = make_token(hub, admin, "admin", ["read:users"]).json()["token"]
    assert requests.get(f"{hub.url}/hub/api/users/admin",
                        headers={"Authorization": f"token {token}"}, timeout=30).ok  # fmt: skip

    r = api(hub, token, "GET", "allocations")

    assert r.status_code == 403
    assert "did not accept this token" in r.json()["message"]
    assert ACCESS in r.json()["message"]
    r = requests.get(hub.url + PREFIX + "api/allocations", timeout=30)  # no token at all
    assert r.status_code == 403 and "send 'Authorization: token" in r.json()["message"]


# -- page logins ask for what the user holds --------------------------------------------------------


@pytest.mark.parametrize(
    "who, sees",
    [
        ("student", "their page"),
        ("researcher", "their page"),
        ("instructor", "read-only"),
        ("admin", "actions"),
    ],
)
def test_a_page_login_asks_only_for_scopes_the_user_holds(hub, who, sees):
    before = len(hub.log_path.read_text(errors="replace").splitlines())

    s = login(hub, who)
    r = s.get(hub.url + PREFIX, allow_redirects=False, timeout=30)

    log = hub.log_path.read_text(errors="replace").splitlines()[before:]
    # JupyterHub warns "... requested scopes ... granting only ..." for every scope it drops
    warned = [line for line in log if line.startswith(("[W", "[E")) and "scope" in line]
    assert warned == [], "\n".join(warned)
    if sees == "their page":
        assert r.status_code == 302 and r.headers["Location"] == PREFIX + "me"
    else:
        assert r.status_code == 200
        page = parse_html(r.text)
        assert bool(page.find_all("tr", cls="device")), "the admin page shows the devices"
        assert bool(page.find_all("button", cls="drain")) == (sees == "actions")


# -- revocation ---------------------------------------------------------------------------------------


def test_a_revoked_token_stops_working_within_seconds(hub, admin):
    r = make_token(hub, admin, "admin")
    token, token_id = r.json()["token"], r.json()["id"]
    assert api(hub, token, "GET", "inventory").status_code == 200  # now cached by the service

    r = admin.delete(
        f"{hub.url}/hub/api/users/admin/tokens/{token_id}",
        headers={"X-XSRFToken": admin.cookies.get("_xsrf", path="/hub/")},
        timeout=30,
    )
    assert r.status_code == 204, r.text

    took = wait_until(
        lambda: api(hub, token, "GET", "inventory").status_code == 403, REVOCATION_WITHIN + 10
    )
    print(f"revoked token refused after {took:.1f} s")
    assert took <= REVOCATION_WITHIN


def test_removing_a_user_from_a_group_stops_their_access_within_seconds(hub):
    hub.create_user("ta", ["instructors"])  # instructors hold custom:gpulab:read
    s = login(hub, "ta")
    token = make_token(hub, s, "ta").json()["token"]
    assert api(hub, token, "GET", "inventory").status_code == 200
    assert s.get(hub.url + PREFIX, allow_redirects=False, timeout=30).status_code == 200

    r = hub.api("DELETE", "/groups/instructors/users", json={"users": ["ta"]})
    assert r.status_code == 200, r.text

    def refused() -> bool:
        page = s.get(hub.url + PREFIX, allow_redirects=False, timeout=30)
        return (
            api(hub, token, "GET", "inventory").status_code == 403
            and page.status_code == 302
            and page.headers["Location"] == PREFIX + "me"
        )

    took = wait_until(refused, REVOCATION_WITHIN + 10)
    print(f"removed group member refused after {took:.1f} s")
    assert took <= REVOCATION_WITHIN


def test_a_scope_the_hub_does_not_grant_after_all_is_asked_for_once(tmp_path):
    # the service believes every user holds custom:gpulab:read (a config the hub reads
    # differently); the hub grants the student none: one more login asks for it, then the
    # student keeps their page, with no login loop
    token = secrets.token_hex(16)
    hub = make_hub(tmp_path, managed=False, api_token=token)
    believes = RoleGrants(everyone=frozenset({"custom:gpulab:read"}))
    boot = InProcessService(hub, token).start()  # the hub waits for its external service
    try:
        start_hub(tmp_path, hub=hub)
    finally:
        boot.stop()
    service = InProcessService(hub, token, grants=believes).start()
    try:
        s = login(hub, "student")  # raises TooManyRedirects on a loop
        for _ in range(2):
            r = s.get(hub.url + PREFIX, allow_redirects=False, timeout=30)
            assert r.status_code == 302 and r.headers["Location"] == PREFIX + "me"
            r = s.get(hub.url + PREFIX + "me", allow_redirects=False, timeout=30)
            assert r.status_code == 200
        authorize = [line for line in hub.log_tail(400).splitlines() if "oauth2/authorize" in line]
        assert len(authorize) == 2  # the login, and one more asking for the scope
    finally:
        service.stop()
        hub.stop()

"""The course web layer and pre-start without a Docker engine: a real hub (subprocess, real proxy)
whose ``SimpleLocalProcessSpawner`` runs ``standin_singleuser.py`` as every course server, and the
gpulab service in this process (``InProcessService``) on the hub's real SQLite ledger, so its
course API, pages, forms, pre-start and scheduled pass are exercised (and measured by coverage)
as staff and admins use them.

Bounded input on every course surface (issue 20.7): each bad query parameter, date, form field
or body is a 4xx (JSON ``{"status", "message"}``, or the page's message) and changes nothing.
A student removed from the roster loses their running course server: at once when staff remove
them here, at the next scheduled pass when the hub's admin panel or the identity provider does.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pytest
import requests
from service_support import (
    PREFIX,
    InProcessService,
    ledger_for,
    login,
    make_hub,
    service_xsrf,
    start_hub,
    user_token,
)

from jupyterhub_gpulab.courses.store import CourseStore

pytestmark = pytest.mark.usefixtures("api_contract")

STANDIN = Path(__file__).with_name("standin_singleuser.py")
COURSE = {"slug": "ml101", "title": "ML 101", "profiles": ["cpu"], "prestart": True}
STUDENTS = ("stu1", "stu2", "stu3")


@pytest.fixture(scope="module")
def token():
    return secrets.token_hex(16)


@pytest.fixture(scope="module")
def hub(tmp_path_factory, token):
    workdir = tmp_path_factory.mktemp("courses-web-hub")
    home = workdir / "home"
    extra = f"""
import sys
c.JupyterHub.spawner_class = "simple"
c.Spawner.cmd = [sys.executable, {str(STANDIN)!r}]
c.SimpleLocalProcessSpawner.home_dir_template = {str(home) + "/{username}"!r}
c.GPULab.node_name = "courses-web-{secrets.token_hex(3)}"
c.GPULabCourses.courses = [{COURSE!r}]
c.GPULabCourses.prestart_backoff = 0.5
c.GPULabCourses.check_interval = 3600   # the tests run each pass themselves
c.GPULabCourses.ready_timeout = 60
# what configure_courses gives the service (its course hook is DockerSpawner's)
for role in c.JupyterHub.load_roles:
    if role["name"] == "gpulab-service":
        role["scopes"] = list(role["scopes"]) + ["admin:groups", "servers"]
"""
    hub = make_hub(workdir, managed=False, api_token=token, extra=extra)
    try:
        boot = InProcessService(hub, token).start()
        try:
            start_hub(hub.workdir, hub=hub)
        finally:
            boot.stop()
        hub.create_user("ta1", ["ml101-staff"])
        for name in STUDENTS:
            hub.create_user(name, ["ml101"])
        yield hub
    finally:
        hub.stop()


@pytest.fixture(scope="module")
def svc(hub, token):
    svc = InProcessService(hub, token).start()
    yield svc
    svc.stop()


@pytest.fixture(scope="module")
def admin(hub, svc):
    return login(hub, "admin")


@pytest.fixture(scope="module")
def ta(hub, svc):
    return login(hub, "ta1")


@pytest.fixture(scope="module")
def admin_api(hub, admin):
    return {"Authorization": f"token {user_token(hub, admin, 'admin')}"}


@pytest.fixture(scope="module")
def ta_api(hub, ta):
    return {"Authorization": f"token {user_token(hub, ta, 'ta1')}"}


@pytest.fixture
def ledger(hub):
    ledger = ledger_for(hub)
    yield ledger
    ledger.close()


def api(hub, method: str, path: str, headers: dict, **kw) -> requests.Response:
    return requests.request(method, hub.url + PREFIX + "api/" + path, headers=headers,
                            timeout=60, **kw)  # fmt: skip


def record(ledger) -> dict:
    return CourseStore(ledger.engine).get("ml101").course.to_dict()


def post_form(hub, session, action: str, data: dict) -> str:
    """Post a course page form as the browser would; the page it comes back to (its message)."""
    r = session.post(
        hub.url + PREFIX + "courses/ml101/actions/" + action,
        data={**data, "_xsrf": service_xsrf(session)},
        timeout=60,
    )
    assert r.status_code == 200, (r.status_code, r.text[:300])
    assert r.url.endswith(PREFIX + "courses/ml101"), r.url
    return r.text


# -- bounded input ----------------------------------------------------------------------------


@pytest.mark.parametrize("hours", ["²", "٣", "0", "-1", "1e3", "673", "9" * 40, ""])
def test_a_bad_bookings_hours_is_a_400_naming_the_range(hub, admin_api, hours):
    r = api(hub, "GET", "bookings", admin_api, params={"hours": hours})
    assert r.status_code == 400, r.text
    assert "hours must be a whole number from 1 to 672" in r.json()["message"]


def test_bookings_answer_a_good_hours(hub, admin_api):
    r = api(hub, "GET", "bookings", admin_api, params={"hours": "24"})
    assert r.status_code == 200, r.text
    assert isinstance(r.json()["calendar"], list)


DEEP = "[" * 15000


def test_a_deeply_nested_record_is_refused_everywhere_and_changes_nothing(
    hub, admin, admin_api, ledger
):
    before = record(ledger)
    r = api(hub, "PUT", "courses/ml101", {**admin_api, "Content-Type": "application/json"},
            data=DEEP)  # fmt: skip
    assert r.status_code == 400 and "not valid JSON" in r.json()["message"]
    page = post_form(hub, admin, "record", {"record": DEEP})
    assert "Not saved: the record is not JSON" in page
    r = admin.post(
        hub.url + PREFIX + "courses",
        data={"record": DEEP, "_xsrf": service_xsrf(admin)},
        timeout=60,
    )
    assert r.status_code == 200 and "Course not created: the record is not JSON" in r.text
    assert record(ledger) == before


@pytest.mark.parametrize("due", ["0001-01-01T00:00", "9999-12-31T23:59", "1999-12-31T23:00"])
def test_an_assignment_due_out_of_bounds_is_refused_on_api_and_form(
    hub, admin, admin_api, ledger, due
):
    before = record(ledger)
    r = api(hub, "PUT", "courses/ml101", admin_api,
            json={"assignments": [{"name": "hw1", "due": due}]})  # fmt: skip
    assert r.status_code == 400, r.text
    assert "must lie in the years 2000 to 2099" in r.json()["message"]
    page = post_form(hub, admin, "assignment", {"name": "hw1", "due": due})
    assert "Not saved" in page and "must lie in the years 2000 to 2099" in page
    assert record(ledger) == before


@pytest.mark.parametrize("field", ["lead_minutes", "reserve", "grace_minutes"])
@pytest.mark.parametrize("value", ["²", "1_0", "9" * 30])
def test_a_seats_form_number_that_is_no_number_is_refused(hub, ta, ledger, field, value):
    before = record(ledger)
    page = post_form(hub, ta, "seats", {field: value})
    assert f"Not saved: {field} must be a whole number" in page
    assert record(ledger) == before


@pytest.mark.parametrize("index", ["²", "-1", "7", "x"])
def test_removing_an_entry_by_a_bad_index_changes_nothing(hub, ta, ledger, index):
    before = record(ledger)
    page = post_form(hub, ta, "session-remove", {"kind": "dates", "index": index})
    assert "Not saved" in page
    assert record(ledger) == before


def test_the_admins_create_form_refuses_a_superscript_number(hub, admin, ledger):
    r = admin.post(
        hub.url + PREFIX + "courses",
        data={"slug": "cv202", "lead_minutes": "²", "_xsrf": service_xsrf(admin)},
        timeout=60,
    )
    assert r.status_code == 200
    assert "Course not created: lead_minutes must be a whole number" in r.text
    assert CourseStore(ledger.engine).get("cv202") is None


# -- a removed student loses the course server ------------------------------------------------


def running(hub, user: str) -> bool:
    s = hub.server(user, "ml101")
    return bool(s and (s.get("ready") or s.get("pending") == "spawn"))


def test_start_all_starts_the_roster_and_a_removed_student_is_stopped(hub, svc, ta_api, ledger):
    r = api(hub, "POST", "courses/ml101/start", ta_api)
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        progress = api(hub, "GET", "courses/ml101/progress", ta_api).json()["progress"]
        if progress["finished_at"]:
            break
        time.sleep(1)
    states = {s["user"]: s["state"] for s in progress["servers"]}
    assert states == {u: "ready" for u in STUDENTS}, progress
    for u in STUDENTS:
        hub.wait_ready(u, "ml101", timeout=30)

    # staff remove stu1 here: its server stops now
    r = api(hub, "POST", "courses/ml101/roster", ta_api, json={"remove": ["stu1"]})
    assert r.status_code == 200 and "course servers stopped: stu1" in r.json()["message"]
    wait_stopped(hub, "stu1")
    assert running(hub, "stu2") and running(hub, "stu3")

    # the hub's admin panel removes stu2: the next pass stops it, and no one else's
    r = hub.api("DELETE", "/groups/ml101/users", json={"users": ["stu2"]})
    assert r.status_code == 200, r.text
    svc.call(svc.service.courses.check_due)
    wait_stopped(hub, "stu2")
    assert running(hub, "stu3")
    actions = [a.action for a in CourseStore(ledger.engine).audit("ml101")]
    assert actions.count("stop-removed") == 2
    hub.stop_server("stu3", "ml101")


def wait_stopped(hub, user: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not running(hub, user):
            return
        time.sleep(0.5)
    raise AssertionError(f"{user}'s course server still runs: {hub.server(user, 'ml101')}")


def test_a_form_removal_stops_the_server_too(hub, svc, ta, ledger):
    hub.api("POST", "/groups/ml101/users", json={"users": ["stu1"]})
    r = hub.spawn("stu1", name="ml101")
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("stu1", "ml101", timeout=30)
    page = post_form(hub, ta, "remove", {"user": "stu1"})
    assert "stu1 removed from the roster; their course server was stopped" in page
    wait_stopped(hub, "stu1")
    hub.api("POST", "/groups/ml101/users", json={"users": ["stu1", "stu2"]})

"""The course web layer and pre-start without a Docker engine: a real hub (subprocess, real proxy)
whose ``SimpleLocalProcessSpawner`` runs ``standin_singleuser.py`` as every course server, and the
gpulab service in this process (``InProcessService``) on the hub's real SQLite ledger, so its
course API, pages, forms, pre-start and scheduled pass are exercised (and measured by coverage)
as staff and admins use them.

Bounded input on every course surface (issue 20.7): each bad query parameter, date, form field
or body is a 4xx (JSON ``{"status", "message"}``, or the page's message) and changes nothing.
A student removed from the roster loses their running course server: at once when staff remove
them here, at the next scheduled pass when the hub's admin panel or the identity provider does.

One module, one hub (started once, some 20 s): that is why it runs past 400 lines.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pytest
import requests
from inprocess_support import InProcessService, inprocess_service_hub
from service_support import (
    PREFIX,
    login,
    service_xsrf,
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
# stu3's first two spawns fail (pre-start retries them with back-off)
def _flaky(spawner):
    from pathlib import Path
    if spawner.user.name == "stu3" and spawner.name == "ml101":
        tries = Path({str(workdir)!r}) / "stu3-tries"
        n = int(tries.read_text()) if tries.exists() else 0
        tries.write_text(str(n + 1))
        if n < 2:
            raise RuntimeError("stu3's spawn fails (test)")
c.Spawner.pre_spawn_hook = _flaky
# what configure_courses gives the service (its course hook is DockerSpawner's)
for role in c.JupyterHub.load_roles:
    if role["name"] == "gpulab-service":
        role["scopes"] = list(role["scopes"]) + ["admin:groups", "servers"]
"""
    users = {"ta1": ["ml101-staff"], **{name: ["ml101"] for name in STUDENTS}}
    with inprocess_service_hub(workdir, token, extra=extra, users=users) as hub:
        yield hub


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


def running(hub, user: str) -> bool:
    s = hub.server(user, "ml101")
    return bool(s and (s.get("ready") or s.get("pending") == "spawn"))


def wait_stopped(hub, user: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not running(hub, user):
            return
        time.sleep(0.5)
    raise AssertionError(f"{user}'s course server still runs: {hub.server(user, 'ml101')}")


def wait_run(hub, headers: dict, timeout: float = 120) -> dict:
    """The latest start-all (or stop-all) of ml101 once it finished."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        progress = api(hub, "GET", "courses/ml101/progress", headers).json()["progress"]
        if progress and progress["finished_at"]:
            return progress
        time.sleep(1)
    raise AssertionError(f"the run did not finish: {progress}")


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


def test_start_all_starts_the_roster_and_a_removed_student_is_stopped(hub, svc, ta_api, ledger):
    r = api(hub, "POST", "courses/ml101/start", ta_api)
    assert r.status_code == 202, r.text
    progress = wait_run(hub, ta_api)
    states = {s["user"]: s["state"] for s in progress["servers"]}
    assert states == {u: "ready" for u in STUDENTS}, progress
    # stu3's first two spawns failed: retried with back-off, ready at the third
    assert {s["user"]: s["attempts"] for s in progress["servers"]}["stu3"] == 3
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


def test_a_form_removal_stops_the_server_too(hub, svc, ta, ledger):
    hub.api("POST", "/groups/ml101/users", json={"users": ["stu1"]})
    r = hub.spawn("stu1", name="ml101")
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("stu1", "ml101", timeout=30)
    page = post_form(hub, ta, "remove", {"user": "stu1"})
    assert "stu1 removed from the roster; their course server was stopped" in page
    wait_stopped(hub, "stu1")
    hub.api("POST", "/groups/ml101/users", json={"users": ["stu1", "stu2"]})


# -- what staff and admins do: the API ------------------------------------------------------


@pytest.fixture(scope="module")
def student_api(hub, svc):
    s = login(hub, "stu3")
    return {"Authorization": f"token {user_token(hub, s, 'stu3')}"}


def test_who_sees_which_course(hub, admin_api, ta_api, student_api):
    mine = api(hub, "GET", "courses", ta_api).json()
    assert [c["slug"] for c in mine["courses"]] == ["ml101"] and "attention" not in mine
    assert "attention" in api(hub, "GET", "courses", admin_api).json()
    assert api(hub, "GET", "courses", student_api).json()["courses"] == []
    r = api(hub, "GET", "courses/ml101", student_api)
    assert r.status_code == 403 and "ml101-staff" in r.json()["message"]
    assert api(hub, "GET", "courses/nope1", ta_api).status_code == 404
    view = api(hub, "GET", "courses/ml101", ta_api).json()
    assert {row["user"] for row in view["roster"]} == set(STUDENTS)
    assert view["attention"] == []


def test_admins_create_courses_and_staff_edit_only_their_fields(hub, admin_api, ta_api, ledger):
    new = {"slug": "cv202", "profiles": ["cpu"]}
    assert hub.api("GET", "/groups/cv202").status_code == 404
    assert api(hub, "POST", "courses", admin_api, json=new).status_code == 201
    # the hub owns the groups here: the course's roster and staff groups exist, empty
    for group in ("cv202", "cv202-staff"):
        r = hub.api("GET", f"/groups/{group}")
        assert r.status_code == 200 and r.json()["users"] == [], (group, r.text)
    assert api(hub, "POST", "courses", admin_api, json=new).status_code == 409
    assert api(hub, "POST", "courses", ta_api, json={"slug": "cv203"}).status_code == 403
    r = api(hub, "POST", "courses", admin_api, json={"slug": "Bad"})
    assert r.status_code == 400 and "'slug' must be" in r.json()["message"]
    r = api(hub, "POST", "courses", admin_api, json={"slug": "cv203", "reserve": 2,
                                                      "profiles": ["cpu"]})  # fmt: skip
    assert r.status_code == 400 and r.json()["message"].startswith("Not saved")
    assert CourseStore(ledger.engine).get("cv203") is None

    r = api(hub, "PUT", "courses/ml101", ta_api, json={"title": "ML 101 (fall)"})
    assert r.status_code == 200 and r.json()["message"] == "Saved."
    r = api(hub, "PUT", "courses/ml101", ta_api, json={"title": "ML 101 (fall)"})
    assert r.json()["message"] == "Nothing changed."
    r = api(hub, "PUT", "courses/ml101", ta_api, json={"staff_group": "x-staff"})
    assert r.status_code == 403 and "staff_group" in r.json()["message"]
    r = api(hub, "PUT", "courses/ml101", admin_api, json={"slug": "ml102"})
    assert r.status_code == 400
    r = api(hub, "PUT", "courses/ml101", ta_api,
            json={"content": [{"repo": "https://127.0.0.1:9/x.git"}]})  # fmt: skip
    assert r.status_code == 400 and r.json()["message"].startswith("Content not saved")
    assert record(ledger)["title"] == "ML 101 (fall)" and record(ledger)["content"] == []


def test_roster_edits_through_the_api_refuse_unknown_users(hub, ta_api):
    r = api(hub, "POST", "courses/ml101/roster", ta_api, json={"add": ["ghost"]})
    assert r.status_code == 400 and "ghost" in r.json()["message"]
    r = api(hub, "POST", "courses/ml101/roster", ta_api, json={"add": "stu1"})
    assert r.status_code == 400 and "must be a list" in r.json()["message"]
    r = api(hub, "POST", "courses/ml101/roster", ta_api, json={"add": ["stu1"]})
    assert r.status_code == 200 and r.json()["message"].startswith("1 added")
    csv = {**ta_api, "Content-Type": "text/csv"}
    r = api(hub, "POST", "courses/ml101/roster.csv", csv, data="username\nstu1\nghost\n")
    assert r.status_code == 200 and r.json()["preview"]["unknown"] == ["ghost"]
    r = api(hub, "POST", "courses/ml101/roster.csv?apply=1", csv, data="stu1\nghost\n")
    assert r.status_code == 400 and "nothing changed" in r.json()["message"]
    r = api(hub, "POST", "courses/ml101/roster.csv", csv, data="# nobody\n")
    assert r.status_code == 400
    r = api(hub, "POST", "courses/ml101/roster.csv?apply=1", csv, data="\n".join(STUDENTS))
    assert r.status_code == 200 and r.json()["preview"]["removed"] == []


def test_stop_all_progress_a_bad_assignment_and_the_audit(hub, ta_api):
    r = api(hub, "POST", "courses/ml101/stop", ta_api)
    assert r.status_code == 200 and r.json()["message"].startswith("Stop all:")
    assert api(hub, "GET", "courses/ml101/progress", ta_api).json()["progress"]["finished_at"]
    for path in ("collect", "return"):
        r = api(hub, "POST", f"courses/ml101/{path}", ta_api, json={"assignment": "../x"})
        assert r.status_code == 400 and "not an assignment name" in r.json()["message"]
    audit = api(hub, "GET", "courses/ml101/audit", ta_api).json()["audit"]
    assert {"update", "roster", "roster-csv", "stop-all"} <= {a["action"] for a in audit}


def test_a_scheduled_prestart_runs_once_for_its_session(hub, svc, admin_api, ta_api, ledger):
    from datetime import datetime, timedelta, timezone

    tz = svc.service.state.lab.tz
    start = (datetime.now(timezone.utc) + timedelta(minutes=10)).astimezone(tz)
    session = {"start": start.strftime("%Y-%m-%dT%H:%M"),
               "end": (start + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")}  # fmt: skip
    r = api(hub, "PUT", "courses/ml101", ta_api, json={"sessions": {"dates": [session]}})
    assert r.status_code == 200, r.text
    svc.call(svc.service.courses.check_due)
    progress = wait_run(hub, ta_api)
    assert progress["session_start"] is not None
    assert {s["state"] for s in progress["servers"]} == {"ready"}, progress
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ran = CourseStore(ledger.engine).prestarts("ml101")
        if ran and all(done for done, _ in ran.values()):
            break
        time.sleep(0.5)
    assert [summary for _, summary in ran.values()] == ["3 of 3 ready"]
    before = progress["started_at"]
    svc.call(svc.service.courses.check_due)  # the same session: not again
    assert wait_run(hub, ta_api)["started_at"] == before
    api(hub, "PUT", "courses/ml101", ta_api, json={"sessions": {"dates": []}})
    assert api(hub, "POST", "courses/ml101/stop", ta_api).status_code == 200


# -- what staff and admins do: the pages -----------------------------------------------------


def test_the_course_pages_show_the_courses(hub, admin, ta):
    r = admin.get(hub.url + PREFIX + "courses", timeout=60)
    assert r.status_code == 200 and 'data-course="ml101"' in r.text
    r = ta.get(hub.url + PREFIX + "courses/ml101", timeout=60)
    assert r.status_code == 200 and "stu1" in r.text


FORMS = [
    ("weekly", {"days": "mon", "start": "10:00", "end": "11:00", "from": "2026-09-07",
                "until": "2026-12-18"}, "Weekly sessions added"),
    ("date", {"start": "2026-12-01T10:00", "end": "2026-12-01T11:00"}, "Session added"),
    ("session-remove", {"kind": "dates", "index": "0"}, "Removed."),
    ("session-remove", {"kind": "weekly", "index": "0"}, "Removed."),
    ("assignment", {"name": "hw9", "due": "2026-12-01T23:59"}, "Assignment hw9 added"),
    ("assignment-remove", {"name": "hw9"}, "Assignment hw9 removed."),
    ("assignment-remove", {"name": "hw9"}, "Not saved: no assignment"),
    ("seats", {"lead_minutes": "20", "prestart-form": "1", "prestart": "on"},
     "servers started 20 min before each session"),
    ("seats", {"lead_minutes": "20", "prestart-form": "1", "prestart": "on"}, "Nothing changed."),
    ("record", {"record": '{"title": "T2"}'}, "Saved."),
    ("record", {"record": "[1]"}, "Not saved: the record must be a JSON object"),
    ("record", {"record": '{"slug": "zz"}'}, "Not saved: the slug of a course cannot change"),
    ("record", {"record": '{"staff_group": "o-staff"}'}, "only an admin may change staff_group"),
    ("record", {"record": '{"lead_minutes": -5}'}, "Not saved: course &#39;ml101&#39;: &#39;lead"),
    ("content", {"repo": "https://127.0.0.1:9/x.git"}, "Not saved"),
    ("content-remove", {"index": "0"}, "no such entry"),
    ("add", {"user": "ghost"}, "No user &#39;ghost&#39; on the hub; nothing changed."),
    ("add", {"user": "a\tb"}, "Nothing changed."),
    ("add", {"user": "stu1"}, "stu1 added to the roster."),
    ("csv", {"apply": "gone"}, "That preview is gone"),
    ("csv", {"csv": "# none"}, "The CSV holds no usernames"),
    ("collect", {"assignment": "a/b"}, "is not an assignment name"),
]  # fmt: skip


@pytest.mark.parametrize("action, data, says", FORMS, ids=[f"{a}-{i}" for i, (a, *_) in
                                                          enumerate(FORMS)])  # fmt: skip
def test_each_course_form_saves_or_says_why_not(hub, ta, action, data, says):
    assert says in post_form(hub, ta, action, data)


def test_a_csv_preview_then_apply_on_the_page(hub, ta):
    import re

    page = post_form(hub, ta, "csv", {"csv": "username\nstu1\nstu2\nstu3\n"})
    assert "Preview below: nothing changed yet." in page
    pid = re.search(r'name="apply" value="([^"]+)"', page).group(1)
    assert "Roster: 0 added, 0 removed." in post_form(hub, ta, "csv", {"apply": pid})


def test_start_and_stop_all_from_the_page(hub, ta, ta_api):
    assert "Starting 3 servers." in post_form(hub, ta, "start", {})
    wait_run(hub, ta_api)
    assert "Stopped: 3 stopped." in post_form(hub, ta, "stop", {})
    r = ta.post(hub.url + PREFIX + "courses/ml101/actions/frobnicate",
                data={"_xsrf": service_xsrf(ta)}, timeout=60)  # fmt: skip
    assert r.status_code == 404


def test_admins_create_courses_from_the_page_form(hub, admin, ta, ledger):
    def create(session, **fields):
        return session.post(hub.url + PREFIX + "courses",
                            data={**fields, "_xsrf": service_xsrf(session)}, timeout=60)  # fmt: skip

    r = create(admin, slug="cv204", title="Vision", profile="cpu", lead_minutes="10")
    assert r.url.endswith(PREFIX + "courses/cv204") and "Course cv204 created." in r.text
    assert "Course cv204 exists already." in create(admin, slug="cv204").text
    assert "Course not created" in create(admin, slug="cv205", profile="cpu", reserve="2").text
    assert create(ta, slug="cv206").status_code == 403
    assert CourseStore(ledger.engine).get("cv204").course.lead_minutes == 10


def test_a_prestart_whose_token_may_neither_list_nor_start_fails_per_server(hub, svc, ta):
    """A token with too few scopes (here a TA's own): the run cannot list the roster's servers,
    and records the hub's answer to each start (it does not show the TA those users: 404),
    retried once each; nothing is started."""
    from jupyterhub_gpulab.courses.parse import parse_course
    from jupyterhub_gpulab.courses.prestart import PrestartRun
    from jupyterhub_gpulab.hubapi.client import HubClient

    client = HubClient(f"http://127.0.0.1:{hub.hub_port}/hub/api", user_token(hub, ta, "ta1"))
    run = PrestartRun(parse_course({"slug": "ml101", "profiles": ["cpu"]}), ["stu1", "stu2"])

    async def go():
        await run.start_all(client, batch=1, retries=1, backoff_s=0.1, ready_timeout_s=10)

    svc.call(go, timeout=60)
    assert {p.state for p in run.servers.values()} == {"failed"}
    assert all(p.attempts == 2 and p.reason for p in run.servers.values())
    assert run.summary().startswith("0 of 2 ready, 2 failed: ")
    assert not running(hub, "stu1")


def test_a_profile_the_roster_may_not_use_is_refused(hub, admin_api, ledger):
    """The lab's real policies: the A40 profile is for researchers, and the roster group ml101
    is no researcher group: the save is refused naming both, and nothing changes."""
    before = record(ledger)
    r = api(hub, "PUT", "courses/ml101", admin_api, json={"profiles": ["a40"]})
    assert r.status_code == 400, r.text
    assert "'a40'" in r.json()["message"] and "researchers" in r.json()["message"]
    assert record(ledger) == before

"""Courses end to end: a real hub, the gpulab service, real containers with home volumes and a
real git repository (``git daemon`` on the Docker bridge).

One hub for the module (starting 8 servers takes a while on a small machine); the tests run in
order: pre-start a roster of 8 → every home holds the notebooks; a student's edit survives an
instructor's update; a TA may act on the roster's servers only; a student cannot open the
course page; bad input changes nothing.
"""

from __future__ import annotations

import subprocess
import time

import pytest
import requests
from browser_support import ARTIFACTS, log_in, save_screenshot, wait_until
from course_support import (
    LAB_IMAGE,
    GitServer,
    containers_of,
    course_hub,
    read_home,
    remove_volumes,
    wait_prestart,
    work_of,
)
from e2e_support import remove_node_containers, require_docker
from service_support import PREFIX, login, user_token, wait_for_service
from service_support import service_api as api

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("api_contract")]

STUDENTS = [f"s{i}" for i in range(1, 9)]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    require_docker()
    tmp = tmp_path_factory.mktemp("courses")
    repo = GitServer(tmp / "git")
    repo.commit({"intro.py": "print('week 1')\n", "README.md": "ML 101\n"}, "week 1")
    course = {
        "slug": "ml101",
        "title": "Machine learning 101",
        "roster_group": "ml101",
        "staff_group": "ml101-staff",
        "profiles": ["course-lab"],
        "content": [{"repo": repo.url, "branch": "main", "dir": "ml101"}],
    }
    hub = course_hub(tmp, course)
    # s1 did course work in their personal home before the upgrade to course storage
    subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "-v", f"{hub.node}-home-s1:/home/jovyan",
         LAB_IMAGE, "sh", "-c", "mkdir -p ~/assignments/hw0 && echo mine > ~/assignments/hw0/old.py"],
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        hub.start()
        wait_for_service(hub)
        for u in STUDENTS:
            hub.create_user(u, ["ml101"])
        hub.create_user("ta1", ["ml101-staff"])
        hub.create_user("outsider", ["students"])
        tokens = {}
        hub.create_user("t1", ["dl201"])
        hub.create_user("t2", ["dl201"])
        for u in ("ta1", "s1", "outsider", "admin"):
            s = login(hub, u)
            tokens[u] = user_token(hub, s, u)
        yield hub, repo, tokens
    finally:
        hub.stop()
        remove_node_containers(hub.node)
        repo.stop()
        remove_volumes(hub.node)


def test_prestart_of_a_roster_of_8_puts_the_notebooks_in_every_home(lab):
    hub, repo, tokens = lab
    r = api(hub, tokens["ta1"], "POST", "courses/ml101/start")
    assert r.status_code == 202, r.text
    p = wait_prestart(hub, tokens["ta1"], "ml101")
    assert p["counts"].get("ready") == 8, p
    assert p["summary"].startswith("8 of 8 ready"), p
    running = containers_of(hub.node, "ml101")
    assert sorted(running) == STUDENTS
    for u in STUDENTS:
        # the course profile, from the course (the request named none)
        assert hub.server(u, "ml101")["user_options"] == {"profile": "course-lab"}
        assert read_home(work_of(hub.node, "ml101", u), "ml101/intro.py") == "print('week 1')\n"
    # the course work is apart from the personal home, which no course server mounts…
    assert read_home(f"{hub.node}-home-s2", "ml101/intro.py") is None
    # …but the course folders it held before the upgrade were copied in (the home keeps them)
    assert read_home(work_of(hub.node, "ml101", "s1"), "assignments/hw0/old.py") == "mine\n"
    assert read_home(f"{hub.node}-home-s1", "assignments/hw0/old.py") == "mine\n"
    # started with the course's own pre-start token, not the service's
    log = hub.log_tail(3000)
    assert "(gpulab-prestart-ml101@" in log
    # …which watches the roster's servers with one listing a second, not one request per server
    assert "GET /hub/api/users?state=" in log and "users/s1 (gpulab-prestart" not in log
    view = api(hub, tokens["ta1"], "GET", "courses/ml101").json()
    assert {r["user"]: r["server"] for r in view["roster"]} == {u: "running" for u in STUDENTS}


def test_a_students_edit_survives_the_instructors_update(lab):
    hub, repo, tokens = lab
    cid = containers_of(hub.node, "ml101")["s1"]
    subprocess.run(
        ["docker", "exec", cid, "sh", "-c", "echo '# my answer' >> /home/jovyan/ml101/intro.py"],
        check=True,
    )
    repo.commit({"intro.py": "print('week 1, fixed')\n", "week2.py": "print('week 2')\n"}, "week 2")
    hub.stop_server("s1", "ml101")
    r = hub.spawn("s1", name="ml101")
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("s1", "ml101", timeout=120)
    home = work_of(hub.node, "ml101", "s1")
    assert "# my answer" in read_home(home, "ml101/intro.py")
    assert read_home(home, "ml101/week2.py") == "print('week 2')\n"
    # a student who changed nothing gets the instructor's update at their next start
    hub.stop_server("s2", "ml101")
    hub.spawn("s2", name="ml101")
    hub.wait_ready("s2", "ml101", timeout=120)
    assert (
        read_home(work_of(hub.node, "ml101", "s2"), "ml101/intro.py") == "print('week 1, fixed')\n"
    )


def test_a_ta_acts_on_the_rosters_servers_only(lab):
    hub, repo, tokens = lab
    ta = {"Authorization": f"token {tokens['ta1']}"}
    # JupyterHub answers 404 "No access to resources or resources not found" for a user the
    # token may not see at all
    r = hub.api("POST", "/users/outsider/servers/ml101", json={}, headers=ta)
    assert r.status_code in (403, 404) and "access" in r.json()["message"], r.text
    assert "ml101" not in hub.user_model("outsider")["servers"]
    r = hub.api("DELETE", "/users/outsider/server", headers=ta)
    assert r.status_code in (403, 404), r.text
    # the course's pre-start token is as limited
    from jupyterhub_gpulab.courses.hubhook import prestart_token
    from jupyterhub_gpulab.hubapi.secret import read_cookie_secret

    secret = read_cookie_secret(hub.workdir / "gpulab_cookie_secret")
    robot = {"Authorization": f"token {prestart_token(secret, 'ml101')}"}
    r = hub.api("POST", "/users/outsider/servers/ml101", json={}, headers=robot)
    assert r.status_code in (403, 404), r.text
    assert "ml101" not in hub.user_model("outsider")["servers"]
    # the hub gives staff no rights over servers, not even the roster's course servers: a
    # filter cannot name one server for a whole group, so it would reach their other servers
    r = hub.api("DELETE", "/users/s3/servers/ml101", headers=ta)
    assert r.status_code in (403, 404), r.text
    assert hub.server("s3", "ml101")["ready"]
    # a researcher the TA adds to the roster keeps their own server: staff cannot stop it
    hub.create_user("researcher1", ["researchers"])
    r = hub.spawn("researcher1", {"profile": "cpu"})
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("researcher1")
    r = api(hub, tokens["ta1"], "POST", "courses/ml101/roster", json={"add": ["researcher1"]})
    assert r.status_code == 200, r.text
    # …and is told who added them, on their gpulab page (and the hub's home)
    mine = user_token(hub, login(hub, "researcher1"), "researcher1")
    told = [w for w in api(hub, mine, "GET", "me").json()["warnings"] if w["kind"] == "notice"]
    assert [w["message"] for w in told] == [
        "You were added to Machine learning 101 (ml101) by ta1."
    ], told
    try:
        r = hub.api("DELETE", "/users/researcher1/server", headers=ta)
        assert r.status_code in (403, 404), r.text
        r = hub.api("DELETE", "/users/s4/server", headers=ta)  # not running: 400 if allowed
        assert r.status_code in (403, 404), r.text
        assert hub.server("researcher1")["ready"]
    finally:
        api(hub, tokens["ta1"], "POST", "courses/ml101/roster", json={"remove": ["researcher1"]})
        hub.stop_server("researcher1")
    # the course's pre-start token (the service's, for Start all / Stop all) may stop a roster
    # member's course server
    r = hub.api("DELETE", "/users/s3/servers/ml101", headers=robot)
    assert r.status_code in (202, 204), r.text


def test_staff_cannot_give_their_course_another_roster_or_staff_group(lab):
    hub, repo, tokens = lab
    # With "students" as its roster, the TA would act on every student's servers.
    for change in ({"roster_group": "students"}, {"staff_group": "students"}):
        r = api(hub, tokens["ta1"], "PUT", "courses/ml101", json=change)
        assert r.status_code == 403 and "Only an admin" in r.json()["message"], r.text
    course = api(hub, tokens["ta1"], "GET", "courses/ml101").json()["course"]
    assert (course["roster_group"], course["staff_group"]) == ("ml101", "ml101-staff")


def test_only_an_admin_sets_the_shared_folder_and_only_under_its_root(lab):
    """The shared folder is bind-mounted into every roster member's server: staff may not set
    it (403, and nothing else of the request is saved, API or page form); an admin may, under
    c.GPULabCourses.shared_folder_root only."""
    from service_support import service_xsrf

    hub, repo, tokens = lab
    before = api(hub, tokens["ta1"], "GET", "courses/ml101").json()["course"]
    r = api(hub, tokens["ta1"], "PUT", "courses/ml101",
            json={"title": "Changed", "shared_folder": "/"})  # fmt: skip
    assert r.status_code == 403, r.text
    assert "Only an admin may change shared_folder" in r.json()["message"]
    ta = login(hub, "ta1")
    page = hub.url + PREFIX + "courses/ml101"
    ta.get(page, timeout=30)
    r = ta.post(page + "/actions/record", timeout=60, data={
        "record": '{"title": "Changed", "shared_folder": "/etc"}', "_xsrf": service_xsrf(ta)})  # fmt: skip
    assert "only an admin may change shared_folder" in r.text, r.text[-2000:]
    assert api(hub, tokens["ta1"], "GET", "courses/ml101").json()["course"] == before
    for bad in ("/", "/srv/gpulab/courses/../../../etc", "/srv/gpulab/courses"):
        r = api(hub, tokens["admin"], "PUT", "courses/ml101", json={"shared_folder": bad})
        assert r.status_code == 400, r.text
        assert "/srv/gpulab/courses" in r.json()["message"], r.text
    assert api(hub, tokens["admin"], "GET", "courses/ml101").json()["course"] == before
    ok = {"shared_folder": "/srv/gpulab/courses/ml101"}
    r = api(hub, tokens["admin"], "PUT", "courses/ml101", json=ok)
    assert r.status_code == 200, r.text
    # staff may still save the record as it is, shared folder unchanged
    r = api(hub, tokens["ta1"], "PUT", "courses/ml101", json={**ok, "title": before["title"]})
    assert r.status_code == 200, r.text
    r = api(hub, tokens["admin"], "PUT", "courses/ml101", json={"shared_folder": ""})
    assert r.status_code == 200, r.text


def test_a_profile_the_roster_may_not_use_is_refused_at_save(lab):
    """'a40' is for the researchers group only (the profile's groups): every student would be
    refused at Start all, so the course is not saved, for staff nor admin."""
    hub, repo, tokens = lab
    before = api(hub, tokens["ta1"], "GET", "courses/ml101").json()["course"]
    for who in ("ta1", "admin"):
        r = api(hub, tokens[who], "PUT", "courses/ml101", json={"profiles": ["a40"]})
        assert r.status_code == 400, r.text
        m = r.json()["message"]
        assert "'a40'" in m and "researchers" in m and "'ml101'" in m, m
    assert api(hub, tokens["ta1"], "GET", "courses/ml101").json()["course"] == before


def test_a_content_repository_must_be_https_git_or_ssh(lab):
    hub, repo, tokens = lab
    before = api(hub, tokens["ta1"], "GET", "courses/ml101").json()["course"]
    for url in ("http://169.254.169.254/latest/meta-data.git", "file:///etc/x.git",
                "ssh://-oProxyCommand=touch%20/tmp/pwned/x.git"):  # fmt: skip
        r = api(hub, tokens["ta1"], "PUT", "courses/ml101",
                json={"content": before["content"] + [{"repo": url, "dir": "x"}]})  # fmt: skip
        assert r.status_code == 400, (url, r.text)
        assert "'repo'" in r.json()["message"], r.text
    assert api(hub, tokens["ta1"], "GET", "courses/ml101").json()["course"] == before


def test_a_course_server_is_for_its_roster_and_staff_only(lab):
    hub, repo, tokens = lab
    # "outsider" names a server like the course: refused, with why; nothing starts
    r = hub.spawn("outsider", name="ml101")
    assert r.status_code == 403, r.text
    assert "for its roster" in r.json()["message"]
    assert "ml101" not in containers_of(hub.node, "ml101")
    assert not (hub.server("outsider", "ml101") or {}).get("ready")


def test_a_student_cannot_open_the_course_page(lab):
    hub, repo, tokens = lab
    for who in ("s1", "outsider"):
        r = api(hub, tokens[who], "GET", "courses/ml101")
        assert r.status_code == 403, r.text
        assert "staff" in r.json()["message"]
        r = api(hub, tokens[who], "POST", "courses/ml101/start")
        assert r.status_code == 403, r.text


def test_an_unknown_user_in_the_csv_changes_nothing(lab):
    hub, repo, tokens = lab
    csv = "username\ns1\ns2\nnobody-here\n"
    r = api(hub, tokens["ta1"], "POST", "courses/ml101/roster.csv", data=csv)
    assert r.status_code == 200, r.text
    pv = r.json()["preview"]
    assert pv["unknown"] == ["nobody-here"]
    assert pv["removed"] == sorted(set(STUDENTS) - {"s1", "s2"})
    r = api(hub, tokens["ta1"], "POST", "courses/ml101/roster.csv?apply=1", data=csv)
    assert r.status_code == 400 and "nobody-here" in r.json()["message"], r.text
    members = hub.api("GET", "/groups/ml101").json()["users"]
    assert sorted(members) == STUDENTS


def test_an_unreachable_repository_is_refused_and_nothing_changes(lab):
    hub, repo, tokens = lab
    before = api(hub, tokens["ta1"], "GET", "courses/ml101").json()["course"]
    bad = {"content": [{"repo": "git://172.17.0.1:1/none.git", "dir": "x"}]}
    r = api(hub, tokens["ta1"], "PUT", "courses/ml101", json=bad)
    assert r.status_code == 400 and "cannot be reached" in r.json()["message"], r.text
    never = {
        "sessions": {
            "weekly": [
                {
                    "days": ["sat"],
                    "start": "10:00",
                    "end": "11:00",
                    "from": "2026-12-07",
                    "until": "2026-12-11",
                }
            ]
        }
    }
    r = api(hub, tokens["ta1"], "PUT", "courses/ml101", json=never)
    assert r.status_code == 400 and "never fires" in r.json()["message"], r.text
    assert api(hub, tokens["ta1"], "GET", "courses/ml101").json()["course"] == before


def test_distribute_pulls_into_running_servers_now(lab):
    hub, repo, tokens = lab
    repo.commit({"week3.py": "print('week 3')\n"}, "week 3")
    r = api(hub, tokens["ta1"], "POST", "courses/ml101/distribute")
    assert r.status_code == 200, r.text
    report = r.json()["report"]
    running = containers_of(hub.node, "ml101")
    assert {u for u, v in report.items() if v.startswith("pulled at ")} == set(running), report
    assert r.json()["message"] == f"Pulled into {len(running)} of {len(running)} running servers."
    assert report["s3"] == "not running"  # stopped above
    for u in running:
        assert read_home(work_of(hub.node, "ml101", u), "ml101/week3.py") == "print('week 3')\n"


def test_collect_gets_each_submission_and_reports_who_submitted_nothing(lab):
    hub, repo, tokens = lab
    running = containers_of(hub.node, "ml101")
    for u in ("s1", "s2"):
        subprocess.run(
            [
                "docker",
                "exec",
                running[u],
                "sh",
                "-c",
                f"mkdir -p ~/assignments/hw1 && echo 'answer of {u}' > ~/assignments/hw1/answer.py",
            ],
            check=True,
        )
    r = api(hub, tokens["ta1"], "POST", "courses/ml101/collect", json={"assignment": "hw1"})
    assert r.status_code == 200, r.text
    report = r.json()["report"]
    assert r.json()["message"] == "2 of 8 submitted."
    assert {u for u, v in report.items() if v["state"] == "submitted"} == {"s1", "s2"}
    assert report["s4"] == {"state": "missing", "reason": "no assignments/hw1 folder"}
    course_vol = f"{hub.node}-course-ml101"
    for u in ("s1", "s2"):
        assert read_home(course_vol, report[u]["folder"] + "/answer.py") == f"answer of {u}\n"
    # a student may not collect
    r = api(hub, tokens["s1"], "POST", "courses/ml101/collect", json={"assignment": "hw1"})
    assert r.status_code == 403
    r = api(hub, tokens["ta1"], "POST", "courses/ml101/collect", json={"assignment": "../x"})
    assert r.status_code == 400 and "assignment name" in r.json()["message"]
    audit = api(hub, tokens["ta1"], "GET", "courses/ml101/audit").json()["audit"]
    assert [a["action"] for a in audit][:2] == ["collect", "distribute"]
    assert audit[0]["who"] == "ta1"


def test_staff_write_feedback_in_their_own_course_server_and_return_delivers_it(lab):
    """The instructor's week as staff do it: the collected work is in ~/ml101-staff of their own
    course server, written by the image's user (uid 1000) there, and Return brings it to the
    student's course work (where it had been 'returned to 0 of 3': root-owned staff folder)."""
    hub, repo, tokens = lab
    r = hub.spawn("ta1", name="ml101")
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("ta1", "ml101", timeout=180)
    try:
        ta = containers_of(hub.node, "ml101")["ta1"]
        script = (
            "set -e; cd ~/ml101-staff; ls collected/hw1/s1/*/answer.py;"
            " mkdir -p feedback/hw1/s1 && echo 'well done' > feedback/hw1/s1/notes.txt"
        )
        done = subprocess.run(["docker", "exec", "-u", "1000", ta, "sh", "-c", script],
                              capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0, done.stderr
        r = api(hub, tokens["ta1"], "POST", "courses/ml101/return", json={"assignment": "hw1"})
        assert r.status_code == 200, r.text
        assert r.json()["report"]["s1"] == {"state": "returned", "files": 1}, r.json()
        assert (
            read_home(work_of(hub.node, "ml101", "s1"), "feedback/hw1/notes.txt") == "well done\n"
        )
    finally:
        hub.stop_server("ta1", "ml101")


def test_an_admin_creates_a_course_with_a_session_ten_minutes_ahead_and_it_is_prestarted(lab):
    hub, repo, tokens = lab
    from datetime import datetime, timedelta, timezone

    start = datetime.now(timezone.utc).replace(second=0, microsecond=0) + timedelta(minutes=10)
    record = {
        "slug": "dl201",
        "title": "Deep learning 201",
        "profiles": ["course-seat"],
        "reserve": 3,
        "content": [{"repo": repo.url, "dir": "dl201"}],
        "sessions": {
            "dates": [
                {
                    "start": start.replace(tzinfo=None).isoformat(timespec="minutes"),
                    "end": (start + timedelta(hours=1)).replace(tzinfo=None).isoformat(),
                }
            ]
        },
    }
    # staff may not create courses; an admin may
    r = api(hub, tokens["ta1"], "POST", "courses", json=record)
    assert r.status_code == 403, r.text
    r = api(hub, tokens["admin"], "POST", "courses", json=record)
    assert r.status_code == 201, r.text
    # the service looks every 2 s: the session is within its 15-minute lead, so it starts now
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        view = api(hub, tokens["admin"], "GET", "courses/dl201").json()
        p = view["progress"]
        if p and p["finished_at"]:
            break
        time.sleep(2)
    assert p and p["session_start"] == start.isoformat(), view
    assert p["summary"] == "2 of 2 ready", p
    for u in ("t1", "t2"):
        assert read_home(work_of(hub.node, "dl201", u), "dl201/intro.py") is not None
    assert view["sessions"][0]["prestart"] == "2 of 2 ready"
    # the session's 3 seats of the T4 (4 seats) are kept: the two students took two of them,
    # charged to the booking; the third stays kept, so one walk-in fits and the next is told
    assert view["sessions"][0]["reserved"] == {
        "id": view["sessions"][0]["reserved"]["id"], "count": 3, "in_use": 2,
    }  # fmt: skip
    assert view["reservation"]["calendar"][0]["holders"] == ["dl201"]
    r = hub.spawn("outsider", {"profile": "shared-seat"})
    assert r.status_code < 400, r.text
    hub.wait_ready("outsider")
    hub.create_user("walkin", ["students"])
    r = hub.spawn("walkin", {"profile": "shared-seat"})
    assert r.status_code == 503 and "1 of 4 reserved for dl201 until" in r.json()["message"], r.text
    hub.stop_server("outsider")
    # a second course at the same time needs 3 more seats: refused, naming dl201; not created
    clash = {**record, "slug": "cv300", "title": "Vision 300", "content": []}
    r = api(hub, tokens["admin"], "POST", "courses", json=clash)
    assert r.status_code == 409 and "dl201" in r.json()["message"], r.text
    assert api(hub, tokens["admin"], "GET", "courses/cv300").status_code == 404
    audit = api(hub, tokens["admin"], "GET", "courses/dl201/audit").json()["audit"]
    assert [(a["who"], a["action"]) for a in audit] == [
        ("schedule", "start-all"),
        ("admin", "create"),
    ]
    # once per session: stopping them does not make the schedule start them again
    r = api(hub, tokens["admin"], "POST", "courses/dl201/stop")
    assert r.status_code == 200, r.text
    time.sleep(5)
    assert not containers_of(hub.node, "dl201")


@pytest.mark.browser
def test_the_course_page_in_a_browser_start_all_progress_collect(lab, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    hub, repo, tokens = lab
    b = browser
    page = f"{PREFIX}courses/ml101"
    log_in(b, hub, "ta1", page, heading="Machine learning 101")
    assert "Machine learning 101" in b.find_element(By.CSS_SELECTOR, "h1").text
    assert len(b.find_elements(By.CSS_SELECTOR, "tr.student")) == 8
    b.find_element(By.ID, "start-all").click()
    wait_until(lambda: b.find_elements(By.ID, "progress-summary"), 30, "the progress line")
    wait_until(
        lambda: "8 of 8 ready" in b.find_element(By.ID, "progress-summary").text,
        300,
        "every server ready (the page reloads itself)",
        refresh=b.refresh,
    )
    rows = b.find_elements(By.CSS_SELECTOR, "tr.student")
    assert {r.get_attribute("data-server") for r in rows} == {"running"}
    save_screenshot(b, ARTIFACTS / "course-page-started.png")
    b.find_element(By.ID, "collect-assignment").send_keys("hw1")
    b.find_element(By.ID, "collect").click()
    wait_until(lambda: b.find_elements(By.ID, "gpulab-flash"), 60, "the collect message")
    text = b.find_element(By.ID, "gpulab-flash").text
    assert "2 of 8 submitted" in text and "missing: s3, s4" in text, text
    save_screenshot(b, ARTIFACTS / "course-page-collected.png")
    # a CSV with an unknown user: the preview says so, and offers no Apply
    csv = hub.workdir / "roster.csv"
    csv.write_text("username\n" + "\n".join(STUDENTS) + "\nnobody-here\n")
    b.find_element(By.ID, "csv-file").send_keys(str(csv))
    b.find_element(By.ID, "csv-preview").click()
    wait_until(lambda: b.find_elements(By.ID, "csv-preview-result"), 30, "the CSV preview")
    assert b.find_element(By.ID, "pv-unknown").text == "nobody-here"
    assert b.find_element(By.ID, "pv-added").text == "none"
    assert not b.find_elements(By.ID, "csv-apply")
    save_screenshot(b, ARTIFACTS / "course-page-csv-preview.png")


def test_the_pages_forms_create_a_course_and_edit_its_sessions_and_seats(lab):
    """As an admin and a TA use the pages (forms, no API): a course its profile cannot serve is
    refused with the reason (it was an HTTP 500), a good one created; a session and seats added
    from the course page; a bad session changes nothing."""
    from datetime import datetime, timedelta, timezone

    from html_support import parse_html
    from service_support import service_xsrf

    hub, repo, tokens = lab
    admin = login(hub, "admin")
    page = hub.url + PREFIX + "courses"
    admin.get(page, timeout=30)
    form = {"slug": "cv400", "title": "Vision 400", "profile": "course-lab", "reserve": "2",
            "lead_minutes": "15", "_xsrf": service_xsrf(admin)}  # fmt: skip
    r = admin.post(page, data=form, timeout=60)
    assert r.status_code == 200 and "Course not created" in r.text and "holds none" in r.text
    assert api(hub, tokens["admin"], "GET", "courses/cv400").status_code == 404
    r = admin.post(page, data={**form, "profile": "course-seat"}, timeout=60)
    assert r.status_code == 200 and r.url.endswith("courses/cv400"), r.url
    assert "Course cv400 created" in r.text
    action = page + "/cv400/actions/"
    start = datetime.now(timezone.utc).replace(second=0, microsecond=0) + timedelta(days=2)
    when = {"start": start.strftime("%Y-%m-%dT%H:%M"),
            "end": (start + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M")}  # fmt: skip
    r = admin.post(action + "date", data={**when, "_xsrf": service_xsrf(admin)}, timeout=60)
    assert "Session added" in r.text, r.text[-2000:]
    bad = {"start": when["end"], "end": when["start"], "_xsrf": service_xsrf(admin)}
    r = admin.post(action + "date", data=bad, timeout=60)
    assert "Not saved" in r.text and "must be after start" in r.text
    r = admin.post(action + "seats", data={"prestart-form": "1", "prestart": "on",
                   "lead_minutes": "10", "reserve": "3", "reserve_lead_minutes": "30",
                   "grace_minutes": "5", "_xsrf": service_xsrf(admin)}, timeout=60)  # fmt: skip
    assert "3 seats reserved" in r.text
    doc = parse_html(r.text)
    rows = doc.find_all("tr", cls="session")
    assert len(rows) == 1 and "3 (0 in use)" in rows[0].text()
    view = api(hub, tokens["admin"], "GET", "courses/cv400").json()
    assert view["course"]["reserve_lead_minutes"] == 30 and view["course"]["lead_minutes"] == 10
    [b] = [x for x in requests.get(hub.url + PREFIX + "api/bookings?hours=72",
           headers={"Authorization": f"token {tokens['admin']}"}, timeout=30).json()["bookings"]
           if x["holder"] == "cv400"]  # fmt: skip
    assert (b["count"], b["lead_s"], b["grace_s"]) == (3, 1800, 300)


def test_a_large_roster_csv_is_previewed_and_applied_whole_from_the_page(lab):
    """A CSV of 1,500 long usernames (76 KB): the page's preview lists them all and its Apply
    adds every one. The preview lived in a signed cookie (a browser keeps 4 KB: past ~100 names
    the preview silently vanished) and Apply re-sent the first 3,000 characters; bodies over
    64 KB were refused though the README promises 5,000 names."""
    from html_support import parse_html
    from service_support import service_xsrf

    hub, repo, tokens = lab
    names = [f"firstname{i:04d}.lastname-of-a-rather-long-family-{i:04d}" for i in range(1500)]
    r = hub.api("POST", "/users", json={"usernames": names})
    assert r.status_code == 201, r.text
    r = api(hub, tokens["admin"], "POST", "courses",
            json={"slug": "big1500", "title": "A big class", "profiles": ["course-lab"]})  # fmt: skip
    assert r.status_code == 201, r.text
    csv = "username\n" + "\n".join(names) + "\n"
    assert len(csv) > 64 * 1024
    admin = login(hub, "admin")
    page = hub.url + PREFIX + "courses/big1500"
    admin.get(page, timeout=30)
    r = admin.post(page + "/actions/csv", files={"file": ("roster.csv", csv)},
                   data={"_xsrf": service_xsrf(admin)}, timeout=300)  # fmt: skip
    assert r.status_code == 200, r.text[-2000:]
    doc = parse_html(r.text)
    assert doc.by_id("pv-added").text().split(", ") == sorted(names)
    assert doc.by_id("csv-apply") is not None, "no Apply for a CSV of known users"
    pid = doc.find("input", name="apply").attrs["value"]
    r = admin.post(page + "/actions/csv", data={"apply": pid, "_xsrf": service_xsrf(admin)},
                   timeout=300)  # fmt: skip
    assert "Roster: 1500 added, 0 removed" in r.text, r.text[-2000:]
    members = hub.api("GET", "/groups/big1500").json()["users"]
    assert sorted(members) == sorted(names)
    # the same preview cannot be applied twice; the API reads the same large body
    r = admin.post(page + "/actions/csv", data={"apply": pid, "_xsrf": service_xsrf(admin)},
                   timeout=60)  # fmt: skip
    assert "That preview is gone" in r.text
    r = api(hub, tokens["admin"], "POST", "courses/big1500/roster.csv", data=csv, timeout=300)
    assert r.status_code == 200, r.text
    assert r.json()["preview"]["added"] == [] and r.json()["preview"]["removed"] == []
    r = api(hub, tokens["admin"], "POST", "courses/big1500/roster.csv", data="x\n" * (1024**2 + 1))
    assert r.status_code == 413 and "reads at most 2097152" in r.json()["message"]
    # a name too long for the hub is said on the page, like every other refusal, not a bare 400
    r = admin.post(page + "/actions/add", data={"user": "x" * 300, "_xsrf": service_xsrf(admin)},
                   timeout=60)  # fmt: skip
    assert r.status_code == 200 and r.url.endswith("courses/big1500"), r.url
    flash = parse_html(r.text).by_id("gpulab-flash").text()
    assert "is not a user name" in flash and "Nothing changed" in flash, flash


def test_staff_stop_the_course_servers_through_the_service(lab):
    """Staff hold no hub scope over servers; Stop all (the service, with the course's
    pre-start token) still stops every course server of the roster, and only those."""
    hub, repo, tokens = lab
    running = {u for u in STUDENTS if (hub.server(u, "ml101") or {}).get("ready")}
    r = api(hub, tokens["ta1"], "POST", "courses/ml101/stop")
    assert r.status_code == 200, r.text
    servers = r.json()["progress"]["servers"]
    want = {u: "stopped" if u in running else "not-running" for u in STUDENTS}
    assert {s["user"]: s["state"] for s in servers} == want, r.text
    idle = len(STUDENTS) - len(running)
    assert r.json()["message"] == f"Stop all: {len(running)} stopped" + (
        f", {idle} {'was' if idle == 1 else 'were'} not running." if idle else "."
    )
    deadline = time.monotonic() + 60
    while containers_of(hub.node, "ml101") and time.monotonic() < deadline:
        time.sleep(1)
    assert not containers_of(hub.node, "ml101")
    # again: nothing left to stop, and the message says so instead of "Stopped 8 servers"
    r = api(hub, tokens["ta1"], "POST", "courses/ml101/stop")
    assert r.json()["message"] == "Stop all: 0 stopped, 8 were not running.", r.text

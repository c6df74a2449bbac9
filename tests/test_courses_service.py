"""The course API and pages as staff, admins and students use them, without a hub process or an
engine (``course_web_support``): the service's real application and course manager on a real
SQLite ledger, in front of a stand-in hub API; the engine seam a recording stand-in.

Who may do what (staff of their course, admins everywhere, students nowhere), what only an admin
may change, that a roster edit refuses unknown users and stops a removed student's server, that
every form saves or says why not and changes nothing then, and what Start all, Stop all,
Distribute, Collect and Return tell the staff.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
from datetime import timedelta

import pytest
from api_contract import check_body
from course_web_support import course_lab, flash

from jupyterhub_gpulab import clock
from jupyterhub_gpulab.auth.groupsowner import GroupsOwner
from jupyterhub_gpulab.courses.collect import Entry
from jupyterhub_gpulab.courses.store import CourseStore
from jupyterhub_gpulab.lab.names import folder_name

ML101 = {"slug": "ml101", "title": "ML 101", "profiles": ["cpu"],
         "assignments": [{"name": "hw1"}]}  # fmt: skip
DL201 = {"slug": "dl201", "title": "DL 201", "profiles": ["cpu"]}
USERS = {"ta1": ["ml101-staff"], "ta2": ["dl201-staff"], "stu1": ["ml101"], "stu2": ["ml101"],
         "stu3": [], "eve": []}  # fmt: skip
OWNER = (1000, 1000)


@pytest.fixture
async def lab(tmp_path):
    lab = await course_lab(tmp_path, courses=[ML101, DL201], users=USERS)
    yield lab
    lab.stop()


def record(lab, slug="ml101") -> dict:
    return CourseStore(lab.ledger.engine).get(slug).course.to_dict()


def actions(lab, slug="ml101") -> list[tuple[str, str]]:
    return [(a.who, a.action) for a in CourseStore(lab.ledger.engine).audit(slug)]


async def finished(lab, who="ta1", slug="ml101") -> dict:
    for _ in range(200):
        _, body = await lab.api(who, "GET", f"courses/{slug}/progress")
        if body["progress"] and body["progress"]["finished_at"]:
            return body["progress"]
        await asyncio.sleep(0.05)
    raise AssertionError("the start-all did not finish")


# -- who sees and changes which course ------------------------------------------------------


async def test_staff_see_their_course_admins_all_students_none(lab):
    code, body = await lab.api("ta1", "GET", "courses")
    assert code == 200 and [c["slug"] for c in body["courses"]] == ["ml101"]
    assert "attention" not in body  # only admins read what needs their attention
    _, body = await lab.api("admin", "GET", "courses")
    assert sorted(c["slug"] for c in body["courses"]) == ["dl201", "ml101"]
    assert body["attention"] == {}
    _, body = await lab.api("stu1", "GET", "courses")
    assert body["courses"] == []
    code, body = await lab.api("stu1", "GET", "courses/ml101")
    assert code == 403 and "Only the staff of course ml101 (group ml101-staff)" in body["message"]
    code, _ = await lab.api("ta2", "POST", "courses/ml101/start", {})
    assert code == 403  # staff of another course
    assert not lab.hub.servers
    code, body = await lab.api(None, "GET", "courses/ml101")
    assert code == 403 and "Not authenticated" in body["message"]
    code, body = await lab.api("ta1", "GET", "courses/nope")
    assert (code, body["message"]) == (404, "No course 'nope'.")


async def test_the_course_view_shows_roster_servers_and_assignments(lab):
    lab.hub.run("stu1", "ml101")
    code, body = await lab.api("ta1", "GET", "courses/ml101")
    assert code == 200
    rows = {r["user"]: r for r in body["roster"]}
    assert rows["stu1"]["server"] == "running" and rows["stu2"]["server"] == "stopped"
    assert [a["name"] for a in body["assignments"]] == ["hw1"]
    assert body["progress"] is None
    # staff open the collected work in their own course server; an admin outside the staff not
    assert body["my_server"] == {"user": "ta1", "state": "stopped", "url": None}
    _, body = await lab.api("admin", "GET", "courses/ml101")
    assert body["my_server"] is None
    assert body["roster_source"]["editable"] is True


async def test_only_admins_create_courses_and_the_hub_gets_its_groups(lab):
    code, body = await lab.api("ta1", "POST", "courses", {"slug": "cv301"})
    assert code == 403 and "custom:gpulab:admin" in body["message"]
    code, body = await lab.api("admin", "POST", "courses", {"slug": "cv301", "title": "CV"})
    assert (code, body["message"]) == (201, "Course cv301 created.")
    assert {"cv301", "cv301-staff"} <= lab.hub.groups
    assert record(lab, "cv301")["title"] == "CV"
    code, body = await lab.api("admin", "POST", "courses", {"slug": "cv301"})
    assert code == 409 and "PUT courses/cv301" in body["message"]
    code, body = await lab.api("admin", "POST", "courses", {"slug": "x"})
    assert code == 400 and "slug" in body["message"]
    code, body = await lab.api("admin", "POST", "courses", {"slug": "cv302", "color": "red"})
    assert code == 400 and "Unknown field 'color'" in body["message"]
    assert CourseStore(lab.ledger.engine).get("cv302") is None


async def test_staff_edit_their_course_but_not_its_groups_or_slug(lab):
    code, body = await lab.api("ta1", "PUT", "courses/ml101", {"title": "Machine Learning"})
    assert (code, body["message"]) == (200, "Saved.")
    code, body = await lab.api("ta1", "PUT", "courses/ml101", {"title": "Machine Learning"})
    assert (code, body["message"]) == (200, "Nothing changed.")
    code, body = await lab.api("ta1", "PUT", "courses/ml101", {"staff_group": "ta-all"})
    assert (code, body["message"]) == (403, "Only an admin may change staff_group.")
    code, body = await lab.api("admin", "PUT", "courses/ml101", {"slug": "ml102"})
    assert (code, body["message"]) == (400, "The slug of a course cannot change.")
    code, body = await lab.api("ta1", "PUT", "courses/ml101", {"lead_minutes": -5})
    assert code == 400 and "lead_minutes" in body["message"]
    assert record(lab)["staff_group"] == "ml101-staff" and record(lab)["lead_minutes"] == 15
    code, _ = await lab.api("admin", "PUT", "courses/ml101", {"staff_group": "ta-all"})
    assert code == 200 and record(lab)["staff_group"] == "ta-all"
    changes = [a.detail["changed"] for a in CourseStore(lab.ledger.engine).audit("ml101")
               if a.action == "update"]  # fmt: skip
    assert changes == [{"staff_group": {"from": "ml101-staff", "to": "ta-all"}},
                       {"title": {"from": "ML 101", "to": "Machine Learning"}}]  # fmt: skip


async def test_new_content_is_saved_only_when_the_servers_can_pull_it(lab):
    repo = "https://git.example.edu/ml.git"
    lab.engine.repos[repo] = (128, "", "fatal: unable to access\nerrno=Connection refused")
    code, body = await lab.api("ta1", "PUT", "courses/ml101", {"content": [{"repo": repo}]})
    assert code == 400 and body["message"].startswith("Content not saved: the repository")
    assert "Connection refused" in body["message"] and record(lab)["content"] == []
    del lab.engine.repos[repo]
    code, _ = await lab.api("ta1", "PUT", "courses/ml101", {"content": [{"repo": repo}]})
    assert code == 200 and record(lab)["content"][0]["repo"] == repo


# -- the roster -----------------------------------------------------------------------------


async def test_a_roster_edit_refuses_unknown_users_and_stops_a_removed_students_server(lab):
    lab.hub.run("stu2", "ml101")
    code, body = await lab.api("ta1", "POST", "courses/ml101/roster", {"add": ["stu3", "nobody"]})
    assert code == 400 and body["message"].startswith("Unknown user(s), nothing changed: nobody.")
    assert "ml101" not in lab.hub.users["stu3"]
    code, body = await lab.api("ta1", "POST", "courses/ml101/roster",
                               {"add": ["stu3"], "remove": ["stu2"]})  # fmt: skip
    assert code == 200
    assert body["message"] == "1 added, 1 removed; their course servers stopped: stu2."
    assert "ml101" in lab.hub.users["stu3"] and "ml101" not in lab.hub.users["stu2"]
    assert not lab.hub.running("stu2", "ml101")
    assert ("ta1", "stop-removed") in actions(lab)
    code, body = await lab.api("ta1", "POST", "courses/ml101/roster", {"add": "stu3"})
    assert (code, body["message"]) == (400, "'add' must be a list of usernames.")


async def test_a_roster_csv_is_previewed_then_applied_unless_it_names_unknown_users(lab):
    csv = "username\nstu1\nstu3\n"
    code, body = await lab.api("ta1", "POST", "courses/ml101/roster.csv", csv,
                               headers={"Content-Type": "text/csv"})  # fmt: skip
    assert code == 200 and body["message"].startswith("Preview only")
    assert body["preview"]["added"] == ["stu3"] and body["preview"]["removed"] == ["stu2"]
    assert "ml101" in lab.hub.users["stu2"]  # a preview changes nothing
    code, body = await lab.api("ta1", "POST", "courses/ml101/roster.csv?apply=1",
                               "stu1\nghost\n", headers={"Content-Type": "text/csv"})  # fmt: skip
    assert code == 400 and "ghost" in body["message"] and "ml101" in lab.hub.users["stu2"]
    code, body = await lab.api("ta1", "POST", "courses/ml101/roster.csv?apply=1", csv,
                               headers={"Content-Type": "text/csv"})  # fmt: skip
    assert (code, body["message"]) == (200, "1 added, 1 removed.")
    assert "ml101" in lab.hub.users["stu3"] and "ml101" not in lab.hub.users["stu2"]
    code, body = await lab.api("ta1", "POST", "courses/ml101/roster.csv", "# nothing\n",
                               headers={"Content-Type": "text/csv"})  # fmt: skip
    assert code == 400 and "no usernames" in body["message"]


async def test_a_roster_the_identity_provider_owns_is_not_edited_here(lab):
    lab.courses.groups_owner = GroupsOwner("oidc")
    code, body = await lab.api("ta1", "POST", "courses/ml101/roster", {"add": ["stu3"]})
    assert code == 409 and body["message"].endswith("Nothing changed.")
    code, _ = await lab.api("ta1", "POST", "courses/ml101/roster.csv", "stu3\n",
                            headers={"Content-Type": "text/csv"})  # fmt: skip
    assert code == 409
    page = await lab.form("ta1", "ml101", "add", {"user": "stu3"})
    assert flash(page).startswith("danger:") and "Nothing changed." in flash(page)
    assert "ml101" not in lab.hub.users["stu3"]


# -- start, stop, distribute, collect, return -----------------------------------------------


async def test_start_all_then_stop_all_tell_the_staff_how_it_went(lab):
    code, body = await lab.api("ta1", "POST", "courses/ml101/start", {})
    assert (code, body["message"]) == (202, "Starting 2 servers.")
    progress = await finished(lab)
    assert progress["summary"] == "2 of 2 ready"
    assert lab.hub.running("stu1", "ml101") and lab.hub.running("stu2", "ml101")
    code, body = await lab.api("ta1", "POST", "courses/ml101/start", {"now": True})
    assert code == 400  # a body it does not know starts nothing
    lab.hub.users["stu3"].add("ml101")
    code, body = await lab.api("ta1", "POST", "courses/ml101/stop", {})
    assert (code, body["message"]) == (200, "Stop all: 2 stopped, 1 was not running.")
    assert not lab.hub.servers
    code, body = await lab.api("ta1", "GET", "courses/ml101/audit")
    assert [(a["who"], a["action"]) for a in body["audit"]][:2] == [
        ("ta1", "stop-all"), ("ta1", "start-all")
    ]  # fmt: skip


async def with_content_and_two_servers(lab) -> None:
    """ml101 gets a repository, and stu1 and stu2 run its course server."""
    await lab.api(
        "ta1",
        "PUT",
        "courses/ml101",
        {"content": [{"repo": "https://git.example.edu/ml.git", "dir": "ml101"}]},
    )
    lab.hub.run("stu1", "ml101")
    lab.hub.run("stu2", "ml101")


async def test_distribute_pulls_into_running_course_servers_and_names_failures(lab):
    code, body = await lab.api("ta1", "POST", "courses/ml101/distribute", {})
    assert body["message"] == "Nothing to pull: the course has no repository."
    await with_content_and_two_servers(lab)
    lab.engine.status["stu1"] = b"pulled\tml101\t2026-12-02T16:40:00Z\t\t\n"
    lab.engine.status["stu2"] = b"failed\tml101\t2026-12-02T16:40:00Z\t\tno such branch\n"
    code, body = await lab.api("ta1", "POST", "courses/ml101/distribute", {})
    assert code == 200 and lab.engine.pulled == ["stu1", "stu2"]
    assert (
        body["message"] == "Pulled into 1 of 2 running servers. Failed in 1: stu2 (see the roster)."
    )
    page = await lab.form("ta1", "ml101", "distribute")
    assert flash(page).startswith("warning: Pulled into 1 of 2")


async def test_collect_and_return_count_what_each_student_handed_in(lab):
    s = lab.courses.settings
    files = lab.engine.files
    files.write_tree(s.work_of("ml101", "stu1"), "assignments/hw1",
                     [Entry("a.py", b"work", 1.0)], OWNER)  # fmt: skip
    code, body = await lab.api("ta1", "POST", "courses/ml101/collect", {"assignment": "hw1"})
    assert (code, body["message"]) == (200, "1 of 2 submitted.")
    assert body["report"]["stu2"]["state"] == "missing"
    code, body = await lab.api("ta1", "POST", "courses/ml101/collect",
                               {"assignment": "../etc"})  # fmt: skip
    assert code == 400 and "is not an assignment name" in body["message"]
    files.write_tree(s.staff_of("ml101"), f"feedback/hw1/{folder_name('stu1')}",
                     [Entry("grade.txt", b"A", 1.0)], OWNER)  # fmt: skip
    code, body = await lab.api("ta1", "POST", "courses/ml101/return", {"assignment": "hw1"})
    assert (code, body["message"]) == (200, "Feedback returned to 1 of 2 students.")
    page = await lab.form("ta1", "ml101", "collect", {"assignment": "hw1"})
    assert flash(page) == "success: Collected hw1: 1 of 2 submitted; missing: stu2."
    page = await lab.form("ta1", "ml101", "return", {"assignment": "hw1"})
    assert flash(page) == "success: Feedback on hw1 returned to 1 of 2 students."
    page = await lab.form("ta1", "ml101", "collect", {"assignment": "a b"})
    assert flash(page) == "danger: 'a b' is not an assignment name."


# -- the pages ------------------------------------------------------------------------------


async def test_the_courses_page_lists_what_each_reader_teaches(lab):
    page = await lab.page("ta1", "courses")
    assert "ML 101" in page and "DL 201" not in page
    page = await lab.page("admin", "courses")
    assert "ML 101" in page and "DL 201" in page
    page = await lab.page("stu1", "courses")
    assert "ML 101" not in page
    code, _, text = await lab.request("stu1", "GET", "courses/ml101")
    assert code == 403 and "is for its staff (group ml101-staff)" in text
    code, _, _ = await lab.request("ta1", "GET", "courses/nope1")
    assert code == 404


async def test_admins_create_a_course_from_the_form_and_others_may_not(lab):
    page = await lab.form("admin", "", "", {"slug": "cv301", "title": "CV", "profile": "cpu",
                                            "reserve": "0", "lead_minutes": "20"},
                          path="courses")  # fmt: skip
    assert flash(page) == "success: Course cv301 created."
    assert record(lab, "cv301")["lead_minutes"] == 20 and "cv301-staff" in lab.hub.groups
    page = await lab.form("admin", "", "", {"slug": "cv301"}, path="courses")
    assert flash(page) == "danger: Course cv301 exists already."
    page = await lab.form("admin", "", "", {"record": "{not json"}, path="courses")
    assert flash(page).startswith("danger: Course not created: the record is not JSON")
    page = await lab.form("admin", "", "", {"record": '{"slug": "cv302", "lead_minutes": -1}'},
                          path="courses")  # fmt: skip
    assert flash(page).startswith("danger: Course not created:") and "lead_minutes" in page
    page = await lab.form("admin", "", "", {"slug": "cv303", "reserve": "²"}, path="courses")
    assert flash(page).startswith("danger: Course not created: reserve")
    code, _, _ = await lab.request("ta1", "POST", "courses", form={"slug": "cv304"})
    assert code == 403
    assert {s.course.slug for s in CourseStore(lab.ledger.engine).all()} == {
        "ml101", "dl201", "cv301"
    }  # fmt: skip


async def test_roster_forms_add_remove_and_a_csv_preview_applied(lab):
    lab.hub.run("stu2", "ml101")
    page = await lab.form("ta1", "ml101", "add", {"user": "stu3"})
    assert flash(page) == "success: stu3 added to the roster."
    page = await lab.form("ta1", "ml101", "add", {"user": "ghost"})
    assert flash(page) == "danger: No user 'ghost' on the hub; nothing changed."
    page = await lab.form("ta1", "ml101", "add", {"user": ""})
    assert flash(page).startswith("danger:") and flash(page).endswith("Nothing changed.")
    page = await lab.form("ta1", "ml101", "remove", {"user": "stu2"})
    assert flash(page) == "success: stu2 removed from the roster; their course server was stopped."
    assert not lab.hub.running("stu2", "ml101")
    # a CSV: previewed (nothing changes), shown with its Apply, then applied
    code, headers, _ = await lab.request("ta1", "POST", "courses/ml101/actions/csv",
                                         form={"csv": "stu1\neve\n"})  # fmt: skip
    assert code == 302
    cookie = "; ".join(c.split(";", 1)[0] for c in headers.get_list("Set-Cookie"))
    page = await lab.page("ta1", "courses/ml101", cookie=cookie)
    assert "Preview below: nothing changed yet." in page and 'id="csv-apply"' in page
    pid = page.split('name="apply" value="', 1)[1].split('"', 1)[0]
    assert "ml101" not in lab.hub.users["eve"]
    page = await lab.form("ta1", "ml101", "csv", {"apply": pid})
    assert flash(page) == "success: Roster: 1 added, 1 removed."
    assert "ml101" in lab.hub.users["eve"] and "ml101" not in lab.hub.users["stu3"]
    page = await lab.form("ta1", "ml101", "csv", {"apply": pid})
    assert flash(page).startswith("danger: That preview is gone")
    page = await lab.form("ta1", "ml101", "csv", {"csv": ""})
    assert flash(page).startswith("danger: The CSV holds no usernames")


@pytest.mark.parametrize(
    "action, data, says",
    [
        ("weekly", {"days": ["mon", "wed"], "start": "10:00", "end": "12:00",
                    "from": "2027-01-04", "until": "2027-03-26"},
         "success: Weekly sessions added: mon, wed 10:00-12:00."),
        ("weekly", {"days": ["mon"], "start": "12:00", "end": "10:00", "from": "2027-01-04",
                    "until": "2027-03-26"}, "danger: Not saved:"),
        ("date", {"start": "2027-02-01T10:00", "end": "2027-02-01T12:00"},
         "success: Session added: 2027-02-01T10:00 to 2027-02-01T12:00."),
        ("assignment", {"name": "hw2", "due": "2027-02-01T23:59"},
         "success: Assignment hw2 added, collected at 2027-02-01T23:59."),
        ("assignment", {"name": "../x"}, "danger: Not saved:"),
        ("assignment-remove", {"name": "hw1"}, "success: Assignment hw1 removed."),
        ("assignment-remove", {"name": "hw9"}, "danger: Not saved: no assignment 'hw9'"),
        ("session-remove", {"kind": "weekly", "index": "0"},
         "danger: Not saved: no such entry (the page was out of date; reload it)"),
        ("session-remove", {"kind": "nope", "index": "0"}, "danger: Not saved: no such entry"),
        ("content-remove", {"index": "x"}, "danger: Not saved: index"),
        ("seats", {"prestart-form": "1", "lead_minutes": "30", "reserve": "0"},
         "success: Saved: no pre-start; 0 seats reserved per session."),
        ("seats", {"lead_minutes": "45"},
         "success: Saved: servers started 45 min before each session; 0 seats reserved per session."),
        ("record", {"record": '{"title": "ML One"}'}, "success: Saved."),
        ("record", {"record": "[1]"}, "danger: Not saved: the record must be a JSON object"),
        ("record", {"record": "{"}, "danger: Not saved: the record is not JSON"),
        ("record", {"record": '{"slug": "ml102"}'},
         "danger: Not saved: the slug of a course cannot change"),
        ("record", {"record": '{"shared_folder": "/srv/x"}'},
         "danger: Not saved: only an admin may change shared_folder."),
        ("record", {"record": '{"staff_group": "ta-all"}'},
         "danger: Not saved: only an admin may change staff_group."),
        ("record", {"record": '{"title": "ML 101"}'}, "success: Nothing changed."),
    ],
)  # fmt: skip
async def test_each_record_form_saves_or_says_why_not(lab, action, data, says):
    before = record(lab)
    page = await lab.form("ta1", "ml101", action, data)
    assert flash(page).startswith(says), flash(page)
    if says.startswith("danger") or "Nothing changed" in says:
        assert record(lab) == before  # a refused form changes nothing


async def test_content_forms_add_a_pullable_repository_and_remove_it(lab):
    repo = "https://git.example.edu/ml.git"
    lab.engine.repos[repo] = (0, "", "")  # no such branch
    page = await lab.form("ta1", "ml101", "content", {"repo": repo, "branch": "dev"})
    assert flash(page) == f"danger: Not saved: the repository {repo} has no branch 'dev'."
    del lab.engine.repos[repo]
    page = await lab.form("ta1", "ml101", "content", {"repo": repo, "dir": "ml"})
    assert flash(page) == f"success: Added {repo}: pulled at every start, or now with Distribute."
    assert record(lab)["content"] == [{"repo": repo, "branch": "main", "dir": "ml"}]
    page = await lab.form("ta1", "ml101", "content-remove", {"index": "0"})
    assert flash(page) == "success: Removed." and record(lab)["content"] == []


async def test_start_and_stop_from_the_page_and_forms_only_for_staff(lab):
    page = await lab.form("ta1", "ml101", "start")
    assert flash(page) == "info: Starting 2 servers."
    await finished(lab)
    page = await lab.page("ta1", "courses/ml101")
    assert "2 of 2 ready" in page
    page = await lab.form("ta1", "ml101", "stop")
    assert flash(page) == "success: Stopped: 2 stopped."
    code, _, _ = await lab.request("stu1", "POST", "courses/ml101/actions/start", form={})
    assert code == 403
    code, _, _ = await lab.request(None, "POST", "courses/ml101/actions/start", form={})
    assert code == 403
    code, _, text = await lab.request("ta1", "POST", "courses/ml101/actions/explode", form={})
    assert code == 404 and "No action 'explode'" in html.unescape(text)
    assert not lab.hub.servers


async def test_the_summary_does_not_count_a_server_without_its_content_ready(lab):
    """Issue 20: a start-all whose servers all started said "2 of 2 ready" though one pull
    failed; the staff read it in the roster only."""
    await lab.api(
        "ta1",
        "PUT",
        "courses/ml101",
        {"content": [{"repo": "https://git.example.edu/ml.git", "dir": "ml101"}]},
    )
    lab.engine.status["stu1"] = b"pulled\tml101\t2026-12-02T16:40:00Z\t\t\n"
    lab.engine.status["stu2"] = (
        b"failed\tml101\t2026-12-02T16:40:00Z\t\tfatal: repository not found\n"
    )
    await lab.api("ta1", "POST", "courses/ml101/start", {})
    await finished(lab)
    _, body = await lab.api("ta1", "GET", "courses/ml101")
    assert body["progress"]["summary"] == (
        "1 of 2 ready, 1 started without its content (stu2): "
        "failed: ~/ml101: fatal: repository not found"
    )
    page = await lab.page("ta1", "courses/ml101")
    assert "1 of 2 ready, 1 started without its content (stu2)" in page


async def test_students_and_staff_find_their_courses_on_their_own_page(lab):
    day = (clock.utcnow() + timedelta(days=3)).date().isoformat()
    page = await lab.form("ta1", "ml101", "date", {"start": f"{day}T10:00", "end": f"{day}T12:00"})
    assert flash(page).startswith("success: Session added")
    page = await lab.page("stu1", "me")
    assert 'data-course="ml101"' in page and 'data-course="dl201"' not in page
    assert "Next session: " in page and "is started for you from" in page
    assert "~/assignments/hw1" in page
    assert 'courses/ml101">The course page' not in page  # students get no course page link
    page = await lab.page("ta1", "me")
    assert 'courses/ml101">The course page' in page
    page = await lab.page("eve", "me")
    assert "My courses" not in page


async def test_a_server_not_started_as_the_courses_is_left_alone(lab):
    await with_content_and_two_servers(lab)
    lab.engine.not_course.add("stu2")  # its own home mounted: never written into
    lab.engine.status["stu1"] = b"pulled\tml101\t2026-12-02T16:40:00Z\t\t\n"
    _, body = await lab.api("ta1", "POST", "courses/ml101/distribute", {})
    assert lab.engine.pulled == ["stu1"]
    assert body["message"] == (
        "Pulled into 1 of 1 running servers. Not a course server, left alone in 1: stu2 "
        "(restart it as the course's server)."
    )
    page = await lab.page("ta1", "courses/ml101")
    assert "pulled at" in page  # stu1's content line in the roster


async def test_the_course_page_still_shows_when_the_hub_cannot_list_servers(lab):
    lab.hub.run("stu1", "ml101")
    await lab.api("ta1", "GET", "courses/ml101")  # the service remembers who ran
    lab.hub.listing = False
    code, body = await lab.api("ta1", "GET", "courses/ml101")
    assert code == 200
    assert {r["user"]: r["server"] for r in body["roster"]} == {"stu1": "running",
                                                                 "stu2": "stopped"}  # fmt: skip


# -- the roster a page at a time -----------------------------------------------------------

PAGED = {"Accept": "application/jupyterhub-pagination+json"}


async def test_the_roster_pages_like_jupyterhubs_api_and_the_course_page_pages_it(tmp_path):
    """A course of a campus has hundreds of students: ``GET api/courses/<slug>`` answers its
    roster a page at a time, by name, in JupyterHub's shape; following ``next`` sees each
    student once; the filter, a misspelt argument and staff of another course are refused as
    for every paged list; the course page shows a page with its total and links."""
    students = ["Zoë", "a-b", "a.b", "a_b", *(f"s{i:02d}" for i in range(5))]
    users = {"ta1": ["ml101-staff"], "ta2": ["dl201-staff"], **{s: ["ml101"] for s in students}}
    lab = await course_lab(tmp_path, courses=[ML101, DL201], users=users)
    try:
        walked, path = [], "api/courses/ml101?limit=4"
        while path:
            code, _, text = await lab.request("ta1", "GET", path, headers=PAGED)
            body = json.loads(text)
            assert code == 200 and body["_pagination"]["total"] == len(students), text[:300]
            assert "roster" not in body and body["course"]["slug"] == "ml101"
            check_body("/courses/ml101", "GET", 200, body)  # the OpenAPI document's CoursePage
            walked += [r["user"] for r in body["items"]]
            nxt = body["_pagination"]["next"]
            path = nxt and "api/" + nxt["url"].split("/api/", 1)[1]
        assert walked == sorted(students)
        _, body = await lab.api("ta1", "GET", "courses/ml101?sort=-user&limit=2")
        assert [r["user"] for r in body["roster"]] == sorted(students)[::-1][:2]
        assert body["_pagination"]["total"] == len(students)  # the older shape, told there is more
        check_body("/courses/ml101", "GET", 200, body)
        _, body = await lab.api("ta1", "GET", "courses/ml101?user=a.b")
        assert [r["user"] for r in body["roster"]] == ["a.b"]
        for who, query, status, says in (
            ("ta1", "offset=-1", 400, "offset must be a whole number"),
            ("ta1", "usr=a.b", 400, "Unknown query argument 'usr'"),
            ("ta1", "sort=server", 400, "sort must be one of user"),
            ("ta2", "limit=1", 403, "Only the staff of course ml101"),
        ):
            code, body = await lab.api(who, "GET", f"courses/ml101?{query}")
            assert (code, says in body["message"]) == (status, True), (query, body)
        page = await lab.page("ta1", "courses/ml101?limit=4&offset=4")
        assert re.findall(r'<tr class="student" data-user="([^"]+)"', page) == sorted(students)[4:8]
        assert "Roster (9)" in page and "Students 5–8 of 9" in page
        assert "offset=8" in page and "offset=0" in page  # next and previous
    finally:
        lab.stop()

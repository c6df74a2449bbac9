"""The course page's words for its staff reader (``service/web/coursereport.py``) and the spawn
form of a course's server (``spawner/form.py``'s ``course_choice``): pure rules, no engine."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from jupyterhub_gpulab.courses.store import AuditEntry
from jupyterhub_gpulab.lab.profiles import load_profiles
from jupyterhub_gpulab.service.web.coursereport import copy_reports, staff_reason, staff_server
from jupyterhub_gpulab.spawner.form import course_choice

T0 = datetime(2026, 10, 5, 14, 0, tzinfo=timezone.utc)
QUOTA = (
    "You already hold 1 GPU slice, the most your groups allow at once (1). Stop one of your "
    "servers to start this one."
)


@pytest.mark.parametrize(
    ("refusal", "status", "says"),
    [
        pytest.param(("quota", QUOTA), 429, "ann already holds as many GPU slices", id="quota"),
        pytest.param(("no-free-slice", "No free shared seat slice (0 of 4 free). …"), 503,
                     "ann has no free slice", id="no-free-slice"),
        pytest.param(None, 503, "ann has no free slice", id="no-ledger-row"),
        pytest.param(("quota", "You have used 12.0 of your 10 GPU-hours this week."), 429,
                     "ann's GPU-hour budget is spent", id="budget"),
    ],
)  # fmt: skip
def test_a_refusal_is_told_to_the_staff_about_the_student(refusal, status, says):
    reason = refusal[1] if refusal else "No free shared seat slice (0 of 4 free)."
    text = staff_reason("ann", reason, refusal, status)
    assert text.startswith(says), text
    assert "your" not in text.lower().split(":")[0]  # not the student's own words


def test_an_unknown_refusal_keeps_what_the_hub_said_under_the_students_name():
    assert staff_reason("ann", "the hub answered 500") == (
        "ann's server did not start: the hub answered 500"
    )
    assert staff_reason("ann", "") == ""


def test_the_summary_counts_the_same_phrase_for_every_student():
    a = staff_reason("ann", QUOTA, ("quota", QUOTA), 429, summary=True)
    b = staff_reason("bob", QUOTA, ("quota", QUOTA), 429, summary=True)
    assert a == b and "ann" not in a


def audit(action, assignment, report, who="tina", minute=0):
    at = T0.replace(minute=minute)
    return AuditEntry(at, who, "dl101", action, {"assignment": assignment, "report": report})


def test_each_assignment_keeps_its_latest_collect_and_return():
    newest_first = [
        audit("return", "hw1", {"bob": {"state": "returned", "files": 1},
                                "ann": {"state": "no-feedback"}}, minute=30),
        audit("collect", "hw1", {"bob": {"state": "submitted", "files": 1},
                                 "ann": {"state": "missing", "reason": "no assignments/hw1 folder"}},
              minute=20),
        audit("collect", "hw1", {"bob": {"state": "missing", "reason": "empty"}}, who="ta", minute=10),
        audit("distribute", "", {}),
    ]  # fmt: skip
    got = copy_reports(newest_first)
    assert set(got) == {"hw1"}
    collect = got["hw1"]["collect"]
    assert (collect["who"], collect["done"], collect["of"]) == ("tina", ["bob"], 2)
    assert collect["at"] == T0.replace(minute=20).isoformat()  # the latest, not the first
    assert collect["skipped"] == [
        {"user": "ann", "state": "missing", "reason": "no assignments/hw1 folder"}
    ]
    assert got["hw1"]["return"]["done"] == ["bob"]
    assert got["hw1"]["return"]["skipped"][0]["state"] == "no-feedback"


def test_the_staff_members_own_course_server_is_linked_running_or_not():
    running = {("tina", "dl101"): SimpleNamespace(state="running", url="/user/tina/dl101/")}
    assert staff_server("tina", "dl101", running) == {
        "user": "tina", "state": "running", "url": "/user/tina/dl101/"
    }  # fmt: skip
    assert staff_server("tina", "dl101", {})["url"] is None  # the page links spawn/tina/dl101
    assert staff_server(None, "dl101", running) is None


PROFILES = load_profiles(
    [
        {"slug": "cpu", "display_name": "CPU", "image": "x", "default": True},
        {"slug": "mig", "display_name": "PyTorch MIG", "image": "x",
         "slice": {"kind": "mig", "mig_profile": "1g.5gb"}},
        {"slug": "tf-seat", "display_name": "TensorFlow seat", "image": "x",
         "slice": {"kind": "shared"}},
    ]
)  # fmt: skip


def test_a_course_servers_form_offers_the_courses_profile_and_preselects_it():
    offered, preselect, notice = course_choice(PROFILES, "Deep learning 101", ("tf-seat",))
    assert [p.slug for p in offered] == ["tf-seat"] and preselect == "tf-seat"
    assert "course Deep learning 101" in notice and "TensorFlow seat" in notice


def test_a_course_whose_profiles_the_user_may_not_pick_leaves_the_form_alone():
    offered, preselect, notice = course_choice(PROFILES[:2], "DL", ("tf-seat",))
    assert [p.slug for p in offered] == ["cpu", "mig"] and preselect is None and notice == ""

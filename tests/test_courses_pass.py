"""The service's course start-up and scheduled pass without a hub or an engine: a real
:class:`~jupyterhub_gpulab.courses.manager.CourseManager` on a real SQLite ledger, whose hub
client points at a port nobody listens on (the hub is down: what the service must survive).

- a stored record with a date Python cannot move between the lab's zone and UTC (saved before
  dates were bounded) fails only that assignment: every later deadline is still collected;
- a declared record that does not parse, a stored one that no longer does, a profile the lab lost:
  each marks only its course as needing attention (issue 20.6).
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from traitlets.config import Config

from jupyterhub_gpulab.courses.config import GPULabCourses
from jupyterhub_gpulab.courses.manager import CourseManager
from jupyterhub_gpulab.courses.model import CourseError
from jupyterhub_gpulab.courses.parse import parse_course, split_courses
from jupyterhub_gpulab.courses.store import CourseStore
from jupyterhub_gpulab.hubapi.client import HubClient
from jupyterhub_gpulab.ledger import Ledger
from jupyterhub_gpulab.ledger.schema import courses as courses_table

BERLIN = ZoneInfo("Europe/Berlin")
LA = ZoneInfo("America/Los_Angeles")


@pytest.fixture
def ledger(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path}/gpulab.sqlite")
    yield ledger
    ledger.close()


def manager(ledger, tz, courses=(), profiles=("cpu",)) -> CourseManager:
    config = Config()
    config.GPULabCourses.courses = list(courses)
    return CourseManager(
        CourseStore(ledger.engine),
        GPULabCourses(config=config),
        HubClient("http://127.0.0.1:9/hub/api", "unused", timeout=1),
        tz=tz,
        secret=None,
        ledger=ledger,
        lab_profiles={p: None for p in profiles},
    )


def store_raw(ledger, record: dict) -> None:
    """Write a record as an older version did: no validation on the way in."""
    now = datetime.now(timezone.utc)
    with ledger.engine.begin() as conn:
        conn.execute(
            courses_table.insert().values(
                slug=record["slug"], record=json.dumps(record), origin="admin",
                created_at=now, updated_at=now, updated_by="admin",
            )
        )  # fmt: skip


def local(t: datetime, tz) -> str:
    return t.astimezone(tz).replace(tzinfo=None).isoformat(timespec="minutes")


@pytest.mark.parametrize(
    "tz, far", [(BERLIN, "0001-01-01T00:00"), (LA, "9999-12-31T23:59")], ids=["east", "west"]
)
async def test_a_date_the_zone_cannot_convert_fails_only_its_assignment(ledger, tz, far, caplog):
    now = datetime.now(timezone.utc)
    due = local(now - timedelta(minutes=5), tz)
    store_raw(
        ledger,
        {
            "slug": "ml101",
            "assignments": [{"name": "hw0", "due": far}, {"name": "hw1", "due": due}],
        },
    )
    m = manager(ledger, tz)
    with caplog.at_level(logging.ERROR, "gpulab.courses"):
        await m.check_due()
    taken = CourseStore(ledger.engine).deadlines("ml101")
    # hw1's deadline was taken up (its collect then failed: the hub is down) and hw0 logged
    assert [a for a, _ in taken] == ["hw1"]
    assert "collecting hw0 at its deadline failed" in caplog.text


async def test_a_course_problem_marks_its_course_and_the_rest_is_stored(ledger, caplog):
    store_raw(ledger, {"slug": "old9", "profiles": 5})
    store_raw(ledger, {"slug": "cv202", "profiles": ["gpu-old"]})
    declared = [
        {"slug": "ml101", "profiles": ["cpu"]},
        {"slug": "dl201", "profiles": ["gpu-old"]},
        {"slug": "ml101", "title": "again"},
        {"title": "no slug"},
    ]
    m = manager(ledger, timezone.utc, declared)
    with caplog.at_level(logging.WARNING, "gpulab.courses"):
        await m.declare()
    store = CourseStore(ledger.engine)
    assert store.get("ml101") is None  # two declared courses claim ml101: neither is applied
    assert set(m.attention) == {"ml101", "dl201", "courses[3]", "old9", "cv202"}
    assert "two courses have the slug 'ml101'" in " ".join(m.attention["ml101"])
    assert "profile 'gpu-old' is not one of the lab's" in " ".join(m.attention["cv202"])
    assert "stored record cannot be read" in " ".join(m.attention["old9"])
    assert {s.course.slug for s in store.all()} == {"cv202"}
    assert store.unreadable().keys() == {"old9"}
    assert "Course dl201 needs attention" in caplog.text
    # an admin's valid save clears it
    await m.save(parse_course({"slug": "cv202", "profiles": ["cpu"]}), by="admin")
    assert m.attention_of("cv202") == []


def test_split_courses_keeps_the_good_ones():
    good, problems = split_courses(
        [{"slug": "ml101"}, {"slug": "dl201", "lead_minutes": -1}, "nonsense"]
    )
    assert [c.slug for c in good] == ["ml101"]
    assert set(problems) == {"dl201", "courses[2]"}
    assert split_courses({"slug": "x"})[1] == {
        "courses": ["c.GPULabCourses.courses must be a list of dicts"]
    }
    with pytest.raises(CourseError):
        GPULabCourses(config=_config([{"slug": "dl201", "lead_minutes": -1}])).declared()


def _config(courses) -> Config:
    c = Config()
    c.GPULabCourses.courses = courses
    return c


@pytest.mark.parametrize(
    "field, value",
    [
        ("assignments", [{"name": "hw1", "due": "0001-01-01T00:00"}]),
        ("sessions", {"dates": [{"start": "9999-12-31T22:00", "end": "9999-12-31T23:00"}]}),
        (
            "sessions",
            {
                "weekly": [
                    {
                        "days": ["mon"],
                        "start": "10:00",
                        "end": "11:00",
                        "from": "2026-09-07",
                        "until": "9999-12-31",
                    }
                ]
            },
        ),  # fmt: skip
    ],
)
def test_course_dates_lie_in_this_century_but_stored_ones_stay_readable(field, value):
    with pytest.raises(CourseError, match="must lie in the years 2000 to 2099"):
        parse_course({"slug": "ml101", field: value})
    assert parse_course({"slug": "ml101", field: value}, years=None).slug == "ml101"


async def test_a_prestart_the_hub_never_answers_is_interrupted_not_done():
    """The hub is down: each server is failed and the run is cut off (the next pass resumes it),
    never recorded as finished."""
    from jupyterhub_gpulab.courses.prestart import PrestartRun

    run = PrestartRun(parse_course({"slug": "ml101"}), ["a", "b"])
    await run.start_all(
        HubClient("http://127.0.0.1:9/hub/api", "x", timeout=1),
        batch=2, retries=0, backoff_s=0, ready_timeout_s=5,
    )  # fmt: skip
    assert run.interrupted
    assert {p.state for p in run.servers.values()} == {"failed"}
    assert run.summary().startswith("0 of 2 ready, 2 failed: the hub")


async def test_a_failed_prestart_is_retried_with_doubling_back_off():
    """retries=2, backoff 0.3 s: three attempts, 0.3 s then 0.6 s apart (a hub that refuses the
    connection answers at once, so the waits are the back-off's)."""
    import time

    from jupyterhub_gpulab.courses.prestart import PrestartRun

    run = PrestartRun(parse_course({"slug": "ml101"}), ["a"])
    began = time.monotonic()
    await run.start_all(
        HubClient("http://127.0.0.1:9/hub/api", "x", timeout=1),
        batch=1, retries=2, backoff_s=0.3, ready_timeout_s=5,
    )  # fmt: skip
    assert run.servers["a"].attempts == 3
    assert time.monotonic() - began >= 0.85


async def test_a_deadline_missed_by_more_than_a_day_is_left_to_the_staff(ledger):
    now = datetime.now(timezone.utc)
    store_raw(ledger, {"slug": "ml101", "assignments": [
        {"name": "old", "due": local(now - timedelta(hours=25), BERLIN)},
        {"name": "new", "due": local(now - timedelta(hours=23), BERLIN)},
    ]})  # fmt: skip
    await manager(ledger, BERLIN).check_due()
    assert [a for a, _ in CourseStore(ledger.engine).deadlines("ml101")] == ["new"]


async def test_a_course_needing_attention_is_not_prestarted(ledger):
    now = datetime.now(timezone.utc)
    session = {"start": local(now + timedelta(minutes=5), timezone.utc),
               "end": local(now + timedelta(minutes=65), timezone.utc)}  # fmt: skip
    for slug, profile in (("ml101", "cpu"), ("cv202", "gpu-old")):
        store_raw(ledger, {"slug": slug, "profiles": [profile], "sessions": {"dates": [session]}})
    m = manager(ledger, timezone.utc)
    await m.declare()
    assert set(m.attention) == {"cv202"}
    await m.check_due()
    store = CourseStore(ledger.engine)
    assert store.prestarts("ml101") and not store.prestarts("cv202")


def test_only_users_off_the_roster_and_staff_lose_their_course_server():
    from jupyterhub_gpulab.courses.schedule import strays_of
    from jupyterhub_gpulab.hubapi.servers import HubServer

    course = parse_course({"slug": "ml101"})
    servers = [
        HubServer("stu", "ml101", "ready", groups=("ml101",)),
        HubServer("ta", "ml101", "ready", groups=("ml101-staff",)),
        HubServer("root", "ml101", "ready", admin=True),
        HubServer("gone", "ml101", "ready", groups=("students",)),
        HubServer("gone", "", "ready", groups=("students",)),  # their own server stays
        HubServer("other", "dl201", "ready"),
    ]
    assert strays_of(course, {s.key: s for s in servers}) == ["gone"]


@pytest.mark.parametrize("hours", [float("nan"), float("inf"), -1, 1_000_001, True, "400"])
def test_a_course_budget_is_a_finite_number_of_gpu_hours(hours):
    """NaN passed "< 0" once and was written out as bare NaN, which no JSON reader takes."""
    with pytest.raises(CourseError, match="'gpu_hours' must be a number of GPU-hours"):
        parse_course({"slug": "ml101", "gpu_hours": hours})
    assert parse_course({"slug": "ml101", "gpu_hours": 400}).gpu_hours == 400.0


async def test_a_session_is_prestarted_only_within_its_lead(ledger):
    now = datetime.now(timezone.utc)

    def at(minutes: int) -> dict:
        return {"start": local(now + timedelta(minutes=minutes), timezone.utc),
                "end": local(now + timedelta(minutes=minutes + 60), timezone.utc)}  # fmt: skip

    store_raw(ledger, {"slug": "ml101", "lead_minutes": 15, "sessions": {"dates": [at(30)]}})
    store_raw(ledger, {"slug": "dl201", "lead_minutes": 15, "sessions": {"dates": [at(10)]}})
    await manager(ledger, timezone.utc).check_due()
    store = CourseStore(ledger.engine)
    assert not store.prestarts("ml101") and store.prestarts("dl201")

"""A course's reservations, schedule records and budget, on a real ledger (SQLite and
PostgreSQL), without a hub: each session of a course that reserves seats is booked for its roster
and staff (all sessions or none when saved, naming the conflict; what fits when synced); a
pre-start runs once per session across services and is resumed when its service was killed; a
deadline is collected once; the course budget counts the course servers' GPU-hours."""

from __future__ import annotations

import threading
from datetime import datetime, timezone

import pytest
from ledger_support import backends, lab_inventory, make_url, seats_lab

from jupyterhub_gpulab.courses.budget import refusal, used_gpu_hours, window_start
from jupyterhub_gpulab.courses.model import CourseError
from jupyterhub_gpulab.courses.parse import parse_course
from jupyterhub_gpulab.courses.reserve import book_course, booking_specs, sync_course
from jupyterhub_gpulab.courses.store import CourseStore
from jupyterhub_gpulab.lab.profiles import load_profiles
from jupyterhub_gpulab.ledger import BookingConflict, Ledger, NoFreeSlice

UTC = timezone.utc
#: One T4 split into 4 seats: the only slices of the profile "seat".
SEATS = seats_lab(seats=4, memory_per_seat="4GiB")
PROFILES = {
    p.slug: p
    for p in load_profiles(
        [
            {"slug": "seat", "display_name": "Seat", "image": "x", "slice": {"kind": "shared"}},
            {"slug": "cpu", "display_name": "CPU", "image": "x"},
        ]
    )
}


@pytest.fixture(params=backends())
def ledger(request, tmp_path):
    led = Ledger(make_url(request.param, tmp_path))
    led.sync_inventory(lab_inventory(SEATS))
    yield led
    led.close()


def course(slug="dl101", *, reserve=3, days=("mon",), start="14:00", **kw):
    return parse_course(
        {
            "slug": slug,
            "profiles": ["seat"],
            "reserve": reserve,
            "lead_minutes": 15,
            "grace_minutes": 10,
            "sessions": {
                "weekly": [
                    {"days": list(days), "start": start, "end": "16:00", "from": "2026-12-07",
                     "until": "2026-12-21"}
                ]
            },
            **kw,
        }
    )  # fmt: skip


MONDAY = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)  # the morning of the first session


def test_the_record_takes_seats_grace_and_assignments_and_refuses_bad_ones():
    c = course(assignments=[{"name": "hw1", "due": "2026-12-11T23:59"}, "lab2"])
    assert (c.reserve, c.grace_minutes) == (3, 10)
    assert [(a.name, a.due) for a in c.assignments] == [
        ("hw1", datetime(2026, 12, 11, 23, 59)),
        ("lab2", None),
    ]
    assert parse_course(c.to_dict()) == c
    for bad, says in (
        ({"reserve": -1}, "'reserve'"),
        ({"reserve": 2, "profiles": []}, "needs a profile"),
        ({"grace_minutes": "ten"}, "grace_minutes"),
        ({"assignments": [{"name": "../x"}]}, "one folder name"),
        ({"assignments": [{"name": "hw1", "due": "friday"}]}, "assignments[0].due"),
        ({"assignments": ["hw1", "hw1"]}, "same name"),
        ({"reserve_lead_minutes": 5}, "must not be shorter than 'lead_minutes'"),
        ({"prestart": "yes"}, "'prestart'"),
    ):
        record = {**course().to_dict(), **bad}
        with pytest.raises(CourseError) as e:
            parse_course(record)
        assert says in str(e.value), bad


def test_each_session_is_booked_for_the_roster_and_staff(ledger, at):
    at.now = MONDAY
    c = course()
    booked = book_course(ledger, c, PROFILES["seat"], now=at.now, tz=UTC)
    # three Mondays, each 14:00-16:00, kept from 13:45, released to everyone at 14:10
    assert [(b.starts_at.day, b.count) for b in booked] == [(7, 3), (14, 3), (21, 3)]
    first = booked[0]
    assert set(first.groups) == {"dl101", "dl101-staff"} and first.profile == "seat"
    assert first.window_start == datetime(2026, 12, 7, 13, 45, tzinfo=UTC)
    early = booking_specs(parse_course({**c.to_dict(), "reserve_lead_minutes": 60}),
                          PROFILES["seat"], at.now, UTC)  # fmt: skip
    assert early[0]["lead_s"] == 3600
    assert first.release_at == datetime(2026, 12, 7, 14, 10, tzinfo=UTC)
    at.now = datetime(2026, 12, 7, 13, 50, tzinfo=UTC)
    seat = PROFILES["seat"].slice
    assert ledger.claim(seat, user="w0", profile="seat", groups=["physics"])
    with pytest.raises(NoFreeSlice) as e:  # 4 seats, 3 kept for the class
        ledger.claim(seat, user="w1", profile="seat", groups=["physics"])
    assert "3 of 4 reserved for dl101" in e.value.message
    # a member's course server takes one of the course's seats
    mine = ledger.claim(seat, user="s1", profile="seat", server_name="dl101", groups=["dl101"])
    assert mine.allocation.booking_id
    # the course drops its seats: its bookings go, what it booked no longer keeps anyone out
    book_course(ledger, parse_course({**c.to_dict(), "reserve": 0}), PROFILES["seat"],
                now=at.now, tz=UTC)  # fmt: skip
    assert ledger.bookings(at.now) == []
    assert ledger.claim(seat, user="w1", profile="seat", groups=["physics"])


def test_back_to_back_sessions_keep_one_rosters_seats_once(ledger, at):
    """Two 1-hour sessions at 10:00 and 11:00 with a 60-minute lead: the second one's lead
    begins when the first ends, so 3 of the 4 seats are kept once, not 2 × 3 at 10:45 (which
    was refused as a conflict of the course with itself)."""
    at.now = MONDAY
    weekly = [
        {"days": ["mon"], "start": f"{h}:00", "end": f"{h + 1}:00", "from": "2026-12-07",
         "until": "2026-12-07"}
        for h in (10, 11)
    ]  # fmt: skip
    c = parse_course({"slug": "dl101", "profiles": ["seat"], "reserve": 3, "lead_minutes": 15,
                      "reserve_lead_minutes": 60, "sessions": {"weekly": weekly}})  # fmt: skip
    booked = book_course(ledger, c, PROFILES["seat"], now=at.now, tz=UTC)
    assert [(b.window_start.hour, b.window_start.minute) for b in booked] == [(9, 0), (11, 0)]
    at.now = datetime(2026, 12, 7, 10, 45, tzinfo=UTC)  # inside both windows, before the fix
    seat = PROFILES["seat"].slice
    assert ledger.claim(seat, user="w0", profile="seat", groups=["physics"])


def test_a_course_the_lab_cannot_seat_beside_another_is_refused_whole(ledger, at):
    at.now = MONDAY
    book_course(ledger, course(), PROFILES["seat"], now=at.now, tz=UTC)
    # ML200 meets Mondays and Wednesdays at 15:00: its Monday sessions overlap DL101's
    other = course("ml200", reserve=2, days=("mon", "wed"), start="15:00")
    with pytest.raises(BookingConflict) as e:
        book_course(ledger, other, PROFILES["seat"], now=at.now, tz=UTC)
    assert "dl101" in e.value.message and "Move or shrink" in e.value.message
    assert {b.holder for b in ledger.bookings(at.now)} == {"dl101"}  # none of ML200's
    # synced instead (a course from the config): its Wednesdays are booked, the Mondays named
    problems = sync_course(ledger, other, PROFILES["seat"], now=at.now, tz=UTC)
    assert len(problems) == 3 and all("dl101" in p for p in problems)
    mine = [b for b in ledger.bookings(at.now) if b.holder == "ml200"]
    assert [b.starts_at.weekday() for b in mine] == [2, 2]
    # a course asking seats of a CPU profile is told why
    with pytest.raises(CourseError, match="holds none"):
        booking_specs(parse_course({**other.to_dict(), "profiles": ["cpu"]}), PROFILES["cpu"],
                      at.now, UTC)  # fmt: skip


def test_a_prestart_runs_once_per_session_and_is_resumed_when_cut_off(ledger, at):
    at.now = MONDAY
    store = CourseStore(ledger.engine)
    session = datetime(2026, 12, 7, 14, tzinfo=UTC)
    # two services look at once: the second, whose look began before the first's record was
    # committed, must not run it too
    from jupyterhub_gpulab.ledger.schema import course_prestarts

    first = ledger.engine.connect()
    tx = first.begin()
    first.execute(
        course_prestarts.insert().values(
            course="dl101", session_start=session, started_at=at.now, heartbeat_at=at.now,
            summary="",
        )
    )  # fmt: skip
    got = []
    second = threading.Thread(target=lambda: got.append(store.begin_prestart("dl101", session)))
    second.start()
    second.join(0.5)  # it waits for the first's transaction
    tx.commit()
    first.close()
    second.join(30)
    assert got == [False]
    assert store.begin_prestart("dl101", session) is False
    # while its service beats, nobody takes it over; once it stops (killed), the next one does
    at.move(60)
    store.heartbeat("dl101", session)
    at.move(60)
    assert store.begin_prestart("dl101", session, stale_after_s=120) is False
    at.move(121)
    assert store.begin_prestart("dl101", session, stale_after_s=120) is True
    assert store.begin_prestart("dl101", session, stale_after_s=120) is False
    # a finished one is never run again
    store.finish_prestart("dl101", session, "3 of 3 ready")
    at.move(3600)
    assert store.begin_prestart("dl101", session, stale_after_s=120) is False


def test_a_deadline_is_collected_once(ledger, at):
    at.now = MONDAY
    store = CourseStore(ledger.engine)
    due = datetime(2026, 12, 11, 22, 59, tzinfo=UTC)
    assert store.begin_deadline("dl101", "hw1", due) is True
    assert store.begin_deadline("dl101", "hw1", due) is False
    store.finish_deadline("dl101", "hw1", due, "2 of 3 submitted")
    at.move(86400)
    assert store.begin_deadline("dl101", "hw1", due) is False
    assert store.deadlines("dl101")[("hw1", due)][1] == "2 of 3 submitted"
    assert store.begin_deadline("dl101", "hw2", due) is True  # another assignment


def test_the_course_budget_counts_its_servers_gpu_hours(ledger, at):
    at.now = MONDAY
    c = course(gpu_hours=1)
    seat = PROFILES["seat"].slice
    mine = ledger.claim(seat, user="s1", profile="seat", server_name="dl101", groups=["dl101"])
    other = ledger.claim(seat, user="s2", profile="seat", server_name="", groups=["dl101"])
    at.move(3 * 3600)  # three hours of a quarter seat: 0.75 GPU-hours through the course
    allocs = ledger.allocations_between(MONDAY, at.now)
    used = used_gpu_hours(c, allocs, MONDAY, at.now)
    assert used == pytest.approx(0.75)
    assert refusal(c, used) is None
    at.move(3600)
    used = used_gpu_hours(c, ledger.allocations_between(MONDAY, at.now), MONDAY, at.now)
    assert "used 1.0 of its 1 GPU-hours" in refusal(c, used)
    assert refusal(course(), 1e9) is None  # no budget
    assert window_start(None, MONDAY, at.now) == MONDAY
    for a in (mine, other):
        ledger.release(a.allocation.id, "stopped")


def test_page_edits_of_a_declared_course_survive_restarts_until_the_config_changes_it(ledger):
    store = CourseStore(ledger.engine)
    declared = course(reserve=2)
    assert store.declare([declared]) == ["dl101"]
    edited = parse_course({**declared.to_dict(), "reserve": 5, "assignments": ["hw1"]})
    store.put(edited, by="ta")
    assert store.declare([declared]) == []  # a service restart: the TA's edit stays
    assert store.get("dl101").course == edited
    changed = parse_course({**declared.to_dict(), "title": "Deep learning, fall"})
    assert store.declare([changed]) == ["dl101"]  # the admin changed the config: it applies
    assert store.get("dl101").course == changed


def test_a_lead_the_culler_would_undo_is_named():
    from jupyterhub_gpulab.courses.reserve import fit_problems

    idle = load_profiles(
        [{"slug": "seat", "display_name": "Seat", "image": "x", "slice": {"kind": "shared"},
          "gpu_idle_timeout": "20m"}]
    )[0]  # fmt: skip
    assert fit_problems(course(), idle) == []  # 15 min of lead, 20 min of GPU idle: fine
    [problem] = fit_problems(parse_course({**course().to_dict(), "lead_minutes": 30}), idle)
    assert "gpu_idle_timeout (20 min)" in problem and "shorten the lead" in problem
    # seats kept an hour ahead, servers started 15 minutes ahead: fine; no pre-start: fine
    assert (
        fit_problems(parse_course({**course().to_dict(), "reserve_lead_minutes": 60}), idle) == []
    )
    no_prestart = parse_course({**course().to_dict(), "lead_minutes": 60, "prestart": False})
    assert fit_problems(no_prestart, idle) == []
    assert "holds none" in fit_problems(parse_course({**course().to_dict(), "profiles": ["cpu"]}),
                                        PROFILES["cpu"])[0]  # fmt: skip

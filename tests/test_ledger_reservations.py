"""Reservations (course sessions' seats) enforced in the ledger's claim, on SQLite and PostgreSQL:
members get the reserved seats, everyone else is kept off them inside the window, unclaimed seats
return after ``grace``, overlapping bookings the inventory cannot hold are refused, and all of it
survives a restart and holds across two OS processes."""

from __future__ import annotations

import multiprocessing as mp
import random
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from clock_support import MINUTE
from ledger_support import backends, lab_inventory, lab_url, make_url, seats_lab

from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.ledger import BookingConflict, Ledger, LedgerRefusal, NoFreeSlice

SEAT = SliceRequest(kind=SliceKind.SHARED)
ROSTER = ["dl101-students", "dl101-staff"]

#: Two T4s split into 4 seats each: 8 student seats; no other slices.
SEATS_LAB = seats_lab(2, seats=4, memory_per_seat="4GiB")


@pytest.fixture(params=backends())
def url(request, tmp_path):
    return lab_url(request.param, tmp_path, SEATS_LAB)


@pytest.fixture
def ledger(url):
    led = Ledger(url)
    yield led
    led.close()


def book(ledger, start, *, count=5, hours=2, lead=15 * MINUTE, grace=10 * MINUTE, **kw):
    kw.setdefault("holder", "DL101")
    kw.setdefault("groups", ROSTER)
    kw.setdefault("profile", "student")
    kw.setdefault("request", SEAT)
    return ledger.book(
        count=count,
        starts_at=start,
        ends_at=start + timedelta(hours=hours),
        lead_s=lead,
        grace_s=grace,
        **kw,
    )


def seat(ledger, user, groups=(), profile="student"):
    return ledger.claim(SEAT, user=user, profile=profile, groups=groups)


def test_inside_the_window_only_members_get_reserved_seats(ledger, at):
    start = at.now + timedelta(minutes=10)  # the lead (15 min) has begun
    book(ledger, start)
    # 8 seats, 5 kept for DL101: three walk-ins fit, the fourth is told why.
    for i in range(3):
        assert seat(ledger, f"walkin{i}", ["physics"]).allocation.booking_id is None
    with pytest.raises(NoFreeSlice) as e:
        seat(ledger, "walkin3", ["physics"])
    assert "5 of 8 reserved for DL101 until" in e.value.message
    # Every member gets one of the five, charged to the booking.
    members = [seat(ledger, f"student{i}", ["dl101-students"]) for i in range(5)]
    assert {c.allocation.booking_id for c in members} == {members[0].allocation.booking_id}
    assert members[0].allocation.booking_id is not None
    assert ledger.double_allocations() == []


def test_seats_are_everyone_s_before_the_lead_and_after_the_end(ledger, at):
    start = at.now + timedelta(hours=1)  # the lead starts at +45 min
    book(ledger, start)
    held = [seat(ledger, f"early{i}", ["physics"]) for i in range(6)]
    assert len(held) == 6  # no window yet: nobody is kept off
    for c in held:
        ledger.release(c.allocation.id, "stopped")
    at.now = start + timedelta(hours=2)  # ended
    assert len([seat(ledger, f"late{i}", ["physics"]) for i in range(8)]) == 8


def test_walk_ins_already_seated_keep_their_seats_and_members_take_what_frees(ledger, at):
    start = at.now + timedelta(hours=1)
    book(ledger, start, count=5)
    early = [seat(ledger, f"early{i}", ["physics"]) for i in range(7)]
    at.now = start  # window open, 1 seat free, 5 kept
    got = seat(ledger, "student0", ["dl101-students"])  # a member may take the last free seat
    assert got.allocation.booking_id is not None
    ledger.release(early[0].allocation.id, "stopped")
    with pytest.raises(NoFreeSlice):
        seat(ledger, "walkin", ["physics"])  # the freed seat goes to the class, not a walk-in
    assert seat(ledger, "student1", ["dl101-staff"]).allocation.booking_id is not None


def test_unclaimed_seats_return_to_everyone_after_grace(ledger, at):
    start = at.now + timedelta(minutes=5)
    book(ledger, start, count=5, grace=10 * MINUTE)
    seat(ledger, "student0", ["dl101-students"])  # 1 of 5 used, 4 kept unclaimed
    assert len([seat(ledger, f"w{i}", ["physics"]) for i in range(3)]) == 3
    with pytest.raises(NoFreeSlice):
        seat(ledger, "w3", ["physics"])
    at.now = start + timedelta(minutes=10, seconds=1)  # grace over
    assert len([seat(ledger, f"w{i}", ["physics"]) for i in range(3, 7)]) == 4
    # A late member still gets a seat when one frees, counted against the booking until the end.
    with pytest.raises(NoFreeSlice) as e:
        seat(ledger, "student1", ["dl101-students"])
    assert "reserved" not in e.value.message


def test_a_member_of_one_course_cannot_take_another_course_s_seats(ledger, at):
    start = at.now + timedelta(minutes=5)
    book(ledger, start, count=4, groups=ROSTER)
    book(ledger, start, count=4, holder="ML200", groups=["ml200"], profile="ml")
    for i in range(4):
        seat(ledger, f"dl{i}", ["dl101-students"])
    with pytest.raises(NoFreeSlice) as e:
        seat(ledger, "dl4", ["dl101-students"])  # DL101's four are taken; ML200's are kept
    assert "reserved for ML200" in e.value.message
    assert seat(ledger, "ml0", ["ml200"], profile="ml").allocation.booking_id is not None


def test_a_booking_the_inventory_cannot_hold_is_refused_naming_the_conflict(ledger, at):
    start = at.now.replace(microsecond=0) + timedelta(days=1)
    book(ledger, start, count=5, hours=2)
    with pytest.raises(BookingConflict) as e:
        book(ledger, start + timedelta(hours=1), count=4, holder="ML200", groups=["ml200"])
    assert "DL101" in e.value.message and "8" in e.value.message
    assert [b.holder for b in e.value.conflicts] == ["DL101"]
    # Three more fit; a booking after DL101 ends (lead included) fits; more seats than exist do not.
    book(ledger, start + timedelta(hours=1), count=3, holder="ML200", groups=["ml200"])
    book(ledger, start + timedelta(hours=3, minutes=30), count=8, holder="CV300", groups=["cv"])
    with pytest.raises(BookingConflict) as e:
        book(ledger, start + timedelta(days=2), count=9, holder="BIG", groups=["big"])
    assert "only 8" in e.value.message
    with pytest.raises(ValueError):
        book(ledger, start, count=0)
    assert [b.holder for b in ledger.bookings()] == ["DL101", "ML200", "CV300"]


def test_rebooking_the_same_session_replaces_it(ledger, at):
    start = at.now + timedelta(days=1)
    book(ledger, start, count=5, ref="dl101/2026-12-02")
    book(ledger, start, count=6, ref="dl101/2026-12-02")  # not a conflict with itself
    assert [b.count for b in ledger.bookings()] == [6]
    assert ledger.cancel_booking(ref="dl101/2026-12-02") == 1
    assert ledger.bookings() == []


def spec(start, ref, *, count=5, hours=2, holder="DL101", groups=ROSTER):
    return dict(
        holder=holder, groups=groups, profile="student", request=SEAT, count=count,
        starts_at=start, ends_at=start + timedelta(hours=hours), lead_s=15 * MINUTE,
        grace_s=10 * MINUTE, ref=ref,
    )  # fmt: skip


def test_a_course_books_its_sessions_all_or_nothing(ledger, at):
    day = at.now.replace(microsecond=0) + timedelta(days=1)
    mine = [spec(day, "course:dl101/1"), spec(day + timedelta(days=7), "course:dl101/2")]
    first = ledger.replace_bookings("course:dl101/", mine)
    assert [b.ref for b in ledger.bookings()] == ["course:dl101/1", "course:dl101/2"]
    # Another course's second session cannot fit beside DL101's: none of its sessions is booked.
    other = [spec(day + timedelta(days=3), "course:ml200/1", holder="ML200", groups=["ml"]),
             spec(day + timedelta(hours=1), "course:ml200/2", holder="ML200", groups=["ml"])]  # fmt: skip
    with pytest.raises(BookingConflict) as e:
        ledger.replace_bookings("course:ml200/", other)
    assert "DL101" in e.value.message and [b.holder for b in e.value.conflicts] == ["DL101"]
    assert [b.holder for b in ledger.bookings()] == ["DL101", "DL101"]
    # Booking the same sessions again changes nothing; a changed one keeps its id; a session
    # no longer wanted is cancelled.
    assert ledger.replace_bookings("course:dl101/", mine) == first
    again = ledger.replace_bookings("course:dl101/", [spec(day, "course:dl101/1", count=6)])
    assert [(b.id, b.count) for b in again] == [(first[0].id, 6)]
    assert [b.ref for b in ledger.bookings()] == ["course:dl101/1"]
    with pytest.raises(ValueError):
        ledger.replace_bookings("course:dl101/", [spec(day, "course:ml200/9")])
    assert ledger.replace_bookings("course:dl101/", []) == []
    assert ledger.bookings() == []


def test_changing_a_session_in_progress_keeps_its_members_charged(ledger, at):
    start = at.now + timedelta(minutes=5)
    ledger.replace_bookings("course:dl101/", [spec(start, "course:dl101/1", count=5)])
    seated = [seat(ledger, f"student{i}", ["dl101-students"]) for i in range(5)]
    assert len({c.allocation.booking_id for c in seated}) == 1
    # The instructor lowers the seats to 4 mid-session: the five seated still count as the
    # course's, so walk-ins may take the three seats nobody keeps, and no more.
    ledger.replace_bookings("course:dl101/", [spec(start, "course:dl101/1", count=4)])
    assert len([seat(ledger, f"w{i}", ["physics"]) for i in range(3)]) == 3
    with pytest.raises(NoFreeSlice):
        seat(ledger, "w3", ["physics"])
    assert ledger.double_allocations() == []


def test_bookings_and_charges_survive_a_restart(url, at):
    first = Ledger(url)
    start = at.now + timedelta(minutes=5)
    book(first, start, count=5)
    seat(first, "student0", ["dl101-students"])
    first.close()
    again = Ledger(url)  # a hub restart, or a second replica
    try:
        assert len([seat(again, f"w{i}", ["physics"]) for i in range(3)]) == 3
        with pytest.raises(NoFreeSlice) as e:
            seat(again, "w3", ["physics"])
        assert "4 of 8 reserved for DL101" in e.value.message
        assert again.open_allocations("student0")[0].booking_id is not None
    finally:
        again.close()


def test_capacity_calendar_shows_reserved_and_available_per_hour(ledger, at):
    start = at.now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=2)
    book(ledger, start, count=5, hours=2, lead=0)
    cal = ledger.capacity_calendar({"student": SEAT, "cpu": SliceRequest()}, start, 3)
    assert [(r["reserved"], r["available"]) for r in cal] == [(5, 3), (5, 3), (0, 8)]
    assert cal[0]["holders"] == ["DL101"] and cal[0]["profile"] == "student"


def test_the_form_note_names_the_booking(ledger, at):
    book(ledger, at.now + timedelta(minutes=5), count=3)
    notes = ledger.reserved_for_others(SEAT, ["physics"])
    assert [n.describe()[: len("3 of 8 reserved for DL101 until")] for n in notes] == [
        "3 of 8 reserved for DL101 until"
    ]
    assert ledger.reserved_for_others(SEAT, ["dl101-students"], profile="student") == []


# -- two OS processes, members and non-members racing ----------------------------------------

THREADS = 4


def _worker(url: str, seed: int, ops: int, out) -> None:
    ledger = Ledger(url)
    counts = {"claims": 0, "refused": 0}
    lock = threading.Lock()

    def thread(tid: int) -> None:
        rng = random.Random(seed * 100 + tid)
        member = tid % 2 == 0
        groups = ["dl101-students"] if member else ["physics"]
        held: list[int] = []
        for _ in range(ops // THREADS):
            # A non-member may want up to 4 seats, so one non-member thread alone (threads can run
            # one after another under the GIL) still meets the 3-seat limit and is refused.
            if held and (rng.random() < 0.45 or len(held) >= (2 if member else 4)):
                ledger.release(held.pop(rng.randrange(len(held))), "stopped")
                continue
            try:
                c = ledger.claim(
                    SEAT,
                    user=f"{'m' if member else 'n'}{seed}-{tid}-{len(held)}",
                    profile="student",
                    groups=groups,
                )
                held.append(c.allocation.id)
                with lock:
                    counts["claims"] += 1
            except LedgerRefusal:
                with lock:
                    counts["refused"] += 1
        for aid in held:
            ledger.release(aid, "stopped")

    threads = [threading.Thread(target=thread, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ledger.close()
    out.put(counts)


def _max_overlap(spans) -> int:
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, d in events:
        now += d
        most = max(most, now)
    return most


@pytest.mark.slow
@pytest.mark.parametrize("backend", backends())
def test_two_processes_never_seat_a_non_member_on_a_reserved_slice(backend, tmp_path):
    url = make_url(backend, tmp_path)
    setup = Ledger(url)
    setup.sync_inventory(lab_inventory(SEATS_LAB))
    now = datetime.now(timezone.utc)
    # In its protecting window for the whole test: 5 of 8 seats kept for DL101.
    setup.book(
        holder="DL101", groups=ROSTER, profile="student", request=SEAT, count=5,
        starts_at=now, ends_at=now + timedelta(hours=2), lead_s=600, grace_s=3600,
    )  # fmt: skip
    ops = 1_500 if backend == "sqlite" else 900
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(url, seed, ops, out)) for seed in range(2)]
    for p in procs:
        p.start()
    samples, worst = 0, 0
    while any(p.is_alive() for p in procs):
        live = [a for a in setup.open_allocations() if a.booking_id is None]
        worst = max(worst, len(live))
        samples += 1
        time.sleep(0.02)
    for p in procs:
        p.join(timeout=300)
        assert p.exitcode == 0
    results = [out.get(timeout=10) for _ in procs]
    assert sum(r["claims"] for r in results) > 200
    assert sum(r["refused"] for r in results) > 0, "the workload should meet the reservation"
    assert samples > 3
    everything = (now - timedelta(days=1), now + timedelta(days=1))
    history = setup.allocations_between(*everything)
    assert all(a.ended_at is not None for a in history)
    outsiders = [(a.started_at, a.ended_at) for a in history if a.user.startswith("n")]
    charged = [(a.started_at, a.ended_at) for a in history if a.booking_id is not None]
    assert all(a.booking_id is None for a in history if a.user.startswith("n"))
    # Never more than the 3 unreserved seats held by non-members, at any moment of the history;
    # never more than the booking's 5 charged to it.
    assert _max_overlap(outsiders) <= 3 and worst <= 3
    assert _max_overlap(charged) <= 5
    assert _max_overlap(outsiders) == 3, "non-members should have filled the free seats"
    assert setup.double_allocations() == []
    setup.close()


def test_a_course_s_seats_are_for_its_course_servers(ledger, at):
    # DL101's session keeps 3 of 8 seats for its course servers (the named server "dl101"): a
    # member doing homework on their default server meanwhile takes an unreserved seat, and
    # leaves the course's seats to the classmates who come to the session.
    start = at.now + timedelta(minutes=5)
    book(ledger, start, count=3, server_name="dl101")
    homework = seat(ledger, "student0", ["dl101-students"])
    assert homework.allocation.booking_id is None
    walkins = [seat(ledger, f"w{i}", ["physics"]) for i in range(4)]  # 8 - 3 kept - 1
    with pytest.raises(NoFreeSlice) as e:
        seat(ledger, "w4", ["physics"])
    assert "3 of 8 reserved for DL101" in e.value.message
    with pytest.raises(NoFreeSlice):  # a member's default server: no course seat either
        seat(ledger, "student1", ["dl101-students"])
    for i in range(3):
        c = ledger.claim(SEAT, user=f"student{i + 1}", profile="student", server_name="dl101",
                         groups=["dl101-students"])  # fmt: skip
        assert c.allocation.booking_id is not None
    assert len(walkins) == 4 and ledger.double_allocations() == []


def test_a_refusal_names_only_reservations_of_the_slice_asked_for(url, at):
    ledger = Ledger(url)
    try:
        gpu = SliceRequest(kind=SliceKind.GPU)
        ledger.sync_inventory(lab_inventory(SEATS_LAB + [
            {"uuid": "GPU-a40", "index": 2, "name": "NVIDIA A40", "memory": "48GiB"}]))  # fmt: skip
        book(ledger, at.now + timedelta(minutes=5), count=5)  # seats, not the A40
        ledger.claim(gpu, user="r0", profile="a40")
        with pytest.raises(NoFreeSlice) as e:
            ledger.claim(gpu, user="r1", profile="a40", groups=["research"])
        assert "reserved" not in e.value.message and "0 of 1 free" in e.value.message
        assert ledger.reserved_for_others(gpu, ["research"]) == []
    finally:
        ledger.close()


def test_a_server_left_on_a_drained_gpu_keeps_no_walk_in_off_the_free_seats(ledger, at):
    """The rule counts free seats: a walk-in's server still running on a GPU an admin drained
    holds a seat that is out of service, not one of the booking's, so the four free seats of
    the other T4 (with 3 kept for the course) still let one more walk-in in, and no second."""
    book(ledger, at.now + timedelta(minutes=10), count=3)
    first = [seat(ledger, f"walkin{i}", ["physics"]) for i in range(4)]
    assert {c.slice.device_uuid for c in first} == {"GPU-t4s-0"}  # seats pack onto one T4
    ledger.set_drained("GPU-t4s-0", True, "fan")
    assert seat(ledger, "walkin4", ["physics"]).slice.device_uuid == "GPU-t4s-1"
    with pytest.raises(NoFreeSlice) as e:
        seat(ledger, "walkin5", ["physics"])
    assert "3 of 4 reserved for DL101" in e.value.message
    # the members still get every kept seat
    for i in range(3):
        assert seat(ledger, f"student{i}", ROSTER).allocation.booking_id is not None

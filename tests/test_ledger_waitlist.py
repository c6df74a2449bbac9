"""The waitlist in the ledger, on SQLite and PostgreSQL: fair order (priority, then first come), a
freed slice held for the first in line and passed on when the hold runs out, walk-ins kept from
jumping the queue, policy re-checked at the offer, and all of it across a restart."""

from __future__ import annotations

from datetime import timedelta

import pytest
from clock_support import MINUTE
from ledger_support import backends, lab_url, seats_lab

from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.ledger import Ledger, LedgerRefusal, NoFreeSlice
from jupyterhub_gpulab.ledger.waitlist import OFFER_RULE, QueueFirst

SEAT = SliceRequest(kind=SliceKind.SHARED)
#: One T4 split into 2 seats.
TWO_SEATS = seats_lab(seats=2, memory_per_seat="8GiB")
HOLD = 5 * MINUTE


@pytest.fixture(params=backends())
def url(request, tmp_path):
    return lab_url(request.param, tmp_path, TWO_SEATS)


@pytest.fixture
def ledger(url):
    led = Ledger(url)
    yield led
    led.close()


def seat(ledger, user, **kw):
    return ledger.claim(SEAT, user=user, profile="student", **kw)


def join(ledger, user, priority=0):
    return ledger.join_waitlist(user, "student", SEAT, priority=priority)


def anyone(entry):
    return {}


def full_lab(ledger):
    return [seat(ledger, "u0"), seat(ledger, "u1")]


def test_first_in_line_gets_a_held_slice_and_an_unclaimed_hold_passes_on(ledger, at):
    held = full_lab(ledger)
    with pytest.raises(NoFreeSlice) as e:
        seat(ledger, "u2")
    assert "Join the waitlist" in e.value.message
    join(ledger, "u2")
    join(ledger, "u3")
    join(ledger, "res", priority=10)  # research priority goes first; first come within one
    assert [e.user for e in ledger.waitlist("student")] == ["res", "u2", "u3"]
    assert ledger.queue_position("u3", "student")[0] == 3
    assert join(ledger, "u3").id == ledger.waitlist("student")[2].id  # joining twice: one entry

    ledger.release(held[0].allocation.id, "stopped")
    assert [e.user for e in ledger.offer_next(anyone, HOLD)] == ["res"]
    hold = ledger.open_allocations("res")[0]
    assert hold.hold_until is not None
    assert [w.rule for w in ledger.warnings("res")] == [OFFER_RULE]
    assert "held for you" in ledger.warnings("res")[0].message
    with pytest.raises(LedgerRefusal):
        seat(ledger, "walkin")  # the freed seat is held, not free
    assert ledger.offer_next(anyone, HOLD) == []  # nothing else free

    at.move(HOLD + 1)
    assert [e.user for e in ledger.expire_offers()] == ["res"]
    assert ledger.open_allocations("res") == []
    assert ledger.warnings("res") == []
    assert [e.user for e in ledger.offer_next(anyone, HOLD)] == ["u2"]  # passed on

    got = seat(ledger, "u2", server_name="lab")  # their spawn takes the hold
    assert got.allocation.id == ledger.open_allocations("u2")[0].id
    assert got.allocation.hold_until is None and got.allocation.server_name == "lab"
    assert ledger.open_allocations("u2")[0].hold_until is None
    assert ledger.warnings("u2") == []
    assert [e.state for e in ledger.entries_of("u2")] == ["served"]
    assert [e.state for e in ledger.entries_of("res")] == ["lapsed"]
    assert [e.user for e in ledger.waitlist()] == ["u3"]
    assert ledger.double_allocations() == []


def test_walk_ins_do_not_jump_the_queue(ledger):
    held = full_lab(ledger)
    join(ledger, "u2")
    ledger.release(held[0].allocation.id, "stopped")
    # One seat free, one user waiting for it: a walk-in is sent to the queue…
    with pytest.raises(QueueFirst) as e:
        seat(ledger, "walkin")
    assert "1 person is waiting" in e.value.message
    # …and the first in line may take it directly, even before any offer was made.
    seat(ledger, "u2")
    assert [e.state for e in ledger.entries_of("u2")] == ["served"]
    ledger.release(held[1].allocation.id, "stopped")
    assert seat(ledger, "walkin")  # nobody waits now


def test_a_walk_in_takes_a_seat_while_more_are_free_than_users_queued(ledger):
    held = full_lab(ledger)
    join(ledger, "u2")
    for claim in held:
        ledger.release(claim.allocation.id, "stopped")
    # Two seats free, one user waiting: one seat is the queue's, the other anyone's…
    assert seat(ledger, "walkin").allocation.user == "walkin"
    # …and the last free seat is the queue's.
    with pytest.raises(QueueFirst) as e:
        seat(ledger, "late")
    assert "1 person is waiting" in e.value.message


def test_policy_is_checked_again_at_the_offer(ledger):
    held = full_lab(ledger)
    join(ledger, "spent")
    join(ledger, "busy")
    join(ledger, "ok")

    def entitle(entry):
        if entry.user == "spent":
            return "Your GPU-hour budget for this week is spent."
        if entry.user == "busy":
            return {"user_limit": 0}  # already at their slice limit: stays queued
        return {}

    ledger.release(held[0].allocation.id, "stopped")
    assert [e.user for e in ledger.offer_next(entitle, HOLD)] == ["ok"]
    spent = ledger.entries_of("spent")[0]
    assert spent.state == "refused" and "budget" in spent.message
    busy = ledger.entries_of("busy")[0]
    assert busy.state == "waiting" and "at once" in busy.message


def test_leaving_releases_a_held_offer(ledger):
    held = full_lab(ledger)
    join(ledger, "u2")
    ledger.release(held[0].allocation.id, "stopped")
    ledger.offer_next(anyone, HOLD)
    assert ledger.leave_waitlist("u2") == 1
    assert ledger.open_allocations("u2") == []
    assert seat(ledger, "walkin")


def test_the_queue_and_a_hold_survive_a_restart(url, at):
    first = Ledger(url)
    held = full_lab(first)
    join(first, "u2")
    join(first, "u3")
    first.release(held[0].allocation.id, "stopped")
    first.offer_next(anyone, HOLD)
    first.close()
    again = Ledger(url)
    try:
        assert [(e.user, e.state) for e in again.waitlist()] == [
            ("u2", "offered"),
            ("u3", "waiting"),
        ]
        assert again.queue_position("u3", "student")[0] == 1
        assert seat(again, "u2").allocation.hold_until is None
    finally:
        again.close()


def test_position_comes_with_an_estimate_from_recent_sessions(ledger, at):
    held = full_lab(ledger)
    at.move(40 * MINUTE)
    for c in held:
        ledger.release(c.allocation.id, "stopped")  # two 40-minute sessions
    full_lab(ledger)
    join(ledger, "u2")
    join(ledger, "u3")
    position, estimate = ledger.queue_position("u3", "student")
    # second in line, 40-minute sessions on 2 seats: about 40 minutes
    assert position == 2 and estimate == pytest.approx(2 * 40 * MINUTE / 2)
    assert ledger.queue_position("nobody", "student") is None


def test_offers_respect_reservations(ledger, at):
    held = full_lab(ledger)
    ledger.book(
        holder="DL101", groups=["dl101"], profile="student", request=SEAT, count=2,
        starts_at=at.now + timedelta(minutes=5), ends_at=at.now + timedelta(hours=2),
        lead_s=15 * MINUTE, grace_s=10 * MINUTE,
    )  # fmt: skip
    join(ledger, "outsider")
    join(ledger, "student1")
    ledger.release(held[0].allocation.id, "stopped")

    def entitle(entry):
        return {"groups": ["dl101"] if entry.user.startswith("student") else ["physics"]}

    # The freed seat is reserved: the outsider first in line is skipped, the member offered it.
    assert [e.user for e in ledger.offer_next(entitle, HOLD)] == ["student1"]
    assert ledger.open_allocations("student1")[0].booking_id is not None


def test_a_member_takes_a_seat_kept_for_their_session_past_the_queue(ledger, at):
    # Both seats are kept for DL101 from 14:00; two homework users queued at 13:55 (the lab was
    # full) must not keep a class member waiting for a seat they could not take anyway.
    held = full_lab(ledger)
    start = at.now + timedelta(minutes=5)
    ledger.book(
        holder="DL101", groups=["dl101"], profile="student", request=SEAT, count=2,
        starts_at=start, ends_at=start + timedelta(hours=2), lead_s=15 * MINUTE,
        grace_s=10 * MINUTE,
    )  # fmt: skip
    join(ledger, "hw1")
    join(ledger, "hw2")
    for c in held:
        ledger.release(c.allocation.id, "stopped")
    got = seat(ledger, "student1", groups=["dl101"])
    assert got.allocation.booking_id is not None
    # the queued homework users are still refused the other kept seat, in order
    with pytest.raises(NoFreeSlice) as e:
        seat(ledger, "hw1", groups=["physics"])
    assert "reserved for DL101" in e.value.message
    assert [e.user for e in ledger.waitlist("student")] == ["hw1", "hw2"]
    # once the seats return to everyone (grace), the queue's order holds again for members too
    at.now = start + timedelta(minutes=11)
    with pytest.raises(QueueFirst):
        seat(ledger, "student2", groups=["dl101"])


def test_holds_of_names_the_hold_a_claim_of_that_profile_takes(ledger):
    """The spawn form reads ``holds_of``; the claim takes exactly the hold it names, past the
    user's slice limit, while the hold counts toward that limit for any other profile."""
    held = full_lab(ledger)
    join(ledger, "u2")
    ledger.release(held[0].allocation.id, "stopped")
    ledger.offer_next(anyone, HOLD)
    holds = ledger.holds_of("u2")
    assert list(holds) == ["student"] and holds["student"].hold_until is not None
    assert ledger.holds_of("u0") == {}  # a server's slice is not a hold
    with pytest.raises(LedgerRefusal) as e:
        ledger.claim(SEAT, user="u2", profile="other", user_limit=1)
    assert e.value.reason == "quota"
    got = seat(ledger, "u2", user_limit=1)
    assert got.allocation.id == holds["student"].id
    assert ledger.holds_of("u2") == {}


def test_an_offer_replaces_the_notice_that_the_same_server_was_stopped(ledger, at):
    """The home page showed "Your server was stopped: idle since 01:08" under "Your turn": the
    offer is the newer news for that server; another server's notice stays."""
    held = full_lab(ledger)
    later = at.now + timedelta(seconds=HOLD)
    ledger.set_warning("u2", "", "culled:gpu-idle", "Your server was stopped: idle.", later)
    ledger.set_warning("u2", "other", "culled:idle", "Your server 'other' was stopped.", later)
    join(ledger, "u2")
    ledger.release(held[0].allocation.id, "stopped")
    assert [e.user for e in ledger.offer_next(anyone, HOLD)] == ["u2"]
    assert sorted((w.server_name, w.rule) for w in ledger.warnings("u2")) == [
        ("", OFFER_RULE),
        ("other", "culled:idle"),
    ]


class _Releases:
    """A ledger listener that writes down every release it hears of."""

    def __init__(self):
        self.heard = []

    def released(self, allocation_id, slice_id, reason):
        self.heard.append((allocation_id, slice_id, reason))


def test_a_lapsed_or_declined_hold_is_released_where_listeners_hear_it(ledger, at):
    # the release metric and the dcgm job map are listeners: a hold that ends unheard leaves
    # the metric short and the job map naming a user who holds nothing
    heard = _Releases()
    ledger.listeners.append(heard)
    held = full_lab(ledger)
    join(ledger, "u2")
    join(ledger, "u3")
    ledger.release(held[0].allocation.id, "stopped")
    ledger.offer_next(anyone, HOLD)
    hold = ledger.open_allocations("u2")[0]
    at.move(HOLD + 1)
    assert [e.user for e in ledger.expire_offers()] == ["u2"]
    assert heard.heard[-1] == (hold.id, hold.slice_id, "offer-lapsed")

    ledger.offer_next(anyone, HOLD)
    hold = ledger.open_allocations("u3")[0]
    assert ledger.leave_waitlist("u3") == 1
    assert heard.heard[-1] == (hold.id, hold.slice_id, "offer-declined")
    assert len(heard.heard) == 3  # the server's stop, the lapse, the leave: each heard once


def test_a_hold_release_leaves_a_taken_hold_alone(ledger):
    held = full_lab(ledger)
    join(ledger, "u2")
    ledger.release(held[0].allocation.id, "stopped")
    ledger.offer_next(anyone, HOLD)
    got = seat(ledger, "u2", server_name="lab")  # their server took the hold
    assert ledger._release_hold(got.allocation.id, "offer-lapsed") is False
    assert [a.id for a in ledger.open_allocations("u2")] == [got.allocation.id]

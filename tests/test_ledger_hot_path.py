"""The claim's hot path, on SQLite and PostgreSQL, with every rule of the claim live (a booking
keeping seats, users queued ahead, an offer held and taken, fair share, image needs, limits):

- a claim and its release leave no cyclic garbage: the statements they run are built once per
  process, not per claim, so a hub busy with starts does not feed Python's cycle collector (whose
  pauses land on whichever claim triggers them: the benchmark's p99);
- every statement they run is one SQLAlchemy compiled before (its compiled cache is hit), so no
  claim pays for compiling SQL;
- they send no more statements than :data:`STATEMENTS` says: each costs a claim more in
  SQLAlchemy than in the database, and the claim's reads are folded into two
  (:mod:`jupyterhub_gpulab.ledger.claimreads`).
"""

from __future__ import annotations

import gc
from datetime import timedelta

import pytest
import sqlalchemy as sa
from ledger_support import backends, lab_url, seats_lab
from sqlalchemy.engine.interfaces import CacheStats

from jupyterhub_gpulab import clock
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.ledger import Ledger

#: what a profile's image needs, as the spawner asks it
SEAT = SliceRequest(kind=SliceKind.SHARED, min_compute_capability=(7, 0), min_driver=(535,))
BOOKED = SliceRequest(kind=SliceKind.SHARED)
LAB = seats_lab(2, seats=8, memory_per_seat="2GiB")
LIMITS = {"user_limit": 4, "charge_groups": [("students", 1000)], "groups": ["students"]}
ROUNDS = 3

#: Statements one claim and its release send to the database (BEGIN and COMMIT left out: they
#: go to the DBAPI connection). SQLite: the claim's two reads (what the user holds and the open
#: bookings; the bookings' and the queue's counts with the users queued), the search and the
#: allocation's INSERT, then the release's UPDATE (the database keeps the slice's ``held_by`` in
#: those two statements: migration 0011's triggers; each was two before); a walk-in adds fair
#: share's read of the queued users' use, an offer's claim marks the waitlist entry, and taking
#: the offer is one UPDATE of the hold, the entry served, the notice dropped and the slice read.
#: PostgreSQL adds the advisory locks of the user, the group and the reservations, and the
#: savepoint (SAVEPOINT, RELEASE) around the INSERT. Issue 26 measured 13 per walk-in on SQLite
#: before the reads were folded.
STATEMENTS = {
    "sqlite": {"walk-in": 6, "member": 5, "offer taken": 11},
    "postgresql": {"walk-in": 11, "member": 9, "offer taken": 16},
}


@pytest.fixture(params=backends())
def ledger(request, tmp_path):
    led = Ledger(lab_url(request.param, tmp_path, LAB))
    led.fairshare_half_life = 7 * 86400.0
    now = clock.utcnow()
    led.book(
        holder="DL101", groups=["dl101"], profile="course", request=BOOKED, count=3,
        starts_at=now - timedelta(minutes=5), ends_at=now + timedelta(hours=2), grace_s=3600,
    )  # fmt: skip
    for i in range(2):  # users queued ahead of every walk-in
        led.join_waitlist(f"queued{i}", "student", BOOKED)
    yield led
    led.close()


def one_round(ledger: Ledger, i: int, step) -> None:
    """Each kind of claim once, and its release; ``step(what, fn)`` runs each claim+release."""

    def walk_in():
        c = ledger.claim(SEAT, user=f"walkin{i}", profile="student", **LIMITS)
        assert c.allocation.booking_id is None
        ledger.release(c.allocation.id, "stopped")

    def member():  # charged to the booking, taking one of its kept seats
        c = ledger.claim(BOOKED, user=f"member{i}", profile="course", groups=["dl101"])
        assert c.allocation.booking_id is not None
        ledger.release(c.allocation.id, "stopped")

    entry = ledger.join_waitlist(f"offered{i}", "student", BOOKED, priority=9)

    def offer_taken():  # an offer held for a queued user, then their spawn takes it
        until = clock.utcnow() + timedelta(minutes=5)
        hold = ledger.claim(SEAT, user=f"offered{i}", profile="student", hold_until=until,
                            queue_entry=entry.id)  # fmt: skip
        took = ledger.claim(SEAT, user=f"offered{i}", profile="student", server_name="lab")
        assert took.allocation.id == hold.allocation.id and took.allocation.hold_until is None
        ledger.release(took.allocation.id, "stopped")

    for what, fn in (("walk-in", walk_in), ("member", member), ("offer taken", offer_taken)):
        step(what, fn)


def test_claims_and_releases_leave_no_cyclic_garbage(ledger):
    one_round(ledger, 0, lambda what, fn: fn())  # statements built per request on first use
    found = {}

    def step(what, fn):
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            fn()
            gc.collect()
            if gc.garbage:
                found[what] = sorted({type(o).__name__ for o in gc.garbage})
        finally:
            gc.set_debug(0)
            gc.garbage.clear()

    for i in range(1, ROUNDS + 1):
        one_round(ledger, i, step)
    assert found == {}, f"cyclic garbage left per claim+release (object types): {found}"
    assert ledger.waitlist("student")[0].user.startswith("queued")  # the queue was live
    assert ledger.double_allocations() == []


def test_every_statement_of_a_claim_and_release_is_compiled_once(ledger):
    one_round(ledger, 0, lambda what, fn: fn())
    ran = []

    @sa.event.listens_for(ledger.engine, "after_cursor_execute")
    def _seen(conn, cursor, statement, parameters, context, executemany):
        ran.append((context.cache_hit, " ".join(statement.split())[:90]))

    for i in range(1, ROUNDS + 1):
        one_round(ledger, i, lambda what, fn: fn())
    sa.event.remove(ledger.engine, "after_cursor_execute", _seen)
    compiled = [s for hit, s in ran if hit not in (CacheStats.CACHE_HIT, CacheStats.NO_CACHE_KEY)]
    assert ran and compiled == [], f"statements compiled again on the claim path: {compiled}"


def test_a_claim_and_its_release_send_no_more_statements_than_counted(ledger):
    one_round(ledger, 0, lambda what, fn: fn())
    sent: list[str] = []

    @sa.event.listens_for(ledger.engine, "before_cursor_execute")
    def _sent(conn, cursor, statement, parameters, context, executemany):
        sent.append(" ".join(statement.split())[:80])

    counted, ran = {}, {}

    def step(what, fn):
        sent.clear()
        fn()
        counted[what], ran[what] = len(sent), list(sent)

    try:
        one_round(ledger, 1, step)
    finally:
        sa.event.remove(ledger.engine, "before_cursor_execute", _sent)
    wanted = STATEMENTS[ledger.dialect]
    over = {k: (n, wanted[k], ran[k]) for k, n in counted.items() if n > wanted[k]}
    assert over == {}, f"claim+release sent more statements than counted: {over}"
    assert ledger.waitlist("student")[0].user.startswith("queued")  # the queue was live

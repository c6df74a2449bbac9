"""A refused claim decided on a read, without the write lock (issue 21 item 6), and the refusal
log written in batches and pruned on a timer: the user is told what the claim would tell them,
every refusal is still recorded, a claim that may succeed is left to the claim's transaction."""

from __future__ import annotations

import sqlite3
import threading
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa
from clock_support import MINUTE
from ledger_support import lab_url, new_ledger, seats_lab

from jupyterhub_gpulab import clock
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.ledger import Ledger, NoFreeSlice, QuotaExceeded
from jupyterhub_gpulab.ledger.db import make_engine, sqlite_file
from jupyterhub_gpulab.ledger.readrefusal import refused_without_write
from jupyterhub_gpulab.ledger.schema import refusals

A40 = SliceRequest(kind=SliceKind.GPU, model="a40")  # the lab's one A40
SEAT = SliceRequest(kind=SliceKind.SHARED)


class Told:
    def __init__(self, err):
        self.reason, self.message = "told-" + err.reason, "Told: " + err.message


@pytest.fixture
def ledger(tmp_path):
    led = new_ledger("sqlite", tmp_path)
    yield led
    led.close()


class Heard:
    """A ledger listener keeping the requests of the refused claims it hears of."""

    def __init__(self):
        self.refused = []

    def claim_refused(self, request, seconds):
        self.refused.append(request)


def write_transactions(ledger):
    """A list that gets one entry per write transaction ``ledger`` begins from now on."""
    seen = []

    @sa.event.listens_for(ledger.engine, "begin")
    def _begin(conn):
        if not conn.get_execution_options().get("gpulab_read"):
            seen.append(conn)

    return seen


def allocation_rows(ledger) -> int:
    with ledger.engine.connect() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM allocations")).scalar_one()


def decide(ledger, request, user, **kw):
    kw.setdefault("profile", "p")
    return refused_without_write(ledger, request, user=user, refusal=Told, **kw)


@pytest.mark.parametrize("refused_by", ["quota", "no-free-slice"])
def test_a_refusal_is_the_claims_own_decided_without_a_write(ledger, refused_by):
    ledger.claim(A40, user="ann", profile="p")
    kw = {"user_limit": 1} if refused_by == "quota" else {}
    who = "ann" if refused_by == "quota" else "bob"
    with pytest.raises(QuotaExceeded if refused_by == "quota" else NoFreeSlice) as by_claim:
        ledger.claim(A40, user=who, profile="p", **kw)
    writes = write_transactions(ledger)
    heard = Heard()
    ledger.listeners.append(heard)
    got = decide(ledger, A40, who, **kw)
    assert type(got) is type(by_claim.value) and got.message == by_claim.value.message
    assert got.refusal.message == "Told: " + by_claim.value.message
    assert writes == [] and heard.refused == [A40]  # the claim latency metric still hears it
    assert ledger.pending_refusals.flush(ledger) == 1
    since = clock.utcnow() - timedelta(minutes=1)
    assert ledger.last_refusals([who], since) == {who: (f"told-{refused_by}", got.refusal.message)}
    assert allocation_rows(ledger) == 1  # ann's claim only


def test_a_free_slice_is_left_to_the_claim_and_nothing_is_held_or_recorded(ledger):
    writes = write_transactions(ledger)
    assert decide(ledger, A40, "bob") is None
    assert writes == [] and allocation_rows(ledger) == 0 and len(ledger.pending_refusals) == 0
    assert ledger.claim(A40, user="bob", profile="p").slice.id == "GPU-a40-0001"


def test_a_user_holding_an_offer_is_left_to_the_claim_which_gives_them_the_held_slice(tmp_path):
    led = Ledger(lab_url("sqlite", tmp_path, seats_lab(seats=1, memory_per_seat="8GiB")))
    try:
        first = led.claim(SEAT, user="u0", profile="student")
        led.join_waitlist("u1", "student", SEAT)
        led.release(first.allocation.id, "stopped")
        assert [e.user for e in led.offer_next(lambda e: {}, 5 * MINUTE)] == ["u1"]
        # the held seat is not free: a walk-in is refused on a read, the offer's user is not
        assert isinstance(decide(led, SEAT, "walkin", profile="student"), NoFreeSlice)
        assert decide(led, SEAT, "u1", profile="student") is None
        assert led.claim(SEAT, user="u1", profile="student").allocation.hold_until is None
    finally:
        led.close()


def test_the_decision_writes_nothing_even_for_a_moment_when_a_slice_is_free(ledger):
    # the claim's rules reach their INSERT: on the read-only connection it fails, so no row is
    # ever written (and rolled back) and no other writer waits for the decision
    written = []

    @sa.event.listens_for(ledger.engine, "after_cursor_execute")
    def _done(conn, cursor, statement, *args):
        if statement.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE")):
            written.append(statement)

    assert decide(ledger, A40, "bob") is None
    sa.event.remove(ledger.engine, "after_cursor_execute", _done)
    assert written == []


def test_the_decision_never_waits_for_another_writer(tmp_path):
    # a slice is free, so the claim's rules reach a write: on the read-only connection it fails
    # at once instead of waiting for the lock another process holds (the decision runs on the
    # hub's event loop)
    url = lab_url("sqlite", tmp_path)
    led = Ledger(url, engine=make_engine(url, busy_timeout_s=3))
    other = sqlite3.connect(sqlite_file(url), isolation_level=None, timeout=0)
    try:
        other.execute("BEGIN IMMEDIATE")
        t0 = time.monotonic()
        assert decide(led, A40, "bob") is None
        assert time.monotonic() - t0 < 1.0
    finally:
        other.execute("ROLLBACK")
        other.close()
        led.close()
    led = Ledger(url)
    try:
        assert led.claim(A40, user="bob", profile="p").slice.id == "GPU-a40-0001"  # still free
    finally:
        led.close()


def test_refusals_decided_together_are_recorded_in_one_transaction(ledger):
    ledger.claim(A40, user="ann", profile="p")
    for i in range(5):
        assert isinstance(decide(ledger, A40, f"u{i}"), NoFreeSlice)
    writes = write_transactions(ledger)
    assert ledger.pending_refusals.flush(ledger) == 5
    assert len(writes) == 1
    assert ledger.refusals_since(clock.utcnow() - timedelta(minutes=1)) == {"told-no-free-slice": 5}
    assert ledger.pending_refusals.flush(ledger) == 0 and len(writes) == 1  # nothing left


def test_decisions_racing_claims_never_hold_a_slice_twice_nor_refuse_a_free_one(ledger):
    # 12 users at once, each deciding on a read and claiming when that read saw a free slice:
    # the lab's 3 whole GPUs go to 3 of them, the 9 others are refused, once each
    gpu = SliceRequest(kind=SliceKind.GPU)
    out: dict[str, str] = {}
    go = threading.Barrier(12)

    def one(user):
        go.wait()
        if decide(ledger, gpu, user) is not None:
            out[user] = "refused-on-read"
            return
        try:
            ledger.claim(gpu, user=user, profile="p", refusal=Told)
            out[user] = "claimed"
        except NoFreeSlice:
            out[user] = "refused-by-claim"

    threads = [threading.Thread(target=one, args=(f"u{i}",)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ledger.pending_refusals.flush(ledger)
    assert list(out.values()).count("claimed") == 3
    assert ledger.double_allocations() == [] and len(ledger.open_allocations()) == 3
    assert ledger.refusals_since(clock.utcnow() - timedelta(minutes=1)) == {"told-no-free-slice": 9}


def test_old_refusals_are_pruned_once_per_interval_not_at_every_refusal(ledger, monkeypatch):
    old = clock.utcnow() - timedelta(days=31)
    with ledger.engine.begin() as conn:
        conn.execute(
            refusals.insert().values(at=old, user="x", profile=None, reason="r", message="m")
        )
    deletes = []

    @sa.event.listens_for(ledger.engine, "before_cursor_execute")
    def _seen(conn, cursor, statement, *args):
        if statement.lstrip().upper().startswith("DELETE FROM REFUSALS"):
            deletes.append(statement)

    for i in range(3):
        ledger.record_refusal(f"u{i}", "p", "quota", "spent")
    assert len(deletes) == 1
    assert ledger.refusals_since(old - timedelta(days=1)) == {"quota": 3}  # the old row is gone
    later = clock.utcnow() + timedelta(hours=2)
    monkeypatch.setattr(clock, "utcnow", lambda: later)
    ledger.record_refusal("u9", "p", "quota", "spent")
    assert len(deletes) == 2  # due again an interval later


def test_refusals_a_locked_database_could_not_take_are_written_by_the_next_flush(tmp_path):
    # another process holds the write lock past the busy timeout: the flush fails, and the
    # rows wait for the next one instead of being lost (the admin page counts every refusal)
    url = lab_url("sqlite", tmp_path)
    led = Ledger(url, engine=make_engine(url, busy_timeout_s=0.2))
    other = sqlite3.connect(sqlite_file(url), isolation_level=None, timeout=0)
    try:
        led.claim(A40, user="ann", profile="p")
        for user in ("bob", "cy"):
            assert isinstance(decide(led, A40, user), NoFreeSlice)
        assert led.pending_refusals.ask() and not led.pending_refusals.ask()  # one flush asked
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises((sa.exc.OperationalError, sqlite3.OperationalError), match="locked"):
            led.pending_refusals.flush(led)
        other.execute("ROLLBACK")
        assert len(led.pending_refusals) == 2 and led.pending_refusals.ask()  # asked again
        assert isinstance(decide(led, A40, "dee"), NoFreeSlice)
        assert led.pending_refusals.flush(led) == 3
        since = clock.utcnow() - timedelta(minutes=1)
        assert sorted(led.last_refusals(["bob", "cy", "dee"], since)) == ["bob", "cy", "dee"]
    finally:
        other.close()
        led.close()


def test_refusals_waiting_past_the_bound_drop_the_oldest_and_say_so(ledger, monkeypatch, caplog):
    from jupyterhub_gpulab.ledger import readrefusal

    monkeypatch.setattr(readrefusal, "MAX_WAITING", 3)
    ledger.claim(A40, user="ann", profile="p")
    for i in range(5):
        decide(ledger, A40, f"u{i}")
    assert "Dropped the 1 oldest" in caplog.text and ledger.pending_refusals.dropped == 2
    assert ledger.pending_refusals.flush(ledger) == 3
    since = clock.utcnow() - timedelta(minutes=1)
    assert sorted(ledger.last_refusals([f"u{i}" for i in range(5)], since)) == ["u2", "u3", "u4"]

"""The culler's budget period read incrementally (``fairuse.period.PeriodReader``): pass after
pass it gives exactly what a full read of the window gives (so every budget the culler computes
is the same), while reading only the rows that changed; on a real ledger, SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from clock_support import DAY, HOUR, MINUTE
from ledger_support import backends, lab_inventory, make_url

from jupyterhub_gpulab import clock
from jupyterhub_gpulab.fairuse.period import PeriodReader
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.ledger import Ledger

GPU = SliceRequest(kind=SliceKind.GPU)
GPUS = [
    {"uuid": f"GPU-pr-{i}", "index": i, "name": "NVIDIA H100 80GB HBM3", "memory": "80GiB"}
    for i in range(4)
]
MONDAY = datetime(2026, 10, 5, tzinfo=timezone.utc)


@pytest.fixture(params=backends())
def ledger(request, tmp_path):
    led = Ledger(make_url(request.param, tmp_path))
    led.sync_inventory(lab_inventory(GPUS))
    yield led
    led.close()


def claim(ledger, user):
    return ledger.claim(GPU, user=user, profile="research").allocation


def same(reader, ledger, start, at):
    """One pass a second on: the reader's list equals a full read's."""
    at.move(1)
    now = clock.utcnow()
    got = reader.read(start, now)
    assert got == ledger.allocations_between(start, now)
    return got


def test_pass_after_pass_the_same_allocations_as_a_full_read(ledger, at):
    at.now = MONDAY + timedelta(hours=9)
    reader = PeriodReader(ledger)
    a, b = claim(ledger, "ann"), claim(ledger, "bob")
    assert [x.id for x in same(reader, ledger, MONDAY, at)] == [a.id, b.id]
    full = reader.last_rows
    for _ in range(3):  # quiet passes read only the open ones
        at.move(MINUTE)
        same(reader, ledger, MONDAY, at)
    at.move(MINUTE)
    ledger.release(a.id, "stopped")  # ended since the last pass
    c = claim(ledger, "cat")  # started and ended between two passes
    at.move(10)
    ledger.release(c.id, "stopped")
    at.move(MINUTE)
    got = same(reader, ledger, MONDAY, at)
    assert {x.id: x.ended_at is not None for x in got} == {a.id: True, b.id: False, c.id: True}
    for _ in range(20):  # many ended allocations, later passes read only the open ones
        d = claim(ledger, "dan")
        at.move(MINUTE)
        ledger.release(d.id, "stopped")
    at.move(MINUTE)
    same(reader, ledger, MONDAY, at)
    at.move(10 * MINUTE)
    same(reader, ledger, MONDAY, at)
    at.move(MINUTE)
    assert len(same(reader, ledger, MONDAY, at)) == 23
    assert reader.last_rows == 1  # of 23: bob's open allocation alone
    assert full == 2


def test_an_end_stamped_by_a_slower_clock_is_still_seen(ledger, at):
    at.now = MONDAY + timedelta(hours=9)
    reader = PeriodReader(ledger)
    a = claim(ledger, "ann")
    same(reader, ledger, MONDAY, at)
    # another process (the hub) whose clock is 2 minutes behind closes it after this read
    at.move(-2 * MINUTE)
    ledger.release(a.id, "stopped")
    at.move(3 * MINUTE)
    got = same(reader, ledger, MONDAY, at)
    assert got[0].ended_at is not None


def test_a_new_window_starts_over(ledger, at):
    at.now = MONDAY + timedelta(days=6, hours=23)
    reader = PeriodReader(ledger)
    a = claim(ledger, "ann")
    ledger.release(a.id, "stopped")
    assert len(same(reader, ledger, MONDAY, at)) == 1
    at.move(2 * HOUR)  # next Monday: last week's allocation is out of the window
    assert same(reader, ledger, MONDAY + timedelta(days=7), at) == []
    # a window that has not begun reads nothing
    assert reader.read(clock.utcnow() + DAY * timedelta(seconds=1), clock.utcnow()) == []

"""The metrics' ledger reads agree with the rest of gpulab, on SQLite and PostgreSQL: the week's
GPU-seconds per group equal the usage accounting's, computed by the database from stored times."""

from __future__ import annotations

from datetime import timedelta

import pytest
from ledger_support import backends, new_ledger

from jupyterhub_gpulab import clock
from jupyterhub_gpulab.fairuse.accounting import usage
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.ledger.census import census, gpu_seconds_by_group
from jupyterhub_gpulab.ledger.schema import allocations


@pytest.fixture(params=backends())
def ledger(request, tmp_path):
    led = new_ledger(request.param, tmp_path)
    yield led
    led.close()


def test_gpu_seconds_by_group_match_the_accounting(ledger):
    now = clock.utcnow()
    start, end = now - timedelta(days=2), now + timedelta(days=5)
    cases = [  # (request, group, started hours ago, ended hours ago or None)
        (SliceRequest(kind=SliceKind.GPU), "a", 60, 50),  # began before the window
        (SliceRequest(kind=SliceKind.GPU), "a", 10, 7),
        (SliceRequest(kind=SliceKind.MIG, mig_profile="1g.5gb"), "b", 5, None),  # running
        (SliceRequest(kind=SliceKind.SHARED), None, 3, 1),
        (SliceRequest(kind=SliceKind.GPU), "b", 80, 70),  # before the window: nothing
    ]
    for i, (request, group, began, ended) in enumerate(cases):
        c = ledger.claim(request, user=f"u{i}", profile="p",
                         charge_groups=[(group, None)] if group else ())  # fmt: skip
        values = {"started_at": now - timedelta(hours=began)}
        if ended is not None:
            ledger.release(c.allocation.id, "stopped")
            values["ended_at"] = now - timedelta(hours=ended)
        with ledger.engine.begin() as conn:
            conn.execute(
                allocations.update().where(allocations.c.id == c.allocation.id).values(**values)
            )
    expected = usage(ledger.allocations_between(start, end), start, end, now).by_group
    got = gpu_seconds_by_group(ledger, start, end, now)
    assert set(got) >= set(expected)
    for group, seconds in expected.items():
        assert got[group] == pytest.approx(seconds, abs=0.01), group
    assert expected["a"] == pytest.approx(3 * 3600)  # 60-50 h ago is before the window


def test_census_counts_allocations_without_a_container_after_the_grace(ledger):
    c = ledger.claim(SliceRequest(kind=SliceKind.GPU), user="ann", profile="p", node="n1")
    now = clock.utcnow()
    assert census(ledger, now).without_container == {}
    later = census(ledger, now + timedelta(minutes=3))
    assert later.without_container == {"n1": 1}
    ledger.set_container(c.allocation.id, "abc", "jupyter-ann")
    assert census(ledger, now + timedelta(minutes=3)).without_container == {}

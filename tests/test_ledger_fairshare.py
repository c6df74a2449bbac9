"""Fair share in the waitlist (``c.GPULab.fairshare_half_life``): among users of one priority,
the one who used fewer GPU-hours lately is offered the next slice; usage fades by half every
half-life; priority still comes first; off, the queue is first come. The rules alone
(``ledger.fairshare``) and through a real ledger's queue on SQLite (and PostgreSQL where set)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest
from clock_support import DAY, HOUR, MINUTE
from ledger_support import backends, lab_inventory, make_url
from traitlets import TraitError

from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.lab.config import GPULab
from jupyterhub_gpulab.ledger import Ledger, NoFreeSlice
from jupyterhub_gpulab.ledger.fairshare import decayed_gpu_hours, serving_order
from jupyterhub_gpulab.ledger.waitlist import QueueFirst

NOW = datetime(2026, 10, 5, 12, tzinfo=timezone.utc)
WEEK = 7 * DAY


@dataclass
class Span:
    user: str
    started_at: datetime
    ended_at: datetime | None
    share: float = 1.0


@dataclass
class Entry:
    id: int
    user: str
    priority: int = 0


def hours_ago(h: float) -> datetime:
    return NOW - timedelta(hours=h)


# -- the rules --------------------------------------------------------------------------------


def test_an_hour_just_used_counts_one_and_a_half_life_ago_counts_half():
    used = decayed_gpu_hours(
        [Span("fresh", hours_ago(1), NOW), Span("old", hours_ago(7 * 24 + 1), hours_ago(7 * 24))],
        NOW,
        WEEK,
    )
    assert used["fresh"] == pytest.approx(1.0, rel=5e-3)
    assert used["old"] == pytest.approx(0.5, rel=5e-3)


def test_a_slice_counts_its_share_and_an_open_allocation_runs_until_now():
    used = decayed_gpu_hours(
        [Span("mig", hours_ago(7), NOW, share=1 / 7), Span("open", hours_ago(2), None)],
        NOW,
        1000 * WEEK,  # next to no decay: the shares alone
    )
    assert used["mig"] == pytest.approx(1.0, rel=1e-3)  # 7 h of a 1g.10gb is one GPU-hour
    assert used["open"] == pytest.approx(2.0, rel=1e-3)
    # nothing after now counts, and a span ending before it starts counts nothing
    later = decayed_gpu_hours([Span("x", NOW, NOW + timedelta(hours=5))], NOW, WEEK)
    assert later.get("x", 0.0) == 0.0


def test_no_half_life_is_refused_with_the_value():
    with pytest.raises(ValueError, match="half_life_s must be positive"):
        decayed_gpu_hours([], NOW, 0)


def test_priority_first_then_less_recent_use_then_first_come():
    heavy, light, student, fresh = (
        Entry(1, "heavy", 10), Entry(2, "light", 10), Entry(3, "student", 0), Entry(4, "new", 10)
    )  # fmt: skip
    usage = {"heavy": 20.0, "light": 2.0, "student": 0.0}
    order = serving_order([heavy, light, student, fresh], usage)
    assert [e.user for e in order] == ["new", "light", "heavy", "student"]
    # fair share off: priority, then first come
    assert [e.user for e in serving_order([student, fresh, light, heavy])] == [
        "heavy", "light", "new", "student"
    ]  # fmt: skip
    # equal use: first come
    assert [e.user for e in serving_order([light, heavy], {})] == ["heavy", "light"]


def test_the_half_life_is_a_duration_setting():
    assert GPULab(fairshare_half_life="7d").fairshare_half_life == WEEK
    assert GPULab().fairshare_half_life == 0
    with pytest.raises(TraitError, match="fairshare_half_life"):
        GPULab(fairshare_half_life="a week")


# -- through the ledger's queue ---------------------------------------------------------------

GPU = SliceRequest(kind=SliceKind.GPU)
ONE_GPU = [{"uuid": "GPU-fs-0", "index": 0, "name": "NVIDIA H100 80GB HBM3", "memory": "80GiB"}]


@pytest.fixture(params=backends())
def ledger(request, tmp_path):
    led = Ledger(make_url(request.param, tmp_path))
    led.sync_inventory(lab_inventory(ONE_GPU))
    yield led
    led.close()


def claim(ledger, user, **kw):
    return ledger.claim(GPU, user=user, profile="research", **kw)


def used_for(ledger, at, user, seconds):
    a = claim(ledger, user).allocation
    at.move(seconds)
    ledger.release(a.id, "stopped")


@pytest.mark.parametrize("half_life", [WEEK, 0], ids=["fair-share", "first-come"])
def test_the_lighter_user_is_offered_the_freed_gpu_first(ledger, at, half_life):
    at.now = NOW
    ledger.fairshare_half_life = half_life
    used_for(ledger, at, "heavy", 10 * HOUR)  # heavy ran 10 h this week, light 1 h
    used_for(ledger, at, "light", 1 * HOUR)
    holder = claim(ledger, "other").allocation
    ledger.join_waitlist("heavy", "research", GPU, priority=10)
    at.move(MINUTE)
    ledger.join_waitlist("light", "research", GPU, priority=10)
    ledger.join_waitlist("student", "research", GPU, priority=0)
    expected = ["light", "heavy"] if half_life else ["heavy", "light"]
    assert [e.user for e in ledger.waitlist()] == [*expected, "student"]
    assert ledger.queue_position(expected[0], "research")[0] == 1
    assert ledger.queue_position(expected[1], "research")[0] == 2
    ledger.release(holder.id, "stopped")
    # the one behind cannot walk in past the one ahead
    with pytest.raises(QueueFirst):
        claim(ledger, expected[1])
    offered = ledger.offer_next(lambda e: {}, 300)
    assert [e.user for e in offered] == [expected[0]]
    claim(ledger, expected[0])  # takes the hold
    with pytest.raises(NoFreeSlice):
        claim(ledger, expected[1])


def test_heavy_use_fades_after_half_lives(ledger, at):
    at.now = NOW
    ledger.fairshare_half_life = DAY
    used_for(ledger, at, "heavy", 10 * HOUR)  # 10 h, then days pass
    at.move(4 * DAY)  # 10 h x 2^-4 = 0.6 h left
    used_for(ledger, at, "light", 1 * HOUR)  # 1 h just now
    claim(ledger, "other")
    ledger.join_waitlist("light", "research", GPU, priority=10)
    ledger.join_waitlist("heavy", "research", GPU, priority=10)
    assert [e.user for e in ledger.waitlist()] == ["heavy", "light"]

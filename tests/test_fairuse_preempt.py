"""Priority preemption: a queued higher-priority user takes the slice of the lowest-priority,
longest-idle preemptible server (by the culler's own GPU-idle measure), after a warning, through
the culler's own round; and the policy key that allows it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpulab.fairuse.culler import Limits, Server, Settings, decide
from jupyterhub_gpulab.fairuse.preempt import choose
from jupyterhub_gpulab.fairuse.rounds import cull_round
from jupyterhub_gpulab.inventory.model import Utilization
from jupyterhub_gpulab.lab.policy import PolicyContext
from jupyterhub_gpulab.lab.policyload import load_policies

T0 = datetime(2026, 12, 1, 14, 0, tzinfo=timezone.utc)
NOW = T0 + timedelta(hours=2)
SETTINGS = Settings(warn_before_s=600)
MIN_IDLE = 30 * 60


def samples(idle_from: datetime, busy=False):
    """One sample a minute from T0 to NOW: busy until ``idle_from``, then idle (or all busy)."""
    out, t = [], T0
    while t <= NOW:
        out.append(Utilization(90.0 if busy or t < idle_from else 0.0, 2**30, at=t))
        t += timedelta(minutes=1)
    return out


def server(user, *, priority=0, preemptible=True, idle_for=60, busy=False, slice_kind="seat"):
    return Server(
        user=user,
        name="",
        profile=slice_kind,
        started_at=T0,
        limits=Limits(),
        has_gpu=True,
        samples=samples(NOW - timedelta(minutes=idle_for), busy=busy),
        priority=priority,
        preemptible=preemptible,
    )


@dataclass
class Entry:
    user: str
    profile: str
    priority: int
    request: str = "seat"


def matches(s, e):
    return s.profile == e.request


def chosen(servers, waiting, **kw):
    out = choose(servers, waiting, matches, NOW, SETTINGS, min_idle_s=MIN_IDLE, **kw)
    return {s.user: s.preempt_for for s in out if s.preempt_at is not None}


RESEARCHER = Entry("res", "a100", priority=10)


def test_the_lowest_priority_then_longest_idle_server_is_chosen():
    servers = [
        server("idle60", idle_for=60),
        server("idle90", idle_for=90),
        server("staff", priority=5, idle_for=120),
        server("busy", busy=True),
        server("short", idle_for=10),  # under the 30-minute minimum
        server("protected", preemptible=False, idle_for=200),
        server("other-kind", idle_for=300, slice_kind="mig"),
        server("peer", priority=10, idle_for=400),
    ]
    assert chosen(servers, [RESEARCHER]) == {"idle90": "res"}
    # nobody waiting (or only equal priority): nothing is preempted
    assert chosen(servers, []) == {}
    assert chosen(servers, [Entry("x", "a100", priority=0)]) == {}


def test_a_server_idle_less_than_preempt_min_idle_is_never_taken():
    # alone, so nothing else could be chosen first: the minimum itself decides
    assert chosen([server("short", idle_for=29)], [RESEARCHER]) == {}
    assert chosen([server("long", idle_for=31)], [RESEARCHER]) == {"long": "res"}
    # c.GPULabService.preempt_min_idle is what is compared: ten minutes lets the short one go
    out = choose([server("short", idle_for=29)], [RESEARCHER], matches, NOW, SETTINGS,
                 min_idle_s=10 * 60)  # fmt: skip
    assert [s.preempt_for for s in out] == ["res"]


def test_one_server_per_queued_profile_and_an_earlier_choice_stays():
    servers = [server("idle60", idle_for=60), server("idle90", idle_for=90)]
    second = Entry("res2", "a100", priority=10)  # same profile: waits behind res
    assert chosen(servers, [RESEARCHER, second]) == {"idle90": "res"}
    # idle60 was warned on an earlier pass: it stays the one, though idle90 idles longer
    assert chosen(servers, [RESEARCHER], already={("idle60", ""): NOW}) == {"idle60": "res"}
    # its GPU got busy: the choice lapses and the longest idle is taken instead
    busy_now = [server("idle60", busy=True), server("idle90", idle_for=90)]
    assert chosen(busy_now, [RESEARCHER], already={("idle60", ""): NOW}) == {"idle90": "res"}


async def test_a_preempted_server_is_warned_then_stopped_through_the_culler_s_round():
    (victim,) = choose(
        [server("student", idle_for=60)], [RESEARCHER], matches, NOW, SETTINGS, min_idle_s=MIN_IDLE
    )
    warned, stopped, warnings = [], [], {}

    async def warn(d):
        warned.append(d)

    async def stop(d):
        stopped.append(d)

    await cull_round([victim], warnings, NOW, SETTINGS, warn=warn, stop=stop)
    assert [(d.rule, d.action) for d in warned] == [("preempt", "warn")] and stopped == []
    assert "res is waiting" in warned[0].message
    later = NOW + timedelta(seconds=SETTINGS.warn_before_s)
    victim = replace(victim, preempt_at=NOW)
    await cull_round([victim], warnings, later, SETTINGS, warn=warn, stop=stop)
    assert [(d.rule, d.end_reason) for d in stopped] == [("preempt", "culled:preempt")]
    assert "went to a user with higher priority" in stopped[0].message


def test_no_preemption_without_a_chosen_server():
    d = decide(server("student", idle_for=60), {}, NOW, SETTINGS)
    assert d.action == "keep" and d.rule != "preempt"


@pytest.mark.parametrize(
    ("policies", "preemptible"),
    [
        pytest.param({"students": {"preemptible": True}}, True, id="all-say-so"),
        pytest.param({"students": {"preemptible": True}, "ta": {}}, False, id="one-protects"),
        pytest.param({"students": {}}, False, id="off-by-default"),
    ],
)
def test_the_policy_key_decides_who_may_be_preempted(policies, preemptible):
    loaded = load_policies(policies, [])
    ctx = PolicyContext.of(list(policies), False, loaded)
    assert ctx.preemptible is preemptible


def test_only_a_user_who_finds_nothing_free_may_preempt(tmp_path, at):
    """Where a slice is free the waitlist offers it: no running server is taken for that user.
    A free slice that a course's reservation keeps counts as taken."""
    from ledger_support import lab_inventory

    from jupyterhub_gpulab.fairuse.offers import starved
    from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
    from jupyterhub_gpulab.ledger import Ledger

    gpu = SliceRequest(kind=SliceKind.GPU, model="A40")
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    ledger.sync_inventory(
        lab_inventory([{"uuid": "GPU-a40", "index": 0, "name": "NVIDIA A40", "memory": "48GiB"}])
    )
    held = ledger.claim(gpu, user="student", profile="a40", server_name="")
    entry = ledger.join_waitlist("res", "a40", gpu, priority=10)
    assert starved(ledger, entry)  # taken: preemption may free it
    ledger.release(held.allocation.id, "stopped")
    assert not starved(ledger, entry)  # the A40 is free: the waitlist will offer it
    ledger.book(
        holder="DL101", groups=["dl101"], profile="a40", request=gpu, count=1,
        starts_at=at.now, ends_at=at.now + timedelta(hours=2), lead_s=600, grace_s=600,
    )  # fmt: skip
    assert starved(ledger, entry)  # free, but kept for DL101's session
    ledger.close()

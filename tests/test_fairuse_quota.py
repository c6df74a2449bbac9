"""GPU-hour budgets as users meet them: calendar periods, the refusal before a spawn, the budget
that runs out mid-session, several groups, and a hub restart in the middle of a week."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from clock_support import HOUR, MINUTE

from jupyterhub_gpulab.errors import ConfigError
from jupyterhub_gpulab.fairuse.culler import Limits, Server, Settings, decide, next_warnings
from jupyterhub_gpulab.fairuse.quota import (
    budget_window,
    check_spawn,
    over_budget_servers,
    period_window,
    session_limit,
    user_budget,
    window_start,
)
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest, load_declared
from jupyterhub_gpulab.lab.policy import GroupPolicy, PolicyContext, applicable_policies
from jupyterhub_gpulab.lab.profile import Profile
from jupyterhub_gpulab.lab.term import Term
from jupyterhub_gpulab.ledger import Allocation, Ledger

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")
WED = datetime(2026, 12, 2, 15, 0, tzinfo=UTC)  # Wednesday of the week starting Monday 11-30
H = timedelta(hours=1)
STUDENTS = GroupPolicy("students", gpu_hours=10, period="week", max_session=8 * 3600)
TAS = GroupPolicy("tas", gpu_hours=2, period="day")
RESEARCH = GroupPolicy("research", priority=10)  # no gpu_hours: no budget
POLICIES = {p.group: p for p in (STUDENTS, TAS, RESEARCH)}
GPU_PROFILE = Profile(
    "pytorch-1g", "PyTorch 1g", "img", slice=SliceRequest(SliceKind.MIG, mig_profile="1g.10gb")
)
CPU_PROFILE = Profile("cpu", "CPU", "img")


def ctx(groups, policies=POLICIES, *, is_admin=False, tz=UTC, term=None) -> PolicyContext:
    """The policy context of a user in ``groups`` (the spawner and service build it once)."""
    return PolicyContext.of(groups, is_admin, policies, tz=tz, term=term)


TERM = Term(datetime(2026, 9, 7, tzinfo=UTC), datetime(2026, 12, 19, tzinfo=UTC))

LAB = [
    {
        "uuid": "GPU-h100-0",
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "memory": "80GiB",
        "mig": [{"uuid": f"MIG-h100-0-{j}", "profile": "1g.10gb"} for j in range(7)],
    },
    {"uuid": "GPU-a40-1", "index": 1, "name": "NVIDIA A40", "memory": "48GiB"},
]


def used(user, hours, share=1.0, end=WED, n=1):
    """``n`` closed allocations of ``user`` ending at ``end``, ``hours`` of weighted use in all."""
    span = timedelta(hours=hours / share / n)
    return [
        Allocation(i, f"S{i}", user, "", "p", "n", "students", share, None, None,
                   end - span * (i + 1), end - span * i, "stopped")
        for i in range(n)
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("period", "now", "tz", "expected"),
    [
        pytest.param(
            "day", WED, UTC, ("2026-12-02T00:00:00+00:00", "2026-12-03T00:00:00+00:00"), id="day"
        ),
        pytest.param(
            "week", WED, UTC, ("2026-11-30T00:00:00+00:00", "2026-12-07T00:00:00+00:00"),
            id="week-starts-monday",
        ),
        pytest.param(
            "week", datetime(2026, 12, 6, 23, 30, tzinfo=UTC), BERLIN,
            ("2026-12-06T23:00:00+00:00", "2026-12-13T23:00:00+00:00"),
            id="week-in-berlin-already-monday",
        ),
        pytest.param(
            "day", datetime(2026, 3, 29, 12, 0, tzinfo=UTC), BERLIN,
            ("2026-03-28T23:00:00+00:00", "2026-03-29T22:00:00+00:00"),
            id="dst-day-has-23-hours",
        ),
        pytest.param(
            "term", WED, UTC, ("2026-09-07T00:00:00+00:00", "2026-12-19T00:00:00+00:00"),
            id="term",
        ),
    ],
)  # fmt: skip
def test_period_windows_are_calendar_periods(period, now, tz, expected):
    start, end = period_window(period, now, tz=tz, term=TERM)
    assert (start.isoformat(), end.isoformat()) == expected


def test_outside_the_term_there_is_no_term_window():
    assert period_window("term", datetime(2027, 1, 5, tzinfo=UTC), term=TERM) is None


def test_a_term_policy_without_a_term_is_a_config_error():
    with pytest.raises(ConfigError, match="term_start"):
        period_window("term", WED)


def test_refusal_says_hours_used_and_when_more_come_back():
    msg = check_spawn("ann", ctx(["students"]), used("ann", 10, n=2), WED, profile=GPU_PROFILE)
    assert msg == (
        "You have used 10.0 of 10 GPU-hours this week (students); more from Monday 2026-12-07 "
        "00:00 UTC. CPU profiles are not counted."
    )


@pytest.mark.parametrize(
    ("limit", "spent", "says"),
    [
        pytest.param(0.04, 0.042, "You have used 0.042 of 0.04 GPU-hours", id="2.4 minutes"),
        pytest.param(0.25, 0.25, "You have used 0.25 of 0.25 GPU-hours", id="a quarter hour"),
        pytest.param(0.001, 0.0012, "You have used 0.0012 of 0.001 GPU-hours", id="4 seconds"),
    ],
)
def test_a_small_budget_is_told_in_its_own_digits_not_as_zero(limit, spent, says):
    # .1f said "You have used 0.0 of 0.0 GPU-hours" for the first and the last
    tiny = {"students": GroupPolicy("students", gpu_hours=limit, period="week")}
    msg = check_spawn("ann", ctx(["students"], tiny), used("ann", spent), WED)
    assert msg.startswith(says + " this week (students); more from Monday"), msg
    b = user_budget("ann", ctx(["students"], tiny), used("ann", spent), WED)
    assert b.describe().startswith(says.removeprefix("You have used ") + " used this week")


def test_refusal_in_the_users_time_zone():
    msg = check_spawn("ann", ctx(["students"], tz=BERLIN), used("ann", 10), WED)
    assert "more from Monday 2026-12-07 00:00 CET" in msg


def test_term_budget_refusal_says_it_does_not_renew_before_the_term_ends():
    term_students = {"students": GroupPolicy("students", gpu_hours=40, period="term")}
    msg = check_spawn("ann", ctx(["students"], term_students, term=TERM), used("ann", 40), WED)
    assert "40.0 of 40 GPU-hours this term" in msg
    assert "Saturday 2026-12-19" in msg and "instructor" in msg


@pytest.mark.parametrize(
    ("hours", "refused"),
    [
        pytest.param(9.9, False, id="hours-left"),
        pytest.param(10.0, True, id="budget-used-up"),
    ],
)
def test_spawn_check_boundary(hours, refused):
    msg = check_spawn("ann", ctx(["students"]), used("ann", hours), WED)
    assert (msg is not None) is refused


def test_cpu_profiles_are_never_refused_for_gpu_hours():
    allocs = used("ann", 50)
    assert check_spawn("ann", ctx(["students"]), allocs, WED, profile=CPU_PROFILE) is None
    assert check_spawn("ann", ctx(["students"]), allocs, WED, profile=GPU_PROFILE)


def test_only_the_users_own_usage_counts():
    allocs = used("ben", 50) + used("ann", 3)
    b = user_budget("ann", ctx(["students"]), allocs, WED)
    assert (b.used_hours, b.remaining_hours) == (pytest.approx(3), pytest.approx(7))


def test_usage_before_the_period_does_not_count():
    last_week = used("ann", 10, end=WED - timedelta(days=7))
    assert check_spawn("ann", ctx(["students"]), last_week, WED) is None


@pytest.mark.parametrize(
    ("groups", "is_admin", "governing"),
    [
        pytest.param(["students", "tas"], False, "tas", id="most-hours-left-governs"),
        pytest.param(["students", "research"], False, None, id="no-budget-beats-any-number"),
        pytest.param(["nobody"], False, None, id="no-policy-no-budget"),
        pytest.param(["students"], True, None, id="admin-without-admin-policy"),
    ],
)
def test_several_groups_the_most_generous_budget_governs(groups, is_admin, governing):
    yesterday = used("ann", 10, end=WED - timedelta(days=1))  # the week's 10 h, none today
    b = user_budget("ann", ctx(groups, is_admin=is_admin), yesterday, WED)
    assert (b.group if b else None) == governing


def test_a_user_with_any_budget_left_may_spawn():
    # 10 of 10 weekly hours used as a student, but today's TA budget is untouched.
    allocs = used("ann", 10, end=WED - timedelta(days=1))
    assert check_spawn("ann", ctx(["students", "tas"]), allocs, WED) is None


def test_window_start_covers_the_longest_period():
    mine = applicable_policies(["students", "tas"], False, POLICIES)
    assert window_start(mine, WED) == datetime(2026, 11, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("max_age", "policies", "expected"),
    [
        pytest.param(None, (STUDENTS,), 8 * 3600, id="policy-max-session"),
        pytest.param(4 * 3600, (STUDENTS,), 4 * 3600, id="profile-max-age-is-shorter"),
        pytest.param(None, (STUDENTS, RESEARCH), None, id="unlimited-policy-is-more-generous"),
        pytest.param(None, (), None, id="no-limit-at-all"),
    ],
)
def test_session_limit(max_age, policies, expected):
    profile = Profile("p", "P", "img", max_age=max_age)
    assert session_limit(profile, policies) == expected


# -- with a real ledger ---------------------------------------------------------------------------


@pytest.fixture
def clock_start():
    """Where ``at`` (conftest.py) starts."""
    return WED


@pytest.fixture
def ledger(tmp_path, at):
    led = Ledger(f"sqlite:///{tmp_path / 'gpulab.sqlite'}")
    led.sync_inventory(load_declared(LAB))
    yield led
    led.close()


def budget_of(ledger, user, now, groups=("students",)):
    rows = ledger.allocations_between(budget_window(ctx(groups), now), now)
    return user_budget(user, ctx(groups), rows, now), rows


def test_quota_refusal_before_spawn_from_the_ledger(ledger, at):
    # Two days of 35 h on 1g slices (35/7 = 5 GPU-hours each): 10 of 10 hours.
    for _ in range(2):
        a = ledger.claim(
            SliceRequest(SliceKind.MIG, mig_profile="1g.10gb"), user="ann", profile="p"
        )
        at.move(35 * HOUR)
        ledger.release(a.allocation.id, "stopped")
    b, rows = budget_of(ledger, "ann", at.now)
    assert b.exhausted and b.used_hours == pytest.approx(10)
    msg = check_spawn("ann", ctx(["students"]), rows, at.now, profile=GPU_PROFILE)
    assert msg.startswith("You have used 10.0 of 10 GPU-hours this week (students)")
    assert "Monday 2026-12-07 00:00 UTC" in msg
    assert "ben" not in {r.user for r in rows}  # nothing spawned for anyone else
    assert check_spawn("ben", ctx(["students"]), rows, at.now, profile=GPU_PROFILE) is None


def test_budget_exhausted_mid_session_warns_then_stops_the_server(ledger, at):
    # 9 GPU-hours already used this week; ann starts a whole A40 at 15:00: one hour left.
    old = ledger.claim(SliceRequest(SliceKind.GPU), user="ann", profile="p")
    at.move(9 * HOUR)
    ledger.release(old.allocation.id, "stopped")
    run = ledger.claim(SliceRequest(SliceKind.GPU), user="ann", profile="p").allocation
    started = at.now
    settings = Settings(warn_before_s=600)
    warnings: dict = {}
    culled = None
    while culled is None and at.now < started + 3 * H:
        b, _ = budget_of(ledger, "ann", at.now)
        over = over_budget_servers(ledger.open_allocations(), {"ann": b}, at.now, within_s=600)
        server = Server(
            "ann", "", "p", started, Limits(), last_activity=at.now, has_gpu=True,
            budget_exhausted_at=over[0].exhausted_at if over else None,
        )  # fmt: skip
        d = decide(server, warnings, at.now, settings)
        if d.action == "warn":
            assert at.now == started + 50 * timedelta(minutes=1)
            assert "budget" in d.message
        if d.action == "cull":
            culled = d
            ledger.release(run.id, d.end_reason)
        warnings = next_warnings(warnings, d)
        at.move(MINUTE)
    assert culled.rule == "budget" and culled.now == started + H
    assert ledger.get(run.id).end_reason == "culled:budget"
    b, _ = budget_of(ledger, "ann", at.now)
    assert b.used_hours == pytest.approx(10)


def test_two_servers_burn_the_budget_twice_as_fast(ledger, at):
    old = ledger.claim(SliceRequest(SliceKind.GPU), user="ann", profile="p")
    at.move(9 * HOUR)
    ledger.release(old.allocation.id, "stopped")
    for server in ("", "exp"):
        ledger.claim(
            SliceRequest(SliceKind.MIG, mig_profile="1g.10gb"),
            user="ann", profile="p", server_name=server,
        )  # fmt: skip
    b, _ = budget_of(ledger, "ann", at.now)
    over = over_budget_servers(ledger.open_allocations(), {"ann": b}, at.now, within_s=4 * 3600)
    assert {o.allocation.server_name for o in over} == {"", "exp"}
    assert over[0].exhausted_at == at.now + timedelta(hours=3.5)  # 1 h at 2/7 per hour


def test_a_budget_that_resets_first_is_not_over(ledger, at):
    at.now = datetime(2026, 12, 6, 23, 30, tzinfo=UTC)  # Sunday night
    ledger.claim(SliceRequest(SliceKind.MIG, mig_profile="1g.10gb"), user="ann", profile="p")
    b, _ = budget_of(ledger, "ann", at.now)
    assert over_budget_servers(ledger.open_allocations(), {"ann": b}, at.now, within_s=1e9) == []


def test_hub_restart_mid_week_keeps_the_budget(tmp_path, at):
    url = f"sqlite:///{tmp_path / 'gpulab.sqlite'}"
    first = Ledger(url)
    first.sync_inventory(load_declared(LAB))
    first.claim(SliceRequest(SliceKind.GPU), user="ann", profile="p")
    at.move(4 * HOUR)
    before, _ = budget_of(first, "ann", at.now)
    first.close()
    at.move(2 * HOUR)  # down for two hours; the container kept running
    second = Ledger(url)
    after, _ = budget_of(second, "ann", at.now)
    second.close()
    assert before.used_hours == pytest.approx(4)
    assert after.used_hours == pytest.approx(6)
    assert after.resets_at == before.resets_at

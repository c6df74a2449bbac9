"""The GPU-aware culler's decisions, pass after pass, as a user would live them.

Time moves in one-minute culler passes with a utilisation sample every 10 s, the service's
defaults; every scenario asserts when the user is warned, when the server goes, and why.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from culler_support import MIN, SETTINGS, STUDENT, T0, gpu_server, samples

from jupyterhub_gpulab.fairuse.culler import (
    Decision,
    Limits,
    Server,
    Settings,
    decide,
    next_warnings,
)
from jupyterhub_gpulab.fairuse.rounds import cull_round


def live(make_server, hours: float = 9, settings: Settings = SETTINGS):
    """Run one-minute passes from T0 for ``hours``; return ``(first warning, cull decision)``."""
    warnings: dict = {}
    warned = None
    now = T0
    while now <= T0 + timedelta(hours=hours):
        d = decide(make_server(now), warnings, now, settings)
        if d.action == "warn" and warned is None:
            warned = d
        if d.action == "cull":
            return warned, d
        warnings = next_warnings(warnings, d)
        now += MIN
    return warned, None


def test_open_tab_over_idle_gpu_is_warned_then_culled_after_the_gpu_timeout():
    # The tab stays open (the hub sees activity every minute) but the GPU never works.
    warned, culled = live(lambda now: gpu_server(now, lambda t: 0.0, lambda now: now), hours=3)
    assert warned.now == T0 + 20 * MIN  # 10 minutes before the 30-minute GPU timeout
    assert "will be stopped at 09:30 UTC" in warned.message and "idle" in warned.message
    assert culled.rule == "gpu-idle"
    assert culled.now == T0 + 30 * MIN
    assert culled.end_reason == "culled:gpu-idle"
    assert "GPU has been idle" in culled.message


def test_the_same_open_tab_survives_an_activity_only_culler():
    activity_only = Limits(idle_timeout=2 * 3600, max_age=8 * 3600)
    _, culled = live(
        lambda now: gpu_server(now, lambda t: 0.0, lambda now: now, limits=activity_only), hours=7
    )
    assert culled is None


def test_closed_tab_with_busy_gpu_is_kept_until_max_age():
    # The user starts a training run and closes the tab after five minutes.
    warned, culled = live(
        lambda now: gpu_server(now, lambda t: 90.0, T0 + 5 * MIN), hours=9, settings=SETTINGS
    )
    assert warned.rule == "max-age" and warned.now == T0 + timedelta(hours=8) - 10 * MIN
    assert culled.rule == "max-age" and culled.now == T0 + timedelta(hours=8)
    assert "longest session" in culled.message


def test_gpu_idle_clock_starts_when_the_run_finishes():
    # Tab closed, a three-hour run, then nothing: the GPU timeout counts from the run's end.
    done = T0 + timedelta(hours=3)
    _, culled = live(lambda now: gpu_server(now, lambda t: 80.0 if t < done else 0.0, T0 + MIN))
    assert culled.rule == "gpu-idle"
    assert culled.now == done + 30 * MIN


def test_busy_kernel_does_not_keep_an_idle_gpu():
    # A kernel busy on CPU work for hours while the slice's GPU sits idle: the slice goes.
    _, culled = live(lambda now: gpu_server(now, lambda t: 1.0, None, kernels_busy=True), hours=2)
    assert culled.rule == "gpu-idle"


def test_busy_kernel_counts_as_activity_for_a_cpu_server():
    cpu = Limits(idle_timeout=3600, max_age=8 * 3600)

    def server(now, busy):
        return Server("bob", "", "cpu", T0, cpu, last_activity=T0, kernels_busy=busy)

    _, culled = live(lambda now: server(now, True), hours=3)
    assert culled is None
    _, culled = live(lambda now: server(now, False), hours=3)
    assert culled.rule == "idle" and culled.now == T0 + timedelta(hours=1)


def test_cpu_server_ignores_gpu_samples():
    cpu = Limits(idle_timeout=3600, gpu_idle_timeout=60, max_age=None)
    server = Server("bob", "", "cpu", T0, cpu, last_activity=T0 + 50 * MIN, samples=[])
    d = decide(server, {}, T0 + 55 * MIN, SETTINGS)
    assert d.action == "keep" and d.rule == "idle"


@pytest.mark.parametrize(
    ("percent", "culled"),
    [
        pytest.param(4.9, True, id="just-below-threshold-is-idle"),
        pytest.param(5.0, False, id="at-threshold-is-busy"),
    ],
)
def test_threshold_boundary(percent, culled):
    _, d = live(lambda now: gpu_server(now, lambda t: percent, lambda now: now), hours=1)
    assert (d is not None) is culled


def test_named_servers_are_decided_apart():
    now = T0 + 25 * MIN
    idle = gpu_server(now, lambda t: 0.0, now, name="exp")
    busy = gpu_server(now, lambda t: 70.0, now, name="")
    d_idle, d_busy = decide(idle, {}, now, SETTINGS), decide(busy, {}, now, SETTINGS)
    assert (d_idle.action, d_idle.server_name) == ("warn", "exp")
    assert "'exp'" in d_idle.message
    assert d_busy.action == "keep"


def test_unknown_utilisation_never_counts_as_idle():
    # An A100 MIG slice: NVML gives no utilisation; only the activity rule can act.
    _, culled = live(lambda now: gpu_server(now, lambda t: None, T0 + MIN), hours=4)
    assert culled.rule == "idle"
    assert culled.now == T0 + MIN + timedelta(hours=2)


def test_a_gap_in_sampling_restarts_the_idle_clock():
    # The monitor was down 10:00-11:00; idle samples before the gap do not count.
    def gpu_samples(now):
        return [
            s
            for s in samples(now, lambda t: 0.0)
            if not T0 + timedelta(hours=1) < s.at < T0 + timedelta(hours=2)
        ]

    now = T0 + timedelta(hours=2, minutes=15)
    server = gpu_server(now, lambda t: 0.0, now)
    server = Server(**{**server.__dict__, "samples": gpu_samples(now)})
    d = decide(server, {}, now, SETTINGS)
    assert d.action == "keep" and d.rule == "gpu-idle"
    assert d.at == T0 + timedelta(hours=2, minutes=30)


def test_stale_samples_suspend_the_gpu_rule():
    now = T0 + timedelta(hours=2)
    server = Server(
        "alice",
        "",
        "pytorch-1g",
        T0,
        STUDENT,
        last_activity=now,
        has_gpu=True,
        samples=samples(T0 + timedelta(hours=1), lambda t: 0.0),
    )
    assert decide(server, {}, now, SETTINGS).action == "keep"


def test_warning_is_cancelled_when_the_gpu_gets_busy_again():
    now = T0 + 21 * MIN
    warned = decide(gpu_server(now, lambda t: 0.0, now), {}, now, SETTINGS)
    assert warned.action == "warn"
    state = next_warnings({}, warned)
    later = now + 3 * MIN
    back = decide(
        gpu_server(later, lambda t: 60.0 if t >= now else 0.0, later), state, later, SETTINGS
    )
    assert back.action == "keep" and back.cancel == ("gpu-idle",)
    assert next_warnings(state, back) == {}


def test_a_rule_found_already_due_is_warned_and_culled_one_lead_later():
    # The service restarts at 11:00 and finds a GPU idle since 09:00: no cull without a warning.
    now = T0 + timedelta(hours=2)
    first = decide(gpu_server(now, lambda t: 0.0, now), {}, now, SETTINGS)
    assert first.action == "warn" and first.at == now + 10 * MIN
    state = next_warnings({}, first)
    soon = now + 9 * MIN
    assert decide(gpu_server(soon, lambda t: 0.0, soon), state, soon, SETTINGS).action == "keep"
    due = now + 10 * MIN
    assert decide(gpu_server(due, lambda t: 0.0, due), state, due, SETTINGS).action == "cull"


def test_budget_running_out_mid_session_warns_then_culls():
    out = T0 + timedelta(hours=1)
    _, culled = live(lambda now: gpu_server(now, lambda t: 90.0, now, budget_exhausted_at=out))
    assert culled.rule == "budget" and culled.now == out
    assert "budget" in culled.message and "CPU profiles" in culled.message


def test_rules_due_together_cull_for_the_budget_first():
    due = T0 + timedelta(hours=8)
    _, culled = live(lambda now: gpu_server(now, lambda t: 90.0, now, budget_exhausted_at=due))
    assert culled.rule == "budget"


def test_log_line_names_the_server_rule_and_time():
    d = Decision(
        "cull", "alice", "exp", "pytorch-1g", T0, rule="gpu-idle", at=T0, detail="GPU below 5%"
    )
    assert d.log_line() == (
        "cull alice/'exp' (pytorch-1g) rule=gpu-idle at=2026-12-01T09:00:00Z: GPU below 5%"
    )
    assert d.log_line(dry_run=True).startswith("[dry-run] cull alice/'exp'")


# -- a whole pass ---------------------------------------------------------------------------------


def _idle(user, name=""):
    now = T0 + timedelta(hours=2)
    return Server(
        user,
        name,
        "pytorch-1g",
        T0,
        STUDENT,
        last_activity=now,
        has_gpu=True,
        samples=samples(now, lambda t: 0.0),
    )


async def test_a_failed_stop_is_logged_and_the_pass_goes_on(caplog):
    now = T0 + timedelta(hours=2)
    servers = [_idle("ann"), _idle("ben"), _idle("cat", "exp")]
    warned_at = now - 15 * MIN
    warnings = {(s.user, s.name): {"gpu-idle": warned_at} for s in servers}
    stopped = []

    async def stop(d):
        if d.user == "ben":
            raise RuntimeError("hub answered 503")
        stopped.append((d.user, d.server_name))

    async def warn(d):
        raise AssertionError("no warning expected")

    caplog.set_level(logging.INFO)
    report = await cull_round(servers, warnings, now, SETTINGS, warn=warn, stop=stop)
    assert stopped == [("ann", ""), ("cat", "exp")]
    assert [f[0] for f in report.failures] == ["ben"]
    assert "ben" in caplog.text and "503" in caplog.text
    assert warnings == {("ben", ""): {"gpu-idle": warned_at}}  # ben is tried again next pass


async def test_dry_run_logs_each_decision_and_touches_nothing(caplog):
    now = T0 + timedelta(hours=2)
    warnings = {("gone", ""): {"idle": T0}}

    async def never(d):
        raise AssertionError("dry run must not act")

    caplog.set_level(logging.INFO)
    report = await cull_round(
        [_idle("ann"), _idle("ann", "exp")], warnings, now, SETTINGS, warn=never, stop=never,
        dry_run=True,
    )  # fmt: skip
    assert report.count("warn") == 2
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [d.log_line(dry_run=True) for d in report.decisions]
    assert [line.split(" (")[0] for line in lines] == [
        "[dry-run] warn ann/''",
        "[dry-run] warn ann/'exp'",
    ]
    assert set(warnings) == {("ann", ""), ("ann", "exp")}  # tracked as if warned; "gone" dropped

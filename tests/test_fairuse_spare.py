"""Demand-aware GPU idle (``c.GPULabService.gpu_idle_spare_active``), pass after pass as a user
lives it: a student at the keyboard thinking between GPU cells keeps their slice while the lab
has a free one of that kind and nobody queues for one; the pass someone needs it, the GPU-idle
rule is back with its clock, warns at once and stops ``cull_warn_before`` later.

Each pass is the culler's: :func:`~jupyterhub_gpulab.fairuse.spare.spare_idle` marks the
servers, then :func:`~jupyterhub_gpulab.fairuse.culler.decide` decides (as
``Culler.run_pass`` does; the service's pass with a hub: ``test_service_culling.py``).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from culler_support import MIN, SETTINGS, STUDENT, T0, gpu_server

from jupyterhub_gpulab.fairuse.culler import Limits, decide, next_warnings
from jupyterhub_gpulab.fairuse.spare import Demand, Spare, spare_idle, spares

TEN_MIN = Spare(active_within_s=600)  # gpu_idle_spare_active "10m", no longest
FREE, TAKEN, QUEUED = Demand(free=2, queued=0), Demand(free=0, queued=0), Demand(2, 1)


def at_keyboard(now):
    return now  # the hub sees activity every pass: the tab is in use


def term(make_server, demand_at, hours: float = 4, spare: Spare = TEN_MIN):
    """One-minute passes from T0: spare, then decide. ``(first warning, cull)`` decisions."""
    warnings: dict = {}
    warned = None
    now = T0
    while now <= T0 + timedelta(hours=hours):
        demand = lambda s, t=now: demand_at(t)  # noqa: E731
        [server] = spare_idle([make_server(now)], demand, now, spare, SETTINGS)
        d = decide(server, warnings, now, SETTINGS)
        if d.action == "warn" and warned is None:
            warned = d
        if d.action == "cull":
            return warned, d
        warnings = next_warnings(warnings, d)
        now += MIN
    return warned, None


def idle_gpu(last_activity, **kw):
    return lambda now: gpu_server(now, lambda t: 0.0, last_activity, **kw)


def test_a_user_at_the_keyboard_keeps_an_idle_slice_while_one_is_free_and_nobody_queues():
    warned, culled = term(idle_gpu(at_keyboard), lambda now: FREE, hours=4)
    assert warned is None and culled is None  # 4 h of thinking, never warned: nobody needed it


def test_the_slice_is_reclaimed_with_a_warning_the_pass_the_last_free_one_is_taken():
    # free for 2 h, then the last free slice is taken: the GPU has been idle since T0
    warned, culled = term(
        idle_gpu(at_keyboard), lambda now: FREE if now < T0 + 120 * MIN else TAKEN
    )
    assert warned.now == T0 + 120 * MIN and warned.rule == "gpu-idle"
    assert "since 09:00 UTC" in warned.message  # the idle clock ran on while spared
    assert "will be stopped at 11:10 UTC" in warned.message
    assert culled.now == T0 + 130 * MIN and culled.rule == "gpu-idle"


def test_a_queued_user_who_could_use_the_slice_ends_the_spare():
    warned, culled = term(idle_gpu(at_keyboard), lambda now: QUEUED)
    assert warned.now == T0 + 20 * MIN and culled.now == T0 + 30 * MIN  # as without the spare


def test_a_user_who_left_is_not_spared_even_with_free_slices():
    left = idle_gpu(lambda now: min(now, T0 + 5 * MIN))  # last seen 5 min in
    warned, culled = term(left, lambda now: FREE)
    assert warned.now == T0 + 20 * MIN and culled.now == T0 + 30 * MIN
    # active within the window: still spared at 14 min (9 min after they left)
    assert spares(left(T0 + 14 * MIN), FREE, T0 + 14 * MIN, TEN_MIN, T0)
    assert not spares(left(T0 + 16 * MIN), FREE, T0 + 16 * MIN, TEN_MIN, T0)


def test_off_by_default_and_without_a_slice():
    warned, culled = term(idle_gpu(at_keyboard), lambda now: FREE, spare=Spare(0))
    assert warned.now == T0 + 20 * MIN and culled.now == T0 + 30 * MIN
    cpu = replace(gpu_server(T0, lambda t: 0.0, at_keyboard), has_gpu=False)
    assert not spares(cpu, FREE, T0, TEN_MIN, T0)


def test_other_rules_still_stop_a_spared_server():
    capped = Limits(STUDENT.idle_timeout, STUDENT.gpu_idle_timeout, max_age=3600)
    warned, culled = term(idle_gpu(at_keyboard, limits=capped), lambda now: FREE)
    assert warned.rule == "max-age" and culled.rule == "max-age" and culled.now == T0 + 60 * MIN


def test_a_tab_left_open_over_an_idle_gpu_is_spared_no_longer_than_the_longest():
    # gpu_idle_spare_longest "1h": the GPU idle since T0, its timeout 30 min, so at 90 min
    hour = Spare(active_within_s=600, longest_s=3600)
    warned, culled = term(idle_gpu(at_keyboard), lambda now: FREE, spare=hour)
    assert warned.now == T0 + 90 * MIN and "since 09:00 UTC" in warned.message
    assert culled.now == T0 + 100 * MIN and culled.rule == "gpu-idle"


def test_a_user_who_runs_a_cell_now_and_then_is_spared_all_along():
    # a GPU cell of 2 minutes every 45 min: each idle gap is past the 30-min timeout, never
    # past the longest
    thinking = lambda t: 60.0 if (t - T0).total_seconds() % 2700 < 120 else 0.0  # noqa: E731
    hour = Spare(active_within_s=600, longest_s=3600)
    server = lambda now: gpu_server(now, thinking, at_keyboard)  # noqa: E731
    assert term(server, lambda now: FREE, spare=hour) == (None, None)
    warned, culled = term(server, lambda now: FREE, spare=Spare(0))  # without it: stopped
    assert culled.rule == "gpu-idle"


# -- the JupyterLab extension's interaction report (c.f. service/presence.py) ----------------------


def test_a_tab_left_open_is_not_at_the_keyboard_once_the_extension_reports_interaction():
    # the hub sees the open tab every pass; the page's last keystroke was 5 min in: 10 min
    # later the user is no longer at the keyboard, the spare ends, and the GPU-idle rule (its
    # clock since T0) warns at once and stops 10 min later, as without the spare
    typed_then_left = idle_gpu(at_keyboard, interaction_at=T0 + 5 * MIN)
    warned, culled = term(typed_then_left, lambda now: FREE)
    assert warned.now == T0 + 20 * MIN and culled.now == T0 + 30 * MIN
    assert spares(typed_then_left(T0 + 14 * MIN), FREE, T0 + 14 * MIN, TEN_MIN, T0)
    assert not spares(typed_then_left(T0 + 16 * MIN), FREE, T0 + 16 * MIN, TEN_MIN, T0)
    # without the report the same open tab is spared all along
    assert term(idle_gpu(at_keyboard), lambda now: FREE) == (None, None)


def test_a_user_typing_is_at_the_keyboard_within_a_window_shorter_than_the_hubs_lag():
    # gpu_idle_spare_active "2m"; the hub's last_activity lags 5 min behind (its refresh
    # interval), the page reports a keystroke every minute: the user thinking between GPU cells
    # keeps the idle slice, where the hub's view alone would have them gone
    two_min = Spare(active_within_s=120)
    lagging = lambda now: now - 5 * MIN  # noqa: E731
    typing = lambda now: gpu_server(now, lambda t: 0.0, lagging, interaction_at=now)  # noqa: E731
    assert term(typing, lambda now: FREE, spare=two_min) == (None, None)
    warned, culled = term(idle_gpu(lagging), lambda now: FREE, spare=two_min)
    assert warned.now == T0 + 20 * MIN and culled.now == T0 + 30 * MIN

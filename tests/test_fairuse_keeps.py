"""Keep, as a user lives it (engine-free): a click on a GPU-idle warning postpones that stop by one
window, each click counts against the group's keeps per day, the last one is refused with when
they renew, and the culler honours a keep (its own passes, a minute apart, decide). The ledger's
record of keeps (migration 0010) on SQLite: numbered per user and day, never past the allowance.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa
from ledger_support import backends, lab_inventory, make_url

from jupyterhub_gpulab.errors import ConfigError
from jupyterhub_gpulab.fairuse.culler import Limits, Server, Settings, decide, next_warnings
from jupyterhub_gpulab.fairuse.keeps import judge_keep, keep_day
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.inventory.model import Utilization
from jupyterhub_gpulab.lab.policy import PolicyContext
from jupyterhub_gpulab.lab.policyload import load_policies
from jupyterhub_gpulab.ledger import Ledger, db

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
MIN = timedelta(minutes=1)
LIMITS = Limits(idle_timeout=4 * 3600, gpu_idle_timeout=30 * 60, max_age=8 * 3600)
SETTINGS = Settings(threshold_percent=5.0, warn_before_s=600)
UTC = timezone.utc


def idle_server(now: datetime, kept_at: datetime | None = None, **kw) -> Server:
    """A student's server whose GPU never works while the tab stays open (activity = now)."""
    every = timedelta(seconds=10)
    samples, t = [], T0
    while t <= now:
        samples.append(Utilization(0.0, 2**30, at=t))
        t += every
    return Server(
        user="ann", name="", profile="mig", started_at=T0, limits=kw.pop("limits", LIMITS),
        last_activity=now, has_gpu=kw.pop("has_gpu", True), samples=samples, kept_at=kept_at,
        **kw,
    )  # fmt: skip


def passes(keep_on_warning: int, hours: float = 3):
    """One-minute culler passes from T0; the user clicks Keep on each of the first
    ``keep_on_warning`` warnings. Returns ``(warning times, cull decision or None)``."""
    warnings: dict = {}
    kept_at = None
    warned: list[datetime] = []
    now = T0
    while now <= T0 + timedelta(hours=hours):
        d = decide(idle_server(now, kept_at), warnings, now, SETTINGS)
        if d.action == "cull":
            return warned, d
        warnings = next_warnings(warnings, d)
        if d.action == "warn" and d.rule == "gpu-idle":
            warned.append(now)
            verdict = judge_keep(idle_server(now, kept_at), warnings, len(warned) - 1,
                                 keep_on_warning, now, UTC)  # fmt: skip
            if verdict.ok:
                kept_at = now
        now += MIN
    return warned, None


def test_the_culler_honours_a_keep_and_stops_one_window_later():
    # no keep: warned at 09:20, stopped at 09:30 (the 30-minute GPU-idle timeout)
    warned, culled = passes(keep_on_warning=0)
    assert warned == [T0 + 20 * MIN] and culled.rule == "gpu-idle" and culled.now == T0 + 30 * MIN
    # one keep at the 09:20 warning: the stop moves to 09:50, warned again at 09:40
    warned, culled = passes(keep_on_warning=1)
    assert warned == [T0 + 20 * MIN, T0 + 40 * MIN]
    assert culled.rule == "gpu-idle" and culled.now == T0 + 50 * MIN
    assert "kept at" in culled.detail
    # two keeps: 10:10
    warned, culled = passes(keep_on_warning=2)
    assert culled.now == T0 + 70 * MIN and len(warned) == 3


def test_a_keep_cancels_the_warning_it_answers():
    now = T0 + 20 * MIN
    warnings = {"gpu-idle": now}
    d = decide(idle_server(now, kept_at=now), warnings, now, SETTINGS)
    assert d.action == "keep" and "gpu-idle" in d.cancel
    assert d.at == now + timedelta(minutes=30)


def test_a_keep_does_not_hold_off_the_longest_session():
    limits = Limits(gpu_idle_timeout=30 * 60, max_age=3600)
    now = T0 + 60 * MIN
    d = decide(
        idle_server(now, kept_at=now - 5 * MIN, limits=limits),
        {"max-age": now - 10 * MIN},
        now,
        SETTINGS,
    )
    assert d.action == "cull" and d.rule == "max-age"


def test_each_keep_counts_and_the_one_past_the_allowance_is_refused():
    now = datetime(2026, 12, 1, 15, 0, tzinfo=UTC)
    berlin = ZoneInfo("Europe/Berlin")
    server, warned = idle_server(now), {"gpu-idle": now}
    first = judge_keep(server, warned, 0, 2, now, berlin)
    assert first.ok and first.used == 1 and first.until == now + timedelta(minutes=30)
    assert "1 left today" in first.message and "16:30 CET" in first.message
    second = judge_keep(server, warned, 1, 2, now, berlin)
    assert second.ok and "0 left today" in second.message
    third = judge_keep(server, warned, 2, 2, now, berlin)
    assert not third.ok and third.status == 429 and third.until is None
    assert "used your 2 keeps for today" in third.message
    assert "renews at 00:00 CET" in third.message and "CPU profile" in third.message
    # no limit: never refused for counting
    assert judge_keep(server, warned, 99, None, now, berlin).ok
    off = judge_keep(server, warned, 0, 0, now, berlin)
    assert off.status == 429 and "turned off" in off.message


@pytest.mark.parametrize(
    "server, warned, why",
    [
        pytest.param(idle_server(T0 + 20 * MIN), {}, "no GPU-idle warning", id="not-warned"),
        pytest.param(
            idle_server(T0 + 20 * MIN), {"idle": T0}, "no GPU-idle warning", id="other-rule"
        ),  # fmt: skip
        pytest.param(
            idle_server(T0, has_gpu=False), {"gpu-idle": T0}, "nothing to keep", id="cpu-server"
        ),  # fmt: skip
        pytest.param(
            idle_server(T0, limits=Limits(idle_timeout=60)),
            {"gpu-idle": T0},
            "nothing to keep",
            id="no-gpu-idle-rule",
        ),  # fmt: skip
    ],
)
def test_a_keep_with_nothing_to_keep_is_refused_and_not_counted(server, warned, why):
    v = judge_keep(server, warned, 0, 2, T0 + 20 * MIN, UTC)
    assert not v.ok and v.status == 409 and why in v.message and v.used == 0


def test_the_keep_day_is_the_lab_time_zones():
    berlin = ZoneInfo("Europe/Berlin")
    late = datetime(2026, 12, 1, 23, 30, tzinfo=UTC)  # 00:30 on the 2nd in Berlin
    assert keep_day(late, berlin) == ("2026-12-02", datetime(2026, 12, 2, 23, 0, tzinfo=UTC))
    assert keep_day(late, UTC)[0] == "2026-12-01"


def test_keeps_per_day_is_the_most_generous_of_a_users_policies():
    policies = load_policies(
        {
            "students": {},  # the default: 2
            "ta": {"keeps_per_day": 5},
            "staff": {"keeps_per_day": None},
            "exam": {"keeps_per_day": 0},
        },
        ["cpu"],
    )
    assert PolicyContext.of(["students"], False, policies).keeps_per_day == 2
    assert PolicyContext.of(["students", "ta"], False, policies).keeps_per_day == 5
    assert PolicyContext.of(["ta", "staff"], False, policies).keeps_per_day is None
    assert PolicyContext.of(["exam"], False, policies).keeps_per_day == 0
    assert PolicyContext.of([], False, policies).keeps_per_day is None  # under no policy
    with pytest.raises(ConfigError, match="keeps_per_day 'two' is not a whole number"):
        load_policies({"students": {"keeps_per_day": "two"}}, ["cpu"])


@pytest.mark.parametrize("backend", backends())
def test_the_ledger_numbers_keeps_and_never_passes_the_allowance(backend, tmp_path):
    led = Ledger(make_url(backend, tmp_path), auto_upgrade=True)
    try:
        led.sync_inventory(lab_inventory())
        a = led.claim(SliceRequest(kind=SliceKind.GPU), user="ann", profile="p").allocation
        kw = {"day": "2026-12-01", "allowance": 2, "until": T0 + 30 * MIN}
        assert led.take_keep("ann", "", a.id, at=T0, **kw) == 1
        assert led.take_keep("ann", "", a.id, at=T0 + 20 * MIN, **kw) == 2
        assert led.take_keep("ann", "", a.id, at=T0 + 40 * MIN, **kw) is None
        assert led.keeps_used("ann", "2026-12-01") == 2
        assert led.keeps_used("ann", "2026-12-02") == 0  # a new day, a new allowance
        assert led.take_keep("ann", "", a.id, at=T0, **{**kw, "day": "2026-12-02"}) == 1
        assert led.latest_keeps() == {a.id: T0 + 20 * MIN}
        assert led.keeps_by_user("2026-12-01") == {"ann": 2}
        assert led.take_keep("bob", "x", 999, at=T0, **{**kw, "allowance": None}) == 1
    finally:
        led.close()


@pytest.mark.parametrize("backend", backends())
def test_clicks_at_once_never_take_more_than_the_allowance(backend, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    led = Ledger(make_url(backend, tmp_path), auto_upgrade=True)
    try:
        kw = {"day": "2026-12-01", "allowance": 2, "at": T0, "until": T0 + 30 * MIN}
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda _: led.take_keep("ann", "", 7, **kw), range(8)))
        assert sorted(n for n in got if n is not None) == [1, 2]
        assert led.keeps_used("ann", "2026-12-01") == 2
    finally:
        led.close()


def test_a_click_that_counted_before_another_wrote_does_not_take_a_third(tmp_path, monkeypatch):
    """Two clicks both counted 1 keep used; the other wrote number 2 first: this one's write of
    number 2 is refused by the database, it counts again, and the allowance of 2 is spent."""
    led = Ledger(f"sqlite:///{tmp_path / 'race.sqlite'}", auto_upgrade=True)
    try:
        kw = {"day": "2026-12-01", "allowance": 2, "at": T0, "until": T0 + 30 * MIN}
        assert led.take_keep("ann", "", 7, **kw) == 1
        assert led.take_keep("ann", "", 7, **kw) == 2
        counted = iter([1])  # what this click read before the other one's write

        def stale_then_true(user, day, real=led.keeps_used):
            return next(counted, None) or real(user, day)

        monkeypatch.setattr(led, "keeps_used", stale_then_true)
        assert led.take_keep("ann", "", 7, **kw) is None
        assert Ledger.keeps_used(led, "ann", "2026-12-01") == 2
    finally:
        led.close()


def test_migration_0010_adds_the_keeps_and_goes_back(tmp_path):
    from alembic import command

    engine = db.make_engine(f"sqlite:///{tmp_path / 'k.sqlite'}")
    db.upgrade(engine, "0009")
    assert "gpu_keeps" not in sa.inspect(engine).get_table_names()
    db.upgrade(engine, "0010")
    assert "gpu_keeps" in sa.inspect(engine).get_table_names()
    command.downgrade(db.alembic_config(engine), "0009")
    assert "gpu_keeps" not in sa.inspect(engine).get_table_names()
    engine.dispose()


def test_the_hub_home_page_points_a_gpu_idle_warning_to_its_choices():
    from types import SimpleNamespace

    from jupyterhub_gpulab.hub.announce import warnings_html

    def warning(rule):
        return SimpleNamespace(user="ann", server_name="", rule=rule, message="Your server …")

    assert ">Keep your GPU or move to CPU</a>" in warnings_html([warning("gpu-idle")], "/me")
    assert ">Your GPU and its limits</a>" in warnings_html([warning("max-age")], "/me")

"""Pure parts of the culler and the fair-use pages: what the culler knows about each running
server, which warnings a pass makes obsolete, the period a usage report covers, the home-page
announcement and the culler's settings. No hub, no database (except one ledger file)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest
from html_support import parse_html
from traitlets import TraitError
from traitlets.config import Config

from jupyterhub_gpulab.fairuse.culler import Settings, decide
from jupyterhub_gpulab.fairuse.cullplan import (
    NOTICE_TTL,
    plan,
    running_servers,
    to_clear,
    warnings_map,
)
from jupyterhub_gpulab.hub.announce import HomeAnnouncement, warnings_html
from jupyterhub_gpulab.hubapi.servers import hub_time
from jupyterhub_gpulab.inventory.model import Utilization
from jupyterhub_gpulab.lab.config import GPULab
from jupyterhub_gpulab.ledger import Allocation, CullWarning, Ledger
from jupyterhub_gpulab.service.app import GPULabService
from jupyterhub_gpulab.service.culling import kernels_busy
from jupyterhub_gpulab.service.web.usageview import PeriodError, parse_period

NOW = datetime(2026, 3, 4, 12, 0, tzinfo=timezone.utc)  # a Wednesday
UTC = timezone.utc


def lab(**extra):
    c = Config()
    c.GPULab.inventory = [{"uuid": "GPU-1", "index": 0, "name": "NVIDIA A40", "memory": "48GiB"}]
    c.GPULab.profiles = [
        {"slug": "cpu", "display_name": "CPU", "image": "x", "default": True,
         "idle_timeout": "1h"},
        {"slug": "a40", "display_name": "A40", "image": "x", "slice": {"kind": "gpu"},
         "gpu_idle_timeout": "20m", "max_age": "8h"},
    ]  # fmt: skip
    c.GPULab.group_policies = {
        "students": {"max_session": "2h", "gpu_hours": 1, "period": "week"},
        "staff": {},
    }
    for k, v in extra.items():
        setattr(c.GPULab, k, v)
    return GPULab(config=c).load()


def hub_user(name, servers, groups=("students",), admin=False):
    return {"name": name, "admin": admin, "groups": list(groups), "servers": servers}


def hub_server(*, ready=True, pending=None, started="2026-03-04T11:00:00.000000Z", **kw):
    return {
        "ready": ready,
        "pending": pending,
        "started": started,
        "last_activity": kw.get("last_activity", "2026-03-04T11:55:00Z"),
        "url": kw.get("url", "/user/x/"),
        "user_options": kw.get("user_options", {}),
    }


def alloc(aid, user, server="", *, started=NOW - timedelta(minutes=30), profile="a40", ended=None):
    return Allocation(
        id=aid, slice_id=f"GPU-{aid}", user=user, server_name=server, profile=profile, node="n",
        charge_group="students", share=1.0, container_id=None, container_name=None,
        started_at=started, ended_at=ended, end_reason=None if ended is None else "stopped",
    )  # fmt: skip


def no_history(_slice_id):
    return ()


def test_only_ready_servers_are_looked_at_with_their_activity_and_profile():
    users = [
        hub_user("ann", {
            "": hub_server(user_options={"profile": "cpu"}),
            "train": hub_server(ready=False, pending="spawn"),
            "old": hub_server(ready=False, pending="stop"),
        }),
        hub_user("bob", {"x": hub_server(last_activity=None)}, groups=(), admin=True),
    ]  # fmt: skip

    found = running_servers(users)

    assert [(r.user, r.name) for r in found] == [("ann", ""), ("bob", "x")]
    ann, bob = found
    assert ann.profile == "cpu" and ann.groups == ("students",)
    assert ann.last_activity == datetime(2026, 3, 4, 11, 55, tzinfo=UTC)
    assert bob.admin and bob.last_activity is None
    assert hub_time("2026-03-04T11:00:00.5+01:00") == datetime(2026, 3, 4, 10, 0, 0, 500000, UTC)
    assert hub_time("not a time") is None


def test_a_gpu_server_gets_its_allocations_profile_and_the_policys_shorter_session():
    the_lab = lab()
    [r] = running_servers([hub_user("ann", {"": hub_server()})])

    [(_, server, held)] = plan([r], [alloc(1, "ann")], the_lab, no_history, [], NOW, within_s=600)

    assert [a.id for a in held] == [1] and server.has_gpu and server.profile == "a40"
    assert server.limits.gpu_idle_timeout == 20 * 60
    assert server.limits.max_age == 2 * 3600  # the students' max_session beats the 8 h
    assert server.started_at == NOW - timedelta(minutes=30)  # since the slice was held


def test_a_server_carries_its_pages_last_interaction_since_it_started():
    # ann's extension reported 2 min ago; ben's report is from before his server's start (a
    # page of the server he stopped): he is judged by the hub's last_activity
    started = NOW - timedelta(minutes=30)
    running = running_servers(
        [hub_user("ann", {"": hub_server()}), hub_user("ben", {"": hub_server()})]
    )
    reported = {("ann", ""): NOW - timedelta(minutes=2), ("ben", ""): started - timedelta(1)}
    found = plan(
        running, [alloc(1, "ann"), alloc(2, "ben")], lab(), no_history, [], NOW,
        within_s=600, interactions=reported,
    )  # fmt: skip
    by_user = {s.user: s for _, s, _ in found}
    assert by_user["ann"].interaction_at == NOW - timedelta(minutes=2)
    assert by_user["ben"].interaction_at is None


def test_a_cpu_server_gets_its_profiles_idle_rule_and_no_gpu_rule():
    the_lab = lab()
    [r] = running_servers([hub_user("ann", {"": hub_server()}, groups=("staff",))])

    [(_, server, held)] = plan([r], [], the_lab, no_history, [], NOW, within_s=600)

    assert held == () and not server.has_gpu and server.profile == "cpu"  # the default
    assert server.limits.idle_timeout == 3600 and server.limits.gpu_idle_timeout is None
    assert server.started_at == datetime(2026, 3, 4, 11, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "unknown, action",
    [pytest.param("busy", "keep", id="unknown-is-busy"), pytest.param("idle", "cull", id="idle")],
)
def test_a_slice_without_figures_is_idle_only_when_the_lab_says_so(unknown, action):
    the_lab = lab()
    [r] = running_servers([hub_user("ann", {"": hub_server()}, groups=("staff",))])
    minutes = range(0, 31)
    samples = [Utilization(at=NOW - timedelta(minutes=30 - m)) for m in minutes]

    [(_, server, _)] = plan(
        [r], [alloc(1, "ann")], the_lab, lambda sid: samples, [], NOW, within_s=600,
        unknown_idle=unknown == "idle",
    )  # fmt: skip
    warned = {"gpu-idle": NOW - timedelta(minutes=10)}

    assert decide(server, warned, NOW, Settings()).action == action


def test_a_user_running_out_of_budget_is_told_when_within_the_warning_lead():
    the_lab = lab()  # students: 1 GPU-hour a week
    [r] = running_servers([hub_user("ann", {"": hub_server()})])
    earlier = alloc(
        1, "ann", "x", started=NOW - timedelta(hours=5), ended=NOW - timedelta(hours=4.5)
    )
    held = alloc(2, "ann", started=NOW - timedelta(minutes=20))  # 30 + 20 of 60 minutes used

    def exhausted_at(within_s):
        [(_, server, _)] = plan(
            [r], [held], the_lab, no_history, [earlier, held], NOW, within_s=within_s
        )
        return server.budget_exhausted_at

    assert exhausted_at(600) == NOW + timedelta(minutes=10)
    assert exhausted_at(300) is None  # more than the warning lead away
    [staff] = running_servers([hub_user("ann", {"": hub_server()}, groups=("staff",))])
    [(_, server, _)] = plan([staff], [held], the_lab, no_history, [earlier, held], NOW,
                            within_s=600)  # fmt: skip
    assert server.budget_exhausted_at is None  # staff have no budget: the most generous


def warning(user, server, rule, created=NOW - timedelta(minutes=5)):
    return CullWarning(user, server, rule, "m", created + timedelta(minutes=10), created)


def test_a_pass_clears_cancelled_warnings_and_notices_of_servers_started_again():
    ledger_rows = [
        warning("ann", "", "gpu-idle"),  # still held: kept
        warning("ann", "", "idle"),  # cancelled this pass
        warning("bob", "", "max-age"),  # bob's server stopped
        warning("cy", "", "culled:gpu-idle"),  # cy started it again
        warning("dee", "", "culled:budget"),  # dee did not: kept
        warning("eve", "", "culled:idle", created=NOW - NOTICE_TTL - timedelta(seconds=1)),
    ]
    kept = warnings_map(ledger_rows)
    assert kept[("ann", "")].keys() == {"gpu-idle", "idle"} and ("cy", "") not in kept
    kept[("ann", "")].pop("idle")
    kept.pop(("bob", ""))
    running = running_servers([hub_user(u, {"": hub_server()}) for u in ("ann", "cy")])

    cleared = to_clear(ledger_rows, kept, running, NOW)

    assert sorted(cleared) == [
        ("ann", "", "idle"),
        ("bob", "", "max-age"),
        ("cy", "", "culled:gpu-idle"),
        ("eve", "", "culled:idle"),
    ]


# -- usage periods --------------------------------------------------------------------------------


def test_the_default_period_is_this_calendar_week_in_the_quota_time_zone():
    berlin = ZoneInfo("Europe/Berlin")
    assert parse_period(None, None, NOW) == (
        datetime(2026, 3, 2, tzinfo=UTC),
        datetime(2026, 3, 9, tzinfo=UTC),
    )
    start, end = parse_period("2026-03-01", "2026-04-01", NOW, berlin)
    assert start == datetime(2026, 2, 28, 23, tzinfo=UTC)  # local midnight, CET
    assert end == datetime(2026, 3, 31, 22, tzinfo=UTC)  # CEST from 29 March
    assert parse_period("2026-03-01", None, NOW)[1] == datetime(2026, 3, 8, tzinfo=UTC)
    assert parse_period(None, "2026-03-08", NOW)[0] == datetime(2026, 3, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "start, end, says",
    [
        pytest.param("2026-3-1", None, "ISO date", id="not-iso"),
        pytest.param("2026-03-08", "2026-03-01", "after start", id="backwards"),
        pytest.param("2020-01-01", "2026-01-01", "at most", id="too-long"),
        pytest.param("0001-01-01", None, "between", id="year-1"),
        pytest.param(None, "0001-01-03", "between", id="ends-in-year-1"),
        pytest.param("9999-12-31", None, "between", id="year-9999"),
        pytest.param("2" * 5000, None, "5000 characters", id="long"),
    ],
)
def test_a_malformed_period_says_what_is_accepted(start, end, says):
    with pytest.raises(PeriodError, match=says):
        parse_period(start, end, NOW)


# -- the home page's announcement -------------------------------------------------------------------


def test_warnings_on_the_home_page_are_escaped():
    text = warnings_html(
        [CullWarning("ann", "<b>", "gpu-idle", "<script>alert(1)</script>", NOW, NOW)], "../x"
    )
    page = parse_html(text)
    assert "script" not in page.tags() and "b" not in page.tags()  # no markup from the data
    warning = page.find(data_server="<b>")  # the server name, as an attribute's value
    assert "<script>alert(1)</script>" in warning.text()  # the message, shown as text
    assert warnings_html([], "../x") == ""


def test_the_announcement_keeps_the_configured_one_and_never_raises(tmp_path, caplog):
    c = Config()
    c.GPULab.db_url = f"sqlite:///{tmp_path / 'gpulab.sqlite'}"
    ledger = Ledger(c.GPULab.db_url)
    ledger.set_warning("ann", "", "gpu-idle", "Your server will be stopped", NOW)
    ann = SimpleNamespace(name="ann")

    home = HomeAnnouncement(c, "../services/gpulab/me", before="Maintenance on Friday. ")

    first, warnings = parse_html(home(ann)).children  # the configured text, then the warnings
    assert first == "Maintenance on Friday. "
    assert (
        "Your server will be stopped" in warnings.text()
        and "gpulab-warnings" in warnings.attrs["class"]
    )
    assert home(SimpleNamespace(name="bob")) == "Maintenance on Friday. "
    assert home(None) == "Maintenance on Friday. "
    ledger.close()

    broken = Config()
    broken.GPULab.db_url = "nosuchdatabase://nowhere"  # cannot be opened
    assert HomeAnnouncement(broken, "x")(ann) == ""
    assert "Cannot read ann's GPU warnings" in caplog.text


# -- settings and kernels -------------------------------------------------------------------------


def test_culler_settings_take_durations_and_say_the_accepted_forms():
    c = Config()
    c.GPULabService.cull_every = "20s"
    c.GPULabService.cull_warn_before = 90
    settings = GPULabService(config=c)
    assert settings.cull_every == 20 and settings.cull_warn_before == 90
    assert settings.utilization_history == 4 * 3600
    with pytest.raises(TraitError, match="'90s', '30m'"):
        GPULabService(cull_every="soon")
    with pytest.raises(TraitError, match="longer than 0"):
        GPULabService(max_sample_gap="0s")
    with pytest.raises(TraitError, match="'busy'"):
        GPULabService(unknown_utilization="maybe")


@pytest.mark.parametrize(
    "answer, busy",
    [
        pytest.param([], False, id="no-kernel"),
        pytest.param([{"execution_state": "idle"}, {"execution_state": "busy"}], True, id="busy"),
        pytest.param([{"execution_state": "starting"}], False, id="starting"),
        pytest.param({"message": "Forbidden"}, None, id="not-kernels"),
    ],
)
def test_kernels_answer(answer, busy):
    assert kernels_busy(answer) is busy

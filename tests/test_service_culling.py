"""The culler as users meet it: a real hub (subprocess, real proxy) runs servers; the gpulab
service runs in this process with the fake NVML handed to its constructor, and time moves through
``jupyterhub_gpulab.clock.utcnow``. Each test runs the culler's passes itself.

The servers are the stand-in single-user server (``standin_singleuser.py``, run by the hub's
``SimpleLocalProcessSpawner``); the tests hold their GPU slices in the ledger as the spawner
would. Real containers and the real spawner: ``test_service_culling_e2e.py``.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import secrets
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests
from fake_nvml import A40_UUID, P40_UUID, FakeNVML
from service_support import (
    PREFIX,
    InProcessService,
    ledger_for,
    login,
    make_hub,
    parse_html,
    start_hub,
    user_token,
)

from jupyterhub_gpulab import clock
from jupyterhub_gpulab.config import load_config_file
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.service.app import GPULabService
from jupyterhub_gpulab.service.culling import Culler

STANDIN = Path(__file__).with_name("standin_singleuser.py")
LIMITS = {"gpu_idle_timeout": "10m", "idle_timeout": "15m", "max_age": "30m"}
PROFILES = [
    {"slug": "cpu", "display_name": "CPU", "image": "x", "default": True, "idle_timeout": "20m"},
    {"slug": "a40", "display_name": "A40", "image": "x", "slice": {"kind": "gpu", "model": "A40"},
     **LIMITS},
    {"slug": "p40", "display_name": "P40", "image": "x", "slice": {"kind": "gpu", "model": "P40"},
     **LIMITS},
]  # fmt: skip
POLICIES = {
    "students": {"max_slices_per_user": 3},
    "researchers": {"max_slices_per_user": 3},
    # 12 minutes of a whole GPU per term
    "capped": {"gpu_hours": 0.2, "period": "term", "max_slices_per_user": 1},
}
# each budgeted test has its own user: budgets count the whole term
# (the hub keeps each server's latest activity: the tests post activity at their moved time)
USERS = {"ann": ["students"], "ben": ["students"], "dan": ["students"], "eve": ["students"],
         "fay": ["students"], "cap": ["capped"], "cap2": ["capped"]}  # fmt: skip


def culling_config(today: date, home: Path) -> str:
    return f"""
import sys
c.JupyterHub.spawner_class = "simple"
c.Spawner.cmd = [sys.executable, {str(STANDIN)!r}]
c.SimpleLocalProcessSpawner.home_dir_template = {str(home) + "/{username}"!r}
c.GPULab.inventory = []
c.GPULab.inventory_source = "nvml"
c.GPULab.profiles = {PROFILES!r}
c.GPULab.group_policies = {POLICIES!r}
c.GPULab.term_start = "{today - timedelta(days=30)}"
c.GPULab.term_end = "{today + timedelta(days=30)}"
c.GPULabService.cull_every = "1h"   # the tests run each pass themselves
c.GPULabService.cull_warn_before = "2m"
c.GPULabService.max_sample_gap = "5m"
# the service may stop students' and capped users' servers, not researchers': a researcher's
# stop fails as a refused hub request does. It may ask servers for their kernels.
for role in c.JupyterHub.load_roles:
    if role["name"] == "gpulab-service":
        role["scopes"] = [s for s in role["scopes"] if s != "admin:servers"] + [
            "admin:servers!group=students", "admin:servers!group=capped", "access:servers"]
"""


@pytest.fixture(scope="module")
def token():
    return secrets.token_hex(16)


@pytest.fixture(scope="module")
def hub(tmp_path_factory, token):
    workdir = tmp_path_factory.mktemp("culling-hub")
    hub = make_hub(
        workdir,
        managed=False,
        api_token=token,
        extra=culling_config(datetime.now(timezone.utc).date(), workdir / "home"),
    )
    hub.extra_config += f'c.GPULabService.proxy_url = "{hub.url}"\n'
    hub.write_config()
    try:
        boot = InProcessService(hub, token, nvml=FakeNVML.mixed_lab()).start()
        try:
            start_hub(hub.workdir, hub=hub)
        finally:
            boot.stop()
        for name, groups in USERS.items():
            hub.create_user(name, groups)
        yield hub
    finally:
        hub.stop()  # also when it failed to start: its proxy may run


class Clock:
    """The service's time: frozen at the test's start, moved by the test."""

    def __init__(self):
        self.now = datetime.now(timezone.utc).replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.now

    def move(self, minutes: float) -> None:
        self.now += timedelta(minutes=minutes)


@pytest.fixture
def at(monkeypatch):
    c = Clock()
    monkeypatch.setattr(clock, "utcnow", c)
    return c


@pytest.fixture
def fake():
    fake = FakeNVML.mixed_lab()
    fake.set_utilization(A40_UUID, gpu_percent=0)
    fake.set_utilization(P40_UUID, gpu_percent=0)
    return fake


@pytest.fixture
def ledger(hub):
    ledger = ledger_for(hub)
    yield ledger
    ledger.close()


@pytest.fixture
def svc(hub, token, fake, at, ledger):
    svc = InProcessService(hub, token, nvml=fake).start()
    yield svc
    svc.stop()
    for u in hub.api("GET", "/users").json():
        for name in list(u.get("servers") or {}):
            hub.stop_server(u["name"], name)
    for a in ledger.open_allocations():
        ledger.release(a.id, "test-cleanup")
    for name in {w.user for w in ledger.warnings()}:
        ledger.clear_warnings(name)


def spawn(hub, user: str, name: str = "") -> None:
    r = hub.spawn(user, name=name)
    assert r.status_code in (201, 202), r.text
    hub.wait_ready(user, name, timeout=30)


def hold(ledger, user: str, model: str, name: str = "", group: str | None = None):
    """The slice the spawner would have claimed for ``user``'s server ``name``."""
    return ledger.claim(
        SliceRequest(kind=SliceKind.GPU, model=model),
        user=user,
        profile=model.lower(),
        server_name=name,
        charge_groups=[(group, None)] if group else (),
    ).allocation


def step(svc, hub, at, minutes: float, *, tabs=()):
    """``minutes`` pass; the servers in ``tabs`` (``(user, name)``) have an open tab, whose
    activity the hub records; the service samples the GPUs and runs one culler pass."""
    at.move(minutes)
    stamp = at.now.isoformat().replace("+00:00", "Z")
    for user, name in tabs:
        r = hub.api(
            "POST",
            f"/users/{user}/activity",
            json={"last_activity": stamp, "servers": {name: {"last_activity": stamp}}},
        )
        assert r.status_code == 200, r.text
    svc.call(svc.service.sample)
    return svc.call(svc.service.culler.run_pass)


def running(hub, user: str, name: str = "") -> bool:
    server = hub.server(user, name)
    return bool(server and server.get("ready"))


def rules(ledger, user: str, name: str = "") -> set[str]:
    return {w.rule for w in ledger.warnings(user) if w.server_name == name}


def home_announcement(session, hub) -> str:
    page = parse_html(session.get(hub.url + "/hub/home", timeout=30).text)
    found = page.find_all("div", cls="announcement")
    return found[0].text() if found else ""


def test_open_tab_over_an_idle_gpu_is_warned_then_culled_after_the_gpu_timeout(
    hub, svc, at, ledger
):
    spawn(hub, "ann")
    held = hold(ledger, "ann", "A40")
    ann = login(hub, "ann")
    for _ in range(3):  # 6 minutes with the tab open and the GPU idle
        step(svc, hub, at, 2, tabs=[("ann", "")])
    assert rules(ledger, "ann") == set() and home_announcement(ann, hub) == ""

    report = step(svc, hub, at, 2, tabs=[("ann", "")])  # 8 min: 2 min before the timeout

    assert report.count("warn") == 1 and rules(ledger, "ann") == {"gpu-idle"}
    home = home_announcement(ann, hub)
    stop_at = (at.now + timedelta(minutes=2)).strftime("%H:%M")
    assert f"Your server will be stopped at {stop_at} UTC" in home and "GPU has been idle" in home
    me = parse_html(ann.get(hub.url + PREFIX + "me", timeout=30).text)
    assert "GPU has been idle" in me.find("div", cls="cull-warning", data_rule="gpu-idle").text()
    assert running(hub, "ann")

    report = step(svc, hub, at, 2, tabs=[("ann", "")])  # 10 min: the timeout

    assert report.count("cull") == 1
    assert not running(hub, "ann")
    closed = ledger.get(held.id)
    assert not closed.open and closed.end_reason == "culled:gpu-idle"
    assert "Your server was stopped" in home_announcement(ann, hub)
    assert rules(ledger, "ann") == {"culled:gpu-idle"}  # the notice, not the warning

    spawn(hub, "ann")  # started again: the notice goes at the next pass
    step(svc, hub, at, 1, tabs=[("ann", "")])
    assert rules(ledger, "ann") == set() and home_announcement(ann, hub) == ""


def test_closed_tab_over_a_busy_gpu_is_kept_until_max_age(hub, svc, at, ledger, fake):
    fake.set_utilization(A40_UUID, gpu_percent=80)
    spawn(hub, "ben")
    held = hold(ledger, "ben", "A40")
    for _ in range(13):  # 26 minutes without a tab: the busy GPU counts as activity
        report = step(svc, hub, at, 2)
        assert report.count("warn") == report.count("cull") == 0
    assert running(hub, "ben")

    step(svc, hub, at, 2)  # 28 min
    assert rules(ledger, "ben") == {"max-age"}
    step(svc, hub, at, 2)  # 30 min

    assert not running(hub, "ben")
    assert ledger.get(held.id).end_reason == "culled:max-age"


def test_named_servers_are_culled_each_on_its_own_signals(hub, svc, at, ledger, fake):
    fake.set_utilization(A40_UUID, gpu_percent=90)  # "train" trains; "play" holds an idle P40
    spawn(hub, "ann", "train")
    spawn(hub, "ann", "play")
    train = hold(ledger, "ann", "A40", "train")
    play = hold(ledger, "ann", "P40", "play")
    tabs = [("ann", "train"), ("ann", "play")]
    for _ in range(4):
        step(svc, hub, at, 2, tabs=tabs)
    assert rules(ledger, "ann", "play") == {"gpu-idle"} and rules(ledger, "ann", "train") == set()

    step(svc, hub, at, 2, tabs=tabs)

    assert not running(hub, "ann", "play") and running(hub, "ann", "train")
    assert ledger.get(play.id).end_reason == "culled:gpu-idle" and ledger.get(train.id).open


def test_a_budget_running_out_mid_session_is_warned_then_stopped(hub, svc, at, ledger, fake):
    fake.set_utilization(A40_UUID, gpu_percent=90)  # busy, with an open tab: only the budget
    spawn(hub, "cap")
    held = hold(ledger, "cap", "A40", group="capped")
    for _ in range(4):
        step(svc, hub, at, 2, tabs=[("cap", "")])
    assert rules(ledger, "cap") == set()

    step(svc, hub, at, 2, tabs=[("cap", "")])  # 10 of 12 minutes used
    [warning] = ledger.warnings("cap")
    assert warning.rule == "budget" and "GPU-hour budget runs out" in warning.message
    step(svc, hub, at, 2, tabs=[("cap", "")])

    assert not running(hub, "cap")
    assert ledger.get(held.id).end_reason == "culled:budget"
    me = parse_html(login(hub, "cap").get(hub.url + PREFIX + "me", timeout=30).text)
    budget = me.find("p", id="my-budget").text()
    assert budget.startswith("0.2 of 0.2 GPU-hours used this term (capped)") and "used up" in budget


def test_a_service_restart_mid_period_keeps_the_accounting_and_the_warnings(
    hub, svc, at, ledger, fake, token
):
    fake.set_utilization(A40_UUID, gpu_percent=90)
    spawn(hub, "cap2")
    # 6 minutes of the budget went in an earlier session, before the restart
    early = hold(ledger, "cap2", "A40", "old", group="capped")
    at.move(6)
    ledger.release(early.id, "stopped")
    held = hold(ledger, "cap2", "A40", group="capped")
    for _ in range(2):
        step(svc, hub, at, 2, tabs=[("cap2", "")])  # 4 of the last 6 minutes used
    assert rules(ledger, "cap2") == {"budget"}

    svc.stop()  # the service restarts: nothing of the above was kept in its memory
    again = InProcessService(hub, token, nvml=fake).start()
    try:
        step(again, hub, at, 1, tabs=[("cap2", "")])  # the warning stands: not given twice
        assert again.service.culler.last_report.count("warn") == 0 and running(hub, "cap2")
        step(again, hub, at, 1, tabs=[("cap2", "")])
        assert not running(hub, "cap2")
        assert ledger.get(held.id).end_reason == "culled:budget"
        admin = user_token(hub, login(hub, "admin"), "admin")
        r = requests.get(
            hub.url + PREFIX + "api/usage",
            headers={"Authorization": f"token {admin}"},
            timeout=30,
        )
        by_user = {u["user"]: u["gpu_hours"] for u in r.json()["gpu_hours"]["by_user"]}
        assert by_user["cap2"] == pytest.approx(0.2, abs=1e-3)
    finally:
        again.stop()


def test_dry_run_logs_every_decision_and_stops_nothing(hub, svc, at, ledger, caplog):
    config = load_config_file(hub.config_path)
    dry = Culler(
        svc.service.state, svc.service.hub, GPULabService(config=config, cull_dry_run=True)
    )
    spawn(hub, "dan")
    held = hold(ledger, "dan", "A40")
    caplog.set_level(logging.INFO, logger="gpulab.culler")
    for _ in range(8):  # 16 minutes: past the warning and the GPU timeout
        at.move(2)
        svc.call(svc.service.sample)
        svc.call(dry.run_pass)

    assert running(hub, "dan") and ledger.get(held.id).open
    assert ledger.warnings("dan") == []
    lines = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("[dry-run] warn dan/''") and "rule=gpu-idle" in m for m in lines)
    assert any(m.startswith("[dry-run] cull dan/''") for m in lines)
    assert any(m.startswith("[dry-run] keep dan/''") for m in lines)


def test_a_server_whose_stop_fails_does_not_stop_the_pass(hub, svc, at, ledger, caplog):
    hub.create_user("researcher", ["researchers"])
    spawn(hub, "researcher")
    spawn(hub, "dan")
    theirs = hold(ledger, "researcher", "A40")
    mine = hold(ledger, "dan", "P40")
    tabs = [("researcher", ""), ("dan", "")]
    for _ in range(4):
        step(svc, hub, at, 2, tabs=tabs)
    assert rules(ledger, "researcher") == rules(ledger, "dan") == {"gpu-idle"}

    report = step(svc, hub, at, 2, tabs=tabs)

    assert [f[0] for f in report.failures] == ["researcher"]  # the hub refused (403)
    assert "failed, will retry next pass" in caplog.text
    assert not running(hub, "dan") and ledger.get(mine.id).end_reason == "culled:gpu-idle"
    assert running(hub, "researcher") and ledger.get(theirs.id).open
    assert rules(ledger, "researcher") == {"gpu-idle"}  # still warned; tried again next pass


def test_usage_per_group_and_user_with_its_csv_export(hub, svc, at, ledger):
    at.move(60 * 24 * 60)  # two months on: a period no other test used the GPUs in
    for user, group, minutes in (("ann", "students", 30), ("cap", "capped", 6)):
        a = hold(ledger, user, "A40", group=group)
        at.move(minutes)
        ledger.release(a.id, "stopped")
    admin = login(hub, "admin")
    today = at.now.date()
    period = {"start": str(today - timedelta(days=1)), "end": str(today + timedelta(days=1))}

    r = admin.get(hub.url + PREFIX + "api/usage.csv", params=period, timeout=30)

    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/csv")
    rows = {row["user"]: row for row in csv.DictReader(io.StringIO(r.text))}
    assert set(rows) == {"ann", "cap"}
    assert rows["ann"]["gpu_hours"] == "0.5000" and rows["ann"]["group"] == "students"
    assert rows["cap"]["gpu_hours"] == "0.1000" and rows["cap"]["slice_kind"] == "gpu"
    assert rows["ann"]["period_start"].startswith(period["start"])

    page = parse_html(admin.get(hub.url + PREFIX, params=period, timeout=30).text)
    users = {
        tr.attrs["data-user"]: tr.find("td", cls="hours").text()
        for tr in page.find_all("tr", cls="usage-user")
    }
    assert users == {"ann": "0.50", "cap": "0.10"}
    groups = page.find("tr", cls="usage-group", data_group="capped")
    assert groups.find("td", cls="hours").text() == "0.10"
    link = page.find("a", id="usage-csv").attrs["href"]
    assert admin.get(hub.url + link, timeout=30).text == r.text

    bad = admin.get(hub.url + PREFIX + "api/usage.csv?start=2026-13-01", timeout=30)
    assert bad.status_code == 400 and "ISO date" in bad.json()["message"]
    student = login(hub, "ann").get(hub.url + PREFIX + "api/usage.csv", timeout=30)
    assert student.status_code == 403


def test_only_a_busy_kernel_saves_a_server_from_the_idle_rule(hub, svc, at, ledger):
    """CPU servers (no slice) with their tabs closed: the idle rule. Before stopping one the
    culler asks it for its kernels (this hub grants the service access:servers)."""
    spawn(hub, "eve")
    spawn(hub, "fay")
    home = load_config_file(hub.config_path).SimpleLocalProcessSpawner.home_dir_template
    busy = Path(home.format(username="fay")) / "kernels.json"
    busy.write_text(json.dumps([{"id": "k1", "name": "python3", "execution_state": "busy"}]))
    try:
        for _ in range(19):
            step(svc, hub, at, 1)  # 19 minutes (the hub's clock started a few seconds late)
        assert rules(ledger, "eve") == rules(ledger, "fay") == {"idle"}

        step(svc, hub, at, 2)

        assert not running(hub, "eve") and rules(ledger, "eve") == {"culled:idle"}
        assert running(hub, "fay") and rules(ledger, "fay") == set()  # warning withdrawn
    finally:
        busy.unlink()


def test_an_admin_cannot_release_the_slice_of_a_running_server(hub, svc, at, ledger):
    """Found by a fresh reviewer: releasing a running server's allocation let a second user take
    the GPU its container still used. The service now refuses (409) until the server stops."""
    from jupyterhub_gpulab.service import actions

    spawn(hub, "ann")
    a = hold(ledger, "ann", "A40")

    def release():
        return actions.release(svc.service.state, svc.service.hub, a.id, by="admin")

    with pytest.raises(actions.ActionError) as e:
        svc.call(release)
    assert e.value.status == 409
    assert "Stop the server instead" in e.value.message
    assert ledger.get(a.id).open
    hub.stop_server("ann")
    assert "is free" in svc.call(release)
    assert not ledger.get(a.id).open

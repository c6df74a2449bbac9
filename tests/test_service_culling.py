"""The culler as users meet it: a real hub (subprocess, real proxy) runs GPUDockerSpawner with real
containers; the gpulab service runs in this process with the fake NVML handed to its constructor
(the hub reads the same fake lab: ``hub_fakes.py``), and gpulab's time, in both processes, moves
through the ``at`` clock (``clock_support.py``). Each test runs the culler's passes itself.

Every server is a real single-user server in a container, holding the slice its spawner claimed;
the culler stops it through the hub and the spawner releases it. Written to the ledger directly:
only the past usage that the usage report adds up (hours of it). The busy-kernel rule needs a
kernel, which the test image lacks: test_service_culling_kernels.py, with a stand-in server.
"""

from __future__ import annotations

import csv
import io
import logging
import secrets
from datetime import datetime, timedelta, timezone

import hub_fakes
import pytest
import requests
from clock_support import DAY, MINUTE
from culling_support import (
    eventually,
    home_announcement,
    lab_config,
    rules,
    running,
    step,
)
from e2e_support import IMAGE, require_docker
from fake_nvml import A40_UUID, H100_UUID, P40_UUID, FakeNVML
from html_support import parse_html
from inprocess_support import InProcessService, inprocess_service_hub
from leakcheck import unique
from ledger_support import empty_lab
from service_support import (
    PREFIX,
    login,
    real_servers,
    user_token,
)

from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.lab.config import load_config_file
from jupyterhub_gpulab.service.app import GPULabService
from jupyterhub_gpulab.service.culling import Culler

pytestmark = pytest.mark.docker

# each budgeted test has its own user: budgets count the whole term
# (the hub keeps each server's latest activity: the tests post activity at their moved time)
USERS = {"ann": ["students"], "ben": ["students"], "dan": ["students"],
         "cap": ["capped"], "cap2": ["capped"]}  # fmt: skip


def spawner_config(node: str) -> str:
    return real_servers(node, image=IMAGE, start_timeout=90, http_timeout=60)


@pytest.fixture(scope="module")
def token():
    return secrets.token_hex(16)


@pytest.fixture(scope="module")
def hub(tmp_path_factory, token):
    require_docker()
    node = unique("gpulabcull")
    today = datetime.now(timezone.utc).date()
    with inprocess_service_hub(
        tmp_path_factory.mktemp("culling-hub"), token,
        extra=lab_config(today) + spawner_config(node), users=USERS,
        nvml=FakeNVML.mixed_lab(), fakes=True, proxy_url=True, node=node,
    ) as hub:  # fmt: skip
        yield hub


@pytest.fixture
def clock_file(hub):
    """``at`` (conftest.py) is the hub's clock too."""
    return hub.config_path.with_name(hub_fakes.CLOCK_FILE)


@pytest.fixture
def fake():
    fake = FakeNVML.mixed_lab()
    fake.set_utilization(A40_UUID, gpu_percent=0)
    fake.set_utilization(P40_UUID, gpu_percent=0)
    return fake


@pytest.fixture
def svc(hub, token, fake, at, ledger):
    svc = InProcessService(hub, token, nvml=fake).start()
    yield svc
    svc.stop()
    empty_lab(hub, ledger, warnings=True)


def spawn(hub, ledger, user: str, profile: str, name: str = ""):
    """Start ``user``'s server ``name`` with ``profile``; return the allocation its spawner
    claimed (``None`` for a CPU profile)."""
    r = hub.spawn(user, {"profile": profile}, name=name)
    assert r.status_code in (201, 202), r.text
    hub.wait_ready(user, name, timeout=90)
    held = [a for a in ledger.open_allocations(user) if a.server_name == name]
    return held[0] if held else None


def ended(ledger, allocation, reason: str) -> bool:
    """The allocation is closed with ``reason`` (the culler amends the spawner's ``stopped``)."""
    a = ledger.get(allocation.id)
    return not a.open and a.end_reason == reason


def history(ledger, at, user: str, model: str, seconds: float, group: str):
    """Past use the usage report counts: ``user`` held a ``model`` for ``seconds``, charged to
    ``group`` (written to the ledger: no server needs to run that long)."""
    a = ledger.claim(
        SliceRequest(kind=SliceKind.GPU, model=model),
        user=user,
        profile=model.lower(),
        charge_groups=[(group, None)],
    ).allocation
    at.move(seconds)
    ledger.release(a.id, "stopped")


def test_open_tab_over_an_idle_gpu_is_warned_then_culled_after_the_gpu_timeout(
    hub, svc, at, ledger
):
    held = spawn(hub, ledger, "ann", "a40")
    ann = login(hub, "ann")
    for _ in range(3):  # 6 minutes with the tab open and the GPU idle
        step(svc, hub, at, 2 * MINUTE, tabs=[("ann", "")])
    assert rules(ledger, "ann") == set() and home_announcement(ann, hub) == ""

    report = step(svc, hub, at, 2 * MINUTE, tabs=[("ann", "")])  # 8 min: 2 min before the timeout

    assert report.count("warn") == 1 and rules(ledger, "ann") == {"gpu-idle"}
    home = home_announcement(ann, hub)
    stop_at = (at.now + timedelta(minutes=2)).strftime("%H:%M")
    assert f"Your server will be stopped at {stop_at} UTC" in home and "GPU has been idle" in home
    me = parse_html(ann.get(hub.url + PREFIX + "me", timeout=30).text)
    assert "GPU has been idle" in me.find("div", cls="cull-warning", data_rule="gpu-idle").text()
    assert running(hub, "ann")

    report = step(svc, hub, at, 2 * MINUTE, tabs=[("ann", "")])  # 10 min: the timeout

    assert report.count("cull") == 1
    eventually(lambda: ended(ledger, held, "culled:gpu-idle"), "the spawner's release, amended")
    assert not running(hub, "ann")
    assert "Your server was stopped" in home_announcement(ann, hub)
    assert rules(ledger, "ann") == {"culled:gpu-idle"}  # the notice, not the warning

    spawn(hub, ledger, "ann", "a40")  # started again: the notice goes at the next pass
    step(svc, hub, at, MINUTE, tabs=[("ann", "")])
    assert rules(ledger, "ann") == set() and home_announcement(ann, hub) == ""


def test_closed_tab_over_a_busy_gpu_is_kept_until_max_age(hub, svc, at, ledger, fake):
    fake.set_utilization(A40_UUID, gpu_percent=80)
    held = spawn(hub, ledger, "ben", "a40")
    for _ in range(13):  # 26 minutes without a tab: the busy GPU counts as activity
        report = step(svc, hub, at, 2 * MINUTE)
        assert report.count("warn") == report.count("cull") == 0
    assert running(hub, "ben")

    step(svc, hub, at, 2 * MINUTE)  # 28 min
    assert rules(ledger, "ben") == {"max-age"}
    step(svc, hub, at, 2 * MINUTE)  # 30 min

    eventually(lambda: ended(ledger, held, "culled:max-age"), "the cull at max-age")
    assert not running(hub, "ben")


def test_named_servers_are_culled_each_on_its_own_signals(hub, svc, at, ledger, fake):
    fake.set_utilization(A40_UUID, gpu_percent=90)  # "train" trains; "play" holds an idle P40
    train = spawn(hub, ledger, "ann", "a40", "train")
    play = spawn(hub, ledger, "ann", "p40", "play")
    tabs = [("ann", "train"), ("ann", "play")]
    for _ in range(4):
        step(svc, hub, at, 2 * MINUTE, tabs=tabs)
    assert rules(ledger, "ann", "play") == {"gpu-idle"} and rules(ledger, "ann", "train") == set()

    step(svc, hub, at, 2 * MINUTE, tabs=tabs)

    eventually(lambda: ended(ledger, play, "culled:gpu-idle"), "the idle P40's cull")
    assert not running(hub, "ann", "play") and running(hub, "ann", "train")
    assert ledger.get(train.id).open


def test_a_budget_running_out_mid_session_is_warned_then_stopped(hub, svc, at, ledger, fake):
    fake.set_utilization(A40_UUID, gpu_percent=90)  # busy, with an open tab: only the budget
    held = spawn(hub, ledger, "cap", "a40")
    assert held.charge_group == "capped"
    for _ in range(4):
        step(svc, hub, at, 2 * MINUTE, tabs=[("cap", "")])
    assert rules(ledger, "cap") == set()

    step(svc, hub, at, 2 * MINUTE, tabs=[("cap", "")])  # 10 of 12 minutes used
    [warning] = ledger.warnings("cap")
    assert warning.rule == "budget" and "GPU-hour budget runs out" in warning.message
    step(svc, hub, at, 2 * MINUTE, tabs=[("cap", "")])

    eventually(lambda: ended(ledger, held, "culled:budget"), "the cull for the budget")
    assert not running(hub, "cap")
    me = parse_html(login(hub, "cap").get(hub.url + PREFIX + "me", timeout=30).text)
    budget = me.find("p", id="my-budget").text()
    assert budget.startswith("0.2 of 0.2 GPU-hours used this term (capped)") and "used up" in budget
    # and the spawner refuses a new GPU server: the budget is spent
    r = hub.spawn("cap", {"profile": "a40"})
    assert r.status_code == 429 and "GPU-hours" in r.json()["message"]


def test_a_service_restart_mid_period_keeps_the_accounting_and_the_warnings(
    hub, svc, at, ledger, fake, token
):
    fake.set_utilization(A40_UUID, gpu_percent=90)
    # 6 minutes of the budget went in an earlier session, before the restart
    spawn(hub, ledger, "cap2", "a40", "old")
    at.move(6 * MINUTE)
    hub.stop_server("cap2", "old")
    held = spawn(hub, ledger, "cap2", "a40")
    for _ in range(2):
        step(svc, hub, at, 2 * MINUTE, tabs=[("cap2", "")])  # 4 of the last 6 minutes used
    assert rules(ledger, "cap2") == {"budget"}

    svc.stop()  # the service restarts: nothing of the above was kept in its memory
    again = InProcessService(hub, token, nvml=fake).start()
    try:
        step(again, hub, at, MINUTE, tabs=[("cap2", "")])  # the warning stands: not given twice
        assert again.service.culler.last_report.count("warn") == 0 and running(hub, "cap2")
        step(again, hub, at, MINUTE, tabs=[("cap2", "")])
        eventually(lambda: ended(ledger, held, "culled:budget"), "the cull for the budget")
        assert not running(hub, "cap2")
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


def test_a_service_restart_keeps_the_gpu_idle_clock(hub, svc, at, ledger, fake, token):
    """A GPU idle 6 minutes before the service restarts is warned at 8 and culled at 10 (its
    10-minute timeout), not 10 minutes after the restart: the clock is kept in the ledger."""
    held = spawn(hub, ledger, "ann", "a40")
    for _ in range(3):  # 6 minutes with the tab open and the GPU idle
        step(svc, hub, at, 2 * MINUTE, tabs=[("ann", "")])
    assert rules(ledger, "ann") == set()

    svc.stop()  # the service restarts: its utilisation history starts empty
    again = InProcessService(hub, token, nvml=fake).start()
    try:
        report = step(again, hub, at, 2 * MINUTE, tabs=[("ann", "")])  # 8 min of idle GPU
        assert report.count("warn") == 1 and rules(ledger, "ann") == {"gpu-idle"}
        report = step(again, hub, at, 2 * MINUTE, tabs=[("ann", "")])  # 10 min: the timeout
        assert report.count("cull") == 1
        eventually(lambda: ended(ledger, held, "culled:gpu-idle"), "the cull for the idle GPU")
    finally:
        again.stop()


def test_dry_run_logs_every_decision_and_stops_nothing(hub, svc, at, ledger, caplog):
    config = load_config_file(hub.config_path)
    dry = Culler(
        svc.service.state, svc.service.hub, GPULabService(config=config, cull_dry_run=True)
    )
    held = spawn(hub, ledger, "dan", "a40")
    caplog.set_level(logging.INFO, logger="gpulab.culler")
    for _ in range(8):  # 16 minutes: past the warning and the GPU timeout
        at.move(2 * MINUTE)
        svc.call(svc.service.sample)
        svc.call(dry.run_pass)

    assert running(hub, "dan") and ledger.get(held.id).open
    assert ledger.warnings("dan") == []
    lines = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("[dry-run] warn dan/''") and "rule=gpu-idle" in m for m in lines)
    assert any(m.startswith("[dry-run] cull dan/''") for m in lines)
    assert any(m.startswith("[dry-run] keep dan/''") for m in lines)


def test_a_user_at_the_keyboard_keeps_an_idle_gpu_until_someone_needs_one(
    hub, svc, at, ledger, fake
):
    """``c.GPULabService.gpu_idle_spare_active``: ann's tab stays open over an idle GPU past its
    10-minute timeout. While another GPU of her profile is free and nobody queues for hers, the
    culler's pass neither warns nor stops her; a user queued for her GPU's model brings the
    warning, their leaving takes it back, and once the lab's other GPUs are taken she is warned
    at once and stopped ``cull_warn_before`` (2 min) later."""
    fake.set_utilization(H100_UUID, gpu_percent=0)
    config = load_config_file(hub.config_path)
    spare = Culler(
        svc.service.state,
        svc.service.hub,
        GPULabService(config=config, gpu_idle_spare_active="10m"),
    )
    held = spawn(hub, ledger, "ann", "anygpu")
    tabs = [("ann", "")]

    def pass_(seconds=2 * MINUTE):
        return step(svc, hub, at, seconds, tabs=tabs, culler=spare)

    for _ in range(7):  # 14 minutes of an idle GPU: 4 past its timeout
        report = pass_()
        assert report.count("warn") == report.count("cull") == 0
    assert rules(ledger, "ann") == set() and running(hub, "ann")

    # ben queues for the very model ann holds (taken: the waitlist cannot offer him one)
    mine = ledger.slice_objects([held.slice_id])[held.slice_id]
    ledger.join_waitlist("ben", "anygpu", SliceRequest(SliceKind.GPU, model=mine.device_name))
    try:
        assert pass_(MINUTE).count("warn") == 1 and rules(ledger, "ann") == {"gpu-idle"}
    finally:
        ledger.leave_waitlist("ben")
    pass_(MINUTE)
    assert rules(ledger, "ann") == set() and running(hub, "ann")  # nobody waits: spared again

    anygpu = SliceRequest(kind=SliceKind.GPU)
    free, _ = ledger.capacity(anygpu)
    assert free >= 1  # the mixed lab's other whole GPUs
    for i in range(free):  # the last free GPUs of her profile are taken
        ledger.claim(anygpu, user=f"other{i}", profile="anygpu")
    report = pass_(MINUTE)
    assert report.count("warn") == 1 and rules(ledger, "ann") == {"gpu-idle"}
    stop_at = (at.now + timedelta(minutes=2)).strftime("%H:%M")
    ann = login(hub, "ann")
    assert f"Your server will be stopped at {stop_at} UTC" in home_announcement(ann, hub)

    assert pass_().count("cull") == 1
    eventually(lambda: ended(ledger, held, "culled:gpu-idle"), "the cull once a GPU is needed")
    assert not running(hub, "ann")


@pytest.mark.usefixtures("api_contract")  # the report's answers match the OpenAPI document
def test_a_tab_left_open_loses_the_spare_once_jupyterlab_reports_no_keystrokes(
    hub, svc, at, ledger, fake
):
    """The JupyterLab extension's report (``POST …/interaction``, with the user's own token as
    the server extension asks): ann types in the page, then leaves the tab open over an idle
    GPU. The hub keeps seeing the tab, but the spare (``gpu_idle_spare_active`` 10 min) asks
    the keyboard: 10 minutes after her last keystroke the GPU-idle rule is back with its clock
    and warns her, although a GPU of her kind is free and nobody queues. Reports for someone
    else's server, from the future or from long ago are refused and move nothing."""
    fake.set_utilization(H100_UUID, gpu_percent=0)
    config = load_config_file(hub.config_path)
    spare = Culler(
        svc.service.state,
        svc.service.hub,
        GPULabService(config=config, gpu_idle_spare_active="10m"),
    )
    spawn(hub, ledger, "ann", "anygpu")
    api = hub.url + PREFIX + "api/users/"
    ann = {"Authorization": f"token {user_token(hub, login(hub, 'ann'), 'ann')}"}
    ben = {"Authorization": f"token {user_token(hub, login(hub, 'ben'), 'ben')}"}

    def report(when, headers=ann, path="ann/server/interaction"):
        at_text = when.isoformat() if isinstance(when, datetime) else when
        return requests.post(api + path, json={"at": at_text}, headers=headers, timeout=30)

    def pass_(seconds=2 * MINUTE):
        return step(svc, hub, at, seconds, tabs=[("ann", "")], culler=spare)

    for _ in range(5):  # 10 minutes of typing over an idle GPU: spared, as without the report
        assert pass_().count("warn") == 0
        r = report(at.now)
        assert r.status_code == 200 and r.json()["at"] == at.now.isoformat(), r.text
    typed = at.now
    # refused: another user's server, a time ahead of the clock or a day old, not a time
    refused = [
        report(at.now, headers=ben),
        report(at.now + timedelta(minutes=10)),
        report(at.now - timedelta(days=2)),
        report("soon"),
        report("2026-12-07T10:00:00"),  # no zone
    ]
    assert [r.status_code for r in refused] == [403, 400, 400, 400, 400], [r.text for r in refused]
    assert "Only 'ann' may report" in refused[0].json()["message"]
    assert "ahead of the service's clock" in refused[1].json()["message"]
    r = requests.get(api + "ann/server/interaction", headers=ann, timeout=30)
    assert r.json()["at"] == typed.isoformat()  # none of them moved it
    # she stops typing; the tab stays open (the hub's activity goes on)
    for _ in range(4):  # 8 minutes after the last keystroke: still at the keyboard
        assert pass_().count("warn") == 0
    last = pass_(3 * MINUTE)  # 11 minutes: gone; the GPU idle for 21 min, past its 10
    assert last.count("warn") == 1 and rules(ledger, "ann") == {"gpu-idle"}
    assert running(hub, "ann")


def test_a_server_whose_stop_fails_does_not_stop_the_pass(hub, svc, at, ledger, caplog):
    hub.create_user("researcher", ["researchers"])
    theirs = spawn(hub, ledger, "researcher", "a40")
    mine = spawn(hub, ledger, "dan", "p40")
    tabs = [("researcher", ""), ("dan", "")]
    for _ in range(4):
        step(svc, hub, at, 2 * MINUTE, tabs=tabs)
    assert rules(ledger, "researcher") == rules(ledger, "dan") == {"gpu-idle"}

    report = step(svc, hub, at, 2 * MINUTE, tabs=tabs)

    assert [f[0] for f in report.failures] == ["researcher"]  # the hub refused (403)
    assert "failed, will retry next pass" in caplog.text
    eventually(lambda: ended(ledger, mine, "culled:gpu-idle"), "dan's cull")
    assert not running(hub, "dan")
    assert running(hub, "researcher") and ledger.get(theirs.id).open
    assert rules(ledger, "researcher") == {"gpu-idle"}  # still warned; tried again next pass


def test_usage_per_group_and_user_with_its_csv_export(hub, svc, at, ledger):
    at.move(60 * DAY)  # two months on: a period no other test used the GPUs in
    history(ledger, at, "ann", "A40", 30 * MINUTE, "students")
    history(ledger, at, "cap", "A40", 6 * MINUTE, "capped")
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


def test_an_admin_cannot_release_the_slice_of_a_running_server(hub, svc, at, ledger):
    """Found by a fresh reviewer: releasing a running server's allocation let a second user take
    the GPU its container still used. The service now refuses (409) until the server stops."""
    from jupyterhub_gpulab.service import actions

    a = spawn(hub, ledger, "ann", "a40")

    def release():
        return actions.release(svc.service.state, svc.service.hub, a.id, by="admin")

    with pytest.raises(actions.ActionError) as e:
        svc.call(release)
    assert e.value.status == 409
    assert "Stop the server instead" in e.value.message
    assert ledger.get(a.id).open
    hub.stop_server("ann")
    assert ended(ledger, a, "stopped")  # the spawner released it with the stop
    with pytest.raises(actions.ActionError) as e:
        svc.call(release)
    assert e.value.status == 409 and "already closed (stopped)" in e.value.message

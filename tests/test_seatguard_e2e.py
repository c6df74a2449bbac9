"""The seat guard as a student meets it: a real hub (subprocess, real proxy) runs GPUDockerSpawner
with real containers on the fake P40 split into 1 GiB seats (``hub_fakes.py``); the gpulab
service runs in this process with the fake NVML, which reports a real process of the student's
container (found through the host's ``/proc``) over the seat's cap. The service's own sampling
pass (``Service.sample``) runs the guard: the student is warned on the hub's home page, then the
process is ended in the container (the server keeps running), or, with ``stop-server``, the
server is stopped through the hub and its allocation ends ``culled:seat-memory``."""

from __future__ import annotations

import secrets
import subprocess
import time
from pathlib import Path

import hub_fakes
import pytest
from culling_support import eventually, home_announcement, running
from e2e_support import IMAGE, require_docker
from fake_nvml import P40_UUID, FakeNVML, FakeProcess, GiB
from html_support import parse_html
from inprocess_support import InProcessService, inprocess_service_hub
from leakcheck import unique
from ledger_support import empty_lab
from service_support import PREFIX, login

pytestmark = pytest.mark.docker

SEAT = {"slug": "seat", "display_name": "P40 seat", "image": IMAGE, "slice": {"kind": "shared"}}


def config(node: str) -> str:
    return f"""
c.JupyterHub.spawner_class = "gpulab"
c.GPUDockerSpawner.attach_mode = "env"
c.DockerSpawner.image = {IMAGE!r}
c.DockerSpawner.pull_policy = "never"
c.DockerSpawner.prefix = {node!r}
c.Spawner.start_timeout = 90
c.Spawner.http_timeout = 60
c.GPULab.node_name = {node!r}
c.GPULab.inventory = []
c.GPULab.inventory_source = "nvml"
c.GPULab.shared_devices = {{{P40_UUID!r}: {{"seats": 4, "memory_per_seat": "1GiB",
                                             "compute_share": 0.25}}}}
c.GPULab.profiles = {[SEAT]!r}
c.GPULab.group_policies = {{}}
c.GPULab.seat_overuse_grace = "10s"
c.GPULabService.cull_every = "1h"
c.GPULabService.sample_interval = 3600  # the test runs each sampling pass itself
"""


@pytest.fixture(scope="module")
def token():
    return secrets.token_hex(16)


@pytest.fixture(scope="module")
def hub(tmp_path_factory, token):
    require_docker()
    node = unique("gpulabseat")
    with inprocess_service_hub(
        tmp_path_factory.mktemp("seatguard-hub"), token, extra=config(node),
        users={"sam": []}, nvml=FakeNVML.mixed_lab(), fakes=True, node=node,
    ) as hub:  # fmt: skip
        yield hub


@pytest.fixture
def clock_file(hub):
    return hub.config_path.with_name(hub_fakes.CLOCK_FILE)


@pytest.fixture
def fake():
    return FakeNVML.mixed_lab()


@pytest.fixture
def svc(hub, token, fake, at, ledger):
    svc = InProcessService(hub, token, nvml=fake).start()
    yield svc
    svc.stop()
    empty_lab(hub, ledger, users={"sam"}, warnings=True)


def start_seat(hub, ledger):
    r = hub.spawn("sam", {"profile": "seat"})
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("sam", "", timeout=90)
    [held] = ledger.open_allocations("sam")
    assert held.slice_id.startswith(P40_UUID) and held.container_id
    return held


def hungry_process(container: str) -> int:
    """Start ``sleep 301`` in ``container`` (standing in for a program that took GPU memory past
    its seat) and return its host pid, found through the host's /proc."""
    subprocess.run(["docker", "exec", "-d", container, "sleep", "301"], check=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            try:
                if (
                    entry.name.isdigit()
                    and container[:12] in (entry / "cgroup").read_text()
                    and (entry / "cmdline").read_bytes() == b"sleep\x00301\x00"
                ):
                    return int(entry.name)
            except OSError:
                continue
        time.sleep(0.1)
    raise AssertionError("the process did not start")


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_process_over_its_seat_is_warned_then_ended_and_the_server_keeps_running(
    hub, svc, at, ledger, fake
):
    held = start_seat(hub, ledger)
    pid = hungry_process(held.container_id)
    fake.set_processes(P40_UUID, [FakeProcess(pid, 2 * GiB, 60)])
    svc.call(svc.service.sample)
    session = login(hub, "sam")
    assert "Your GPU seat uses 2 GiB of its 1 GiB cap" in home_announcement(session, hub)
    # My GPU and the admin page say what holds the seat's cap, and its use as the host sees it
    mine = parse_html(session.get(hub.url + PREFIX + "me", timeout=30).text)
    check = mine.find("dd", cls="seat-check")
    assert check.attrs["data-check"] == "framework-capped, host-enforced"
    assert "GPU memory 2 of 1 GiB" in check.text()
    admin = parse_html(login(hub, "admin").get(hub.url + PREFIX, timeout=30).text)
    chips = [c.attrs["data-check"] for c in admin.find_all("span", cls="seat-check")]
    assert chips == ["framework-capped, host-enforced"] * 4  # the P40's four seats
    row = admin.find("small", cls="seat-check")
    assert "GPU memory 2 of 1 GiB" in row.text()
    at.move(5)
    svc.call(svc.service.sample)
    assert alive(pid)  # within the grace
    at.move(6)
    svc.call(svc.service.sample)
    eventually(lambda: not alive(pid), "the over-cap process ended", timeout=10)
    assert running(hub, "sam")
    notices = {w.rule: w.message for w in ledger.warnings("sam")}
    assert f"GPU process {pid} ended" in notices["ended:seat-memory"]
    assert "seat-memory" not in notices
    assert ledger.get(held.id).open


def test_with_stop_server_the_server_is_stopped_and_the_allocation_says_why(
    hub, svc, at, ledger, fake
):
    svc.service.seatguard.action = "stop-server"
    held = start_seat(hub, ledger)
    pid = hungry_process(held.container_id)
    fake.set_processes(P40_UUID, [FakeProcess(pid, 3 * GiB, 60)])
    svc.call(svc.service.sample)
    at.move(11)
    svc.call(svc.service.sample)
    eventually(lambda: not running(hub, "sam"), "the server stopped", timeout=60)
    eventually(
        lambda: ledger.get(held.id).end_reason == "culled:seat-memory",
        "the allocation ended culled:seat-memory",
    )
    [notice] = [w for w in ledger.warnings("sam") if w.rule == "culled:seat-memory"]
    assert "Your server was stopped: its GPU seat used 3 GiB of its 1 GiB cap" in notice.message

"""The service's seat guard against the fake NVML, a real ledger (SQLite) and a /proc laid out as
the host's: a seat over its cap is warned in the ledger (the culler's channel), then its
process is ended in its container through the engine seam, and the student is told why.

The engine here records what it is asked (the only stand-in: a real container's kill is
``test_a_real_containers_process_over_its_seat_is_killed`` below, marked ``docker``)."""

from __future__ import annotations

import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import pynvml
import pytest
from fake_nvml import P40_UUID, FakeNVML, FakeProcess, GiB
from traitlets.config import Config

from jupyterhub_gpulab.backends import Backend
from jupyterhub_gpulab.hubapi.client import HubClient
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.lab.config import GPULab
from jupyterhub_gpulab.ledger import Ledger
from jupyterhub_gpulab.service.seatguard import KILL, SeatGuard, container_pid
from jupyterhub_gpulab.service.state import LabState
from jupyterhub_gpulab.service.web.data import admin_data, user_data

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
A, B = "a" * 64, "b" * 64
SEAT = SliceRequest(kind=SliceKind.SHARED)


@pytest.fixture
def clock_start():
    return T0


class RecordingEngine(Backend):
    """The engine seam, recording the commands run in servers (exit code 0)."""

    def __init__(self):
        self.ran: list[tuple[str, list[str], str]] = []

    def exec_run(self, server, cmd, user=""):
        self.ran.append((server.id, list(cmd), user))
        return 0, b""

    def _no(self, *a, **k):
        raise AssertionError("the seat guard asked the engine for more than exec_run")

    servers = get_file = storage = image_labels = run_once = gateway = _no
    containers = inspect_container = info = _no
    create_server = start_server = remove_server = _no


def gpulab() -> GPULab:
    c = Config()
    c.GPULab.node_name = "node-a"
    c.GPULab.inventory_source = "nvml"
    c.GPULab.shared_devices = {
        P40_UUID: {"seats": 4, "memory_per_seat": "1GiB", "compute_share": 0.25}
    }
    c.GPULab.profiles = [
        {"slug": "seat", "display_name": "Seat", "image": "x", "slice": {"kind": "shared"}}
    ]
    c.GPULab.seat_overuse_grace = "10s"
    return GPULab(config=c)


def lay_proc(root: Path, pid: int, container: str, inner: int) -> None:
    """``/proc/<pid>`` as the host shows a process of ``container`` that is ``inner`` inside it."""
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "cgroup").write_text(f"0::/system.slice/docker-{container}.scope\n")
    (d / "status").write_text(
        f"Name:\tpython\nUid:\t1000\t1000\t1000\t1000\nNSpid:\t{pid}\t{inner}\n"
    )


@pytest.fixture
def lab(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'gpulab.sqlite'}", auto_upgrade=True)
    fake = FakeNVML.p40()
    proc = tmp_path / "proc"
    state = LabState(gpulab(), ledger, nvml=fake, proc_root=str(proc))
    state.sync()
    alice = ledger.claim(SEAT, user="alice", profile="seat").allocation
    bob = ledger.claim(SEAT, user="bob", profile="seat").allocation
    ledger.set_container(alice.id, A[:12])  # the ledger may hold a short id
    ledger.set_container(bob.id, B)
    lay_proc(proc, 4242, A, 17)
    lay_proc(proc, 5151, B, 23)
    engine = RecordingEngine()
    hub = HubClient("http://127.0.0.1:9/hub/api", "unused", timeout=2)  # not asked
    guard = SeatGuard(
        state, hub, grace_s=10, action="kill-process", proc_root=proc, backend=lambda: engine
    )
    yield fake, state, guard, engine, proc
    ledger.close()


async def step(state, guard, at, seconds):
    at.move(seconds)
    state.take_sample()
    return {v.seat.user: v for v in await guard.run()}


def rules(state, user):
    return {w.rule: w.message for w in state.ledger.warnings(user)}


async def test_a_seat_over_its_cap_is_warned_then_its_process_ended(lab, at):
    fake, state, guard, engine, _ = lab
    fake.set_processes(P40_UUID, [FakeProcess(4242, 2 * GiB, 50), FakeProcess(5151, GiB // 2, 5)])
    got = await step(state, guard, at, 0)
    assert got["alice"].action == "warn" and got["bob"].action == "ok"
    assert "2 GiB of its 1 GiB cap" in rules(state, "alice")["seat-memory"]
    assert rules(state, "bob") == {}
    await step(state, guard, at, 10)  # over for exactly the grace: still a warning
    assert engine.ran == []
    got = await step(state, guard, at, 5)
    assert got["alice"].action == "kill"
    # its pid inside the container, with the shell's kill (the image need not have /bin/kill),
    # as the process's own user (the server's root holds no capability to signal it)
    assert engine.ran == [(A[:12], [*KILL, "17"], "1000")]
    notices = rules(state, "alice")
    assert "seat-memory" not in notices
    assert "4242 ended" in notices["ended:seat-memory"]
    assert "for 15 s (grace 10 s)" in notices["ended:seat-memory"]


async def test_after_a_kill_a_seat_still_over_gets_a_new_grace_not_a_second_kill(lab, at):
    # the ended process's memory may show in the next read: the streak starts again
    fake, state, guard, engine, _ = lab
    fake.set_processes(P40_UUID, [FakeProcess(4242, 2 * GiB, 50)])
    await step(state, guard, at, 0)
    assert (await step(state, guard, at, 11))["alice"].action == "kill"
    assert (await step(state, guard, at, 5))["alice"].action == "warn"
    assert len(engine.ran) == 1
    assert (await step(state, guard, at, 11))["alice"].action == "kill"


async def test_a_dry_run_logs_what_it_would_do_and_changes_nothing(lab, at, caplog):
    fake, state, guard, engine, _ = lab
    guard.dry_run = True
    fake.set_processes(P40_UUID, [FakeProcess(4242, 2 * GiB, 50)])
    caplog.set_level("INFO", logger="gpulab.seatguard")
    await step(state, guard, at, 0)
    assert (await step(state, guard, at, 11))["alice"].action == "kill"
    assert engine.ran == [] and rules(state, "alice") == {}
    assert "[dry-run]: would kill alice/''" in caplog.text


async def test_a_warning_clears_when_the_seat_is_back_under_its_cap(lab, at):
    fake, state, guard, engine, _ = lab
    fake.set_processes(P40_UUID, [FakeProcess(4242, 2 * GiB, 50)])
    await step(state, guard, at, 0)
    assert "seat-memory" in rules(state, "alice")
    fake.set_processes(P40_UUID, [FakeProcess(4242, GiB // 2, 50)])
    await step(state, guard, at, 5)
    assert rules(state, "alice") == {} and engine.ran == []


async def test_another_containers_process_is_never_counted_nor_ended(lab, at):
    fake, state, guard, engine, proc = lab
    lay_proc(proc, 6000, "c" * 64, 9)  # a container holding no seat of this lab
    fake.set_processes(P40_UUID, [FakeProcess(6000, 8 * GiB, 90), FakeProcess(4242, GiB, 5)])
    for _ in range(4):
        got = await step(state, guard, at, 10)
    assert {u: v.action for u, v in got.items()} == {"alice": "ok", "bob": "ok"}
    assert engine.ran == [] and rules(state, "alice") == {}


async def test_a_pid_reused_by_another_container_before_the_kill_is_spared(lab, at):
    fake, state, guard, engine, proc = lab
    fake.set_processes(P40_UUID, [FakeProcess(4242, 2 * GiB, 50)])
    await step(state, guard, at, 0)
    at.move(15)
    state.take_sample()
    lay_proc(proc, 4242, B, 31)  # the process ended and its pid went to bob's container
    got = {v.seat.user: v for v in await guard.run()}
    assert got["alice"].action == "kill" and engine.ran == []


async def test_a_containers_pid_1_over_its_seat_stops_the_server_instead(lab, at, caplog):
    # no signal sent from inside its pid namespace ends a container's init
    fake, state, guard, engine, proc = lab
    lay_proc(proc, 4242, A, 1)
    fake.set_processes(P40_UUID, [FakeProcess(4242, 2 * GiB, 50)])
    await step(state, guard, at, 0)
    await step(state, guard, at, 11)
    assert engine.ran == []
    assert "pid 1; stopping the server instead" in caplog.text
    assert "cannot kill alice/''" in caplog.text  # the hub (unreachable here) was asked


async def test_on_a_vgpu_guest_seats_are_soft_and_the_pages_say_so(lab, at):
    fake, state, guard, engine, _ = lab
    fake.gpus[0].running_processes_error = pynvml.NVML_ERROR_NOT_SUPPORTED
    fake.set_processes(P40_UUID, [FakeProcess(4242, 4 * GiB, 50)])
    for _ in range(4):
        got = await step(state, guard, at, 10)
    assert got["alice"].action == "soft" and engine.ran == []
    hub = guard.hub
    data = await admin_data(state, hub, parts=("inventory", "allocations"))
    chips = [s for d in data["inventory"]["nodes"][0]["devices"] for s in d["slices"]]
    assert {s["seat_check"] for s in chips} == {"soft"}
    assert {a["seat_check"] for a in data["allocations"]} == {"soft"}


async def test_where_the_host_reads_seats_the_pages_show_use_against_the_cap(lab, at):
    fake, state, guard, _, _ = lab
    fake.set_processes(P40_UUID, [FakeProcess(4242, int(0.8 * GiB), 50)])
    await step(state, guard, at, 0)
    me = await user_data(state, guard.hub, {"name": "alice", "groups": []})
    [mine] = me["slices"]
    assert mine["seat_check"] == "framework-capped, host-enforced"
    assert mine["seat_memory"] == "GPU memory 0.8 of 1 GiB"
    data = await admin_data(state, guard.hub, parts=("inventory", "allocations"))
    chips = {s["holder"]: s for d in data["inventory"]["nodes"][0]["devices"] for s in d["slices"]}
    assert chips["alice"]["seat_check"] == "framework-capped, host-enforced"
    assert chips["alice"]["seat_memory"] == "GPU memory 0.8 of 1 GiB"
    rows = {a["user"]: a for a in data["allocations"]}
    assert rows["alice"]["seat_memory"] == "GPU memory 0.8 of 1 GiB"
    assert rows["bob"]["seat_memory"] == "GPU memory 0 of 1 GiB"


async def test_metrics_export_each_seats_use_cap_and_whether_the_host_enforces_it(lab, at):
    from metrics_support import samples, value

    from jupyterhub_gpulab.service.metrics import Exposition

    fake, state, guard, _, _ = lab
    fake.set_processes(P40_UUID, [FakeProcess(4242, int(0.8 * GiB), 50)])
    await step(state, guard, at, 0)
    seat = next(a.slice_id for a in state.ledger.open_allocations("alice"))
    labels = {"node": "node-a", "slice": seat, "kind": "shared", "device_index": "0"}
    m = samples(Exposition(state).render().decode())
    assert value(m, "gpulab_slice_memory_used_bytes", **labels) == int(0.8 * GiB)
    assert value(m, "gpulab_seat_memory_cap_bytes", **labels) == GiB
    assert value(m, "gpulab_seat_host_enforced", **labels) == 1
    fake.gpus[0].running_processes_error = pynvml.NVML_ERROR_NOT_SUPPORTED
    await step(state, guard, at, 10)
    m = samples(Exposition(state).render().decode())
    assert value(m, "gpulab_seat_host_enforced", **labels) == 0
    assert value(m, "gpulab_slice_memory_used_bytes", **labels) is None


def test_container_pid_reads_the_innermost_namespace(tmp_path):
    lay_proc(tmp_path, 4242, A, 17)
    assert container_pid(4242, tmp_path) == 17
    assert container_pid(999, tmp_path) is None


# -- a real container -----------------------------------------------------------------------------


def _host_pid_of(container: str, cmd: str, timeout: float = 10) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if container in (entry / "cgroup").read_text() and (
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").strip() == cmd.encode()
                ):
                    return int(entry.name)
            except OSError:
                continue
        time.sleep(0.1)
    raise AssertionError(f"no process {cmd!r} in container {container[:12]}")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.docker
async def test_a_real_containers_process_over_its_seat_is_killed(lab, at):
    from e2e_support import IMAGE, require_docker
    from leakcheck import unique

    from jupyterhub_gpulab.backends.dockerengine import DockerBackend, Engine, api_client

    require_docker()
    fake, state, guard, _, _ = lab
    name = unique("gpulabseat")
    run = subprocess.run(
        ["docker", "run", "-d", "--rm", "--name", name, IMAGE, "sleep", "300"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    cid = run.stdout.strip()
    try:
        subprocess.run(["docker", "exec", "-d", cid, "sleep", "301"], check=True)
        pid = _host_pid_of(cid, "sleep 301")
        [alice] = state.ledger.open_allocations("alice")
        state.ledger.set_container(alice.id, cid)
        guard.proc_root = state.monitor.proc_root = "/proc"  # the real host's
        guard._backend_factory = lambda: DockerBackend(Engine(api_client))
        fake.set_processes(P40_UUID, [FakeProcess(pid, 3 * GiB, 80)])
        assert (await step(state, guard, at, 0))["alice"].action == "warn"
        assert _alive(pid)
        got = await step(state, guard, at, 11)
        assert got["alice"].action == "kill" and got["alice"].pids == (pid,)
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid), "the over-cap process still runs"
        top = subprocess.run(["docker", "top", cid], capture_output=True, text=True)
        assert "sleep 300" in top.stdout  # the server itself keeps running
        assert "ended:seat-memory" in rules(state, "alice")
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)

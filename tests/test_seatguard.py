"""Seat caps the host enforces: the pure decision (fairuse/seatguard.py), the monitor's per-process
reads against the fake NVML (graphics processes, NOT_SUPPORTED on vGPU guests, unknown memory),
and how the pages word a seat ("framework-capped, host-enforced" or "soft")."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pynvml
import pytest
from fake_nvml import P40_UUID, FakeNVML, FakeProcess, GiB, p40_gpu

from jupyterhub_gpulab.fairuse.seatguard import DeviceRead, HeldSeat, HostProcess, judge
from jupyterhub_gpulab.inventory import SharedSettings, Utilization, discover
from jupyterhub_gpulab.service.monitor import UtilizationMonitor
from jupyterhub_gpulab.service.web.seatview import HOST_ENFORCED, SOFT, seat_view

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
A, B = "a" * 64, "b" * 64
SEAT = HeldSeat(f"{P40_UUID}/seat-0", P40_UUID, GiB, A[:12], "alice", "")


def reads(*figures, step=5.0, container=A):
    """One read every ``step`` seconds from T0; each figure is the seat's pid 100's bytes, or a
    DeviceRead as is."""
    out = []
    for i, f in enumerate(figures):
        at = T0 + timedelta(seconds=i * step)
        if isinstance(f, DeviceRead):
            out.append(DeviceRead(at, f.readable, f.processes))
        else:
            out.append(DeviceRead(at, True, (HostProcess(100, container, f),)))
    return out


def t(seconds):
    return T0 + timedelta(seconds=seconds)


# -- the decision --------------------------------------------------------------------------------


def test_within_the_cap_nothing_happens():
    v = judge(SEAT, reads(GiB // 2, GiB), t(5), grace_s=10)
    assert (v.action, v.used_bytes) == ("ok", GiB)  # exactly the cap is within it


def test_over_the_cap_is_warned_until_the_grace_has_passed_then_the_process_is_ended():
    over = int(1.5 * GiB)
    series = reads(over, over, over, over)  # at 0, 5, 10, 15 s
    warned = judge(SEAT, series[:3], t(10), grace_s=10)  # over for exactly the grace
    assert warned.action == "warn"
    assert "1.5 GiB of its 1 GiB cap" in warned.message and "0 s" in warned.message
    ended = judge(SEAT, series, t(15), grace_s=10)  # over for longer than the grace
    assert (ended.action, ended.pids) == ("kill", (100,))
    assert "for 15 s (grace 10 s)" in ended.reason


def test_stop_server_stops_instead():
    over = 2 * GiB
    v = judge(SEAT, reads(over, over, over), t(10), grace_s=5, action="stop-server")
    assert (v.action, v.pids) == ("stop", ())
    assert "server was stopped" in v.message


def test_a_read_back_under_the_cap_starts_the_grace_again():
    over = 2 * GiB
    v = judge(SEAT, reads(over, over, over, GiB // 2, over, over), t(25), grace_s=10)
    assert (v.action, v.over_s) == ("warn", 5.0)  # over since the read at 20 s only


def test_other_containers_processes_are_not_counted():
    mine = HostProcess(100, A, GiB // 2)
    theirs = HostProcess(200, B, 8 * GiB)
    nobody = HostProcess(300, None, 8 * GiB)  # outside Docker: the host's own process
    read = DeviceRead(T0, True, (mine, theirs, nobody))
    series = [DeviceRead(t(i * 5), True, read.processes) for i in range(5)]
    v = judge(SEAT, series, t(20), grace_s=5)
    assert (v.action, v.used_bytes) == ("ok", GiB // 2)


def test_only_the_largest_processes_are_ended_until_the_rest_fit():
    procs = (HostProcess(100, A, GiB // 4), HostProcess(101, A, GiB), HostProcess(102, A, GiB // 2))
    series = [DeviceRead(t(i * 5), True, procs) for i in range(4)]
    v = judge(SEAT, series, t(15), grace_s=10)
    assert v.pids == (101,)  # 0.75 GiB left fits the 1 GiB cap


def test_not_supported_seats_are_soft_and_never_acted_on():
    over = 4 * GiB
    series = reads(over, over, over, DeviceRead(T0, False))  # NVML stopped answering per process
    v = judge(SEAT, series, t(15), grace_s=5)
    assert (v.action, v.pids, v.used_bytes) == ("soft", (), None)


def test_a_process_of_unknown_memory_is_never_ended_nor_counted():
    unknown = HostProcess(100, A, None)  # pynvml's usedGpuMemory = None
    series = [DeviceRead(t(i * 5), True, (unknown,)) for i in range(6)]
    v = judge(SEAT, series, t(25), grace_s=5)
    assert (v.action, v.unknown_pids) == ("ok", (100,))
    # next to a known process over the cap, only the known one is ended
    known = HostProcess(101, A, 2 * GiB)
    series = [DeviceRead(t(i * 5), True, (unknown, known)) for i in range(4)]
    v = judge(SEAT, series, t(15), grace_s=5)
    assert (v.action, v.pids, v.unknown_pids) == ("kill", (101,), (100,))


def test_an_unknown_action_is_refused():
    with pytest.raises(ValueError, match="kill-process, stop-server"):
        judge(SEAT, reads(GiB), t(0), grace_s=5, action="reboot")


# -- the monitor's reads, against the fake NVML --------------------------------------------------


@pytest.fixture
def clock_start():
    return T0


def _proc(root, pid, container):
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "cgroup").write_text(f"0::/system.slice/docker-{container}.scope\n")


@pytest.fixture
def p40_seats(tmp_path):
    fake = FakeNVML([p40_gpu()])
    inv = discover(nvml=fake, shared={P40_UUID: SharedSettings(24, GiB, 1 / 24)})
    ids = [s.id for s in inv.slices]
    _proc(tmp_path, 100, A)
    _proc(tmp_path, 101, A)
    _proc(tmp_path, 200, B)
    return fake, inv, ids, UtilizationMonitor(nvml=fake, proc_root=tmp_path)


def test_the_monitor_counts_compute_and_graphics_processes_per_container(p40_seats, at):
    fake, inv, ids, monitor = p40_seats
    fake.set_processes(
        P40_UUID,
        [
            FakeProcess(100, GiB // 2, 10),
            FakeProcess(101, GiB // 4, None, graphics=True),  # a Vulkan/OpenGL context
            FakeProcess(200, 3 * GiB, 10),
        ],
    )
    got = monitor.sample(inv, {ids[0]: A, ids[1]: B})
    assert got[ids[0]].memory_used_bytes == GiB // 2 + GiB // 4
    assert got[ids[0]].host_checked is True
    read = monitor.process_reads[P40_UUID]
    assert read.readable
    assert {(p.pid, p.container) for p in read.processes} == {(100, A), (101, A), (200, B)}


def test_a_vgpu_guest_not_supported_makes_every_seat_soft(p40_seats, at):
    fake, inv, ids, monitor = p40_seats
    fake.gpus[0].running_processes_error = pynvml.NVML_ERROR_NOT_SUPPORTED
    fake.set_processes(P40_UUID, [FakeProcess(100, 4 * GiB, 10)])
    got = monitor.sample(inv, {ids[0]: A})
    assert (got[ids[0]].memory_used_bytes, got[ids[0]].host_checked) == (None, False)
    assert monitor.process_reads[P40_UUID].readable is False
    assert seat_view("shared", GiB, got[ids[0]]) == {"seat_check": SOFT, "seat_memory": None}


def test_memory_nvml_does_not_report_reaches_the_decision_as_unknown(p40_seats, at):
    fake, inv, ids, monitor = p40_seats
    fake.set_processes(P40_UUID, [FakeProcess(100, None, 10)])
    monitor.sample(inv, {ids[0]: A})
    (proc,) = monitor.process_reads[P40_UUID].processes
    assert (proc.pid, proc.memory_bytes) == (100, None)


def test_pages_word_host_checked_seats_with_their_use():
    u = Utilization(None, int(0.8 * GiB), host_checked=True)
    assert seat_view("shared", GiB, u) == {
        "seat_check": HOST_ENFORCED,
        "seat_memory": "GPU memory 0.8 of 1 GiB",
    }
    assert seat_view("mig", GiB, u) == {"seat_check": None, "seat_memory": None}
    assert seat_view("shared", GiB, None)["seat_check"] == SOFT


# -- the JupyterLab status bar ---------------------------------------------------------------------


def _summary():
    """The status bar's pure summariser (images/jupyterlab-gpulab), loaded from its file."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "images/jupyterlab-gpulab/jupyterlab_gpulab/summary.py"
    spec = importlib.util.spec_from_file_location("gpulab_status_summary", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.summarise


def test_the_status_bar_shows_the_hosts_view_of_the_seat_and_its_warning():
    seat = {
        "kind": "shared", "memory_bytes": GiB, "isolation": "soft",
        "seat_check": HOST_ENFORCED, "seat_memory": "GPU memory 0.8 of 1 GiB",
    }  # fmt: skip
    me = {"servers": [{"name": "", "slice": seat}], "gpu_hours": {"used_hours": 1.0}}
    out = _summary()(me, "", {})
    assert "GPU memory 0.8 of 1 GiB" in out["text"] and out["level"] == "ok"
    assert f"Seat cap: {HOST_ENFORCED}" in out["title"]
    warned = {
        **me,
        "warnings": [
            {"rule": "seat-memory", "server_name": "", "message": "Free GPU memory within 5 s"}
        ],
    }
    out = _summary()(warned, "", {})
    assert out["level"] == "low" and "OVER its GPU memory cap" in out["text"]
    assert out["title"].startswith("Free GPU memory within 5 s")


# -- the settings -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        ("seat_overuse_action", "reboot", "c.GPULab.seat_overuse_action 'reboot' is unknown; "
         "use one of 'kill-process', 'stop-server'"),
        ("seat_overuse_grace", "-5s", "c.GPULab.seat_overuse_grace '-5s' is not a duration"),
    ],
)  # fmt: skip
def test_a_bad_setting_is_refused_naming_what_it_takes(setting, value, says):
    from traitlets import TraitError
    from traitlets.config import Config

    from jupyterhub_gpulab.lab.config import GPULab

    c = Config()
    setattr(c.GPULab, setting, value)
    with pytest.raises(TraitError) as e:
        GPULab(config=c)
    assert says in str(e.value)


def test_the_settings_default_to_a_short_grace_and_ending_the_process():
    from jupyterhub_gpulab.lab.config import GPULab

    lab = GPULab()
    assert (lab.seat_overuse_grace, lab.seat_overuse_action) == (10.0, "kill-process")

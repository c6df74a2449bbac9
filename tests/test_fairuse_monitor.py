"""The utilisation monitor against the fake NVML: what each kind of slice reports, processes mapped
to containers through a fake /proc, bounded history, and the culler fed by real samples."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from fake_nvml import (
    A100_MIGS,
    H100_UUID,
    P40_UUID,
    FakeNVML,
    FakeProcess,
    GiB,
    h100_gpu,
    p40_gpu,
)

from jupyterhub_gpulab.fairuse.culler import Limits, Server, Settings, decide, next_warnings
from jupyterhub_gpulab.inventory import Inventory, SharedSettings, discover
from jupyterhub_gpulab.service.monitor import UtilizationMonitor, container_of_pid

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
CID_A = "a" * 64
CID_B = "b" * 64
CID_C = "c" * 64


@pytest.fixture
def clock_start():
    """Where ``at`` (conftest.py), the monitor's and the fake NVML's clock, starts."""
    return T0


def fake_proc(root, pid: int, cgroup: str) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "cgroup").write_text(cgroup)


@pytest.mark.parametrize(
    ("cgroup", "expected"),
    [
        pytest.param(
            f"12:devices:/docker/{CID_A}\n11:memory:/docker/{CID_A}\n", CID_A, id="cgroup-v1"
        ),
        pytest.param(f"0::/system.slice/docker-{CID_A}.scope\n", CID_A, id="cgroup-v2-systemd"),
        pytest.param(f"0::/docker/{CID_A}\n", CID_A, id="cgroup-v2-cgroupfs"),
        pytest.param(f"0::/docker/{CID_A}/docker/{CID_B}\n", CID_B, id="nested-docker-innermost"),
        pytest.param("0::/user.slice/user-1000.slice/session-2.scope\n", None, id="host-process"),
        pytest.param(
            f"0::/kubepods/burstable/pod1/cri-containerd-{CID_A}.scope\n", None, id="not-docker"
        ),
        pytest.param(f"0::/docker/{CID_A[:12]}\n", None, id="short-id-is-not-an-id"),
    ],
)
def test_container_of_pid(tmp_path, cgroup, expected):
    fake_proc(tmp_path, 4242, cgroup)
    assert container_of_pid(4242, tmp_path) == expected


def test_container_of_a_vanished_pid_is_none(tmp_path):
    assert container_of_pid(99999, tmp_path) is None


def test_whole_gpus_report_utilisation_and_memory(at):
    fake = FakeNVML([p40_gpu(), h100_gpu()])
    fake.set_utilization(P40_UUID, gpu_percent=40, memory_used=2 * GiB)
    fake.set_utilization(H100_UUID, gpu_percent=75, memory_used=10 * GiB)
    monitor = UtilizationMonitor(nvml=fake)
    inv = discover(nvml=fake)
    got = monitor.sample(inv, {})
    assert (got[P40_UUID].gpu_percent, got[P40_UUID].memory_used_bytes) == (40, 2 * GiB)
    assert (got[H100_UUID].gpu_percent, got[H100_UUID].memory_used_bytes) == (75, 10 * GiB)
    assert got[P40_UUID].at == T0


def test_hopper_mig_devices_report_their_own_busy_share(at):
    fake = FakeNVML.h100_mig_lab(1)
    inv = discover(nvml=fake)
    busy, idle = inv.slices[0].id, inv.slices[1].id
    fake.set_utilization(busy, gpu_percent=60, memory_used=3 * GiB)
    monitor = UtilizationMonitor(nvml=fake)
    first = monitor.sample(inv, {})
    at.move(10)
    second = monitor.sample(inv, {})
    assert first[busy].gpu_percent is None  # one GPM sample gives no rate yet
    assert (second[busy].gpu_percent, second[busy].memory_used_bytes) == (60, 3 * GiB)
    assert second[idle].gpu_percent == 0
    assert len(monitor.history(busy)) == 2


def test_ampere_mig_devices_have_no_utilisation(at):
    fake = FakeNVML.a100_mig_mixed()
    fake.set_utilization(A100_MIGS[0][0], gpu_percent=60, memory_used=3 * GiB)
    monitor = UtilizationMonitor(nvml=fake)
    inv = discover(nvml=fake)
    for _ in range(3):
        got = monitor.sample(inv, {})
        at.move(10)
    assert got[A100_MIGS[0][0]].gpu_percent is None
    assert got[A100_MIGS[0][0]].memory_used_bytes == 3 * GiB


@pytest.fixture
def seats(tmp_path):
    """An H100 split in 4 seats; seat 0 held by container A, seat 1 by B, seats 2-3 free."""
    fake = FakeNVML([h100_gpu()])
    inv = discover(nvml=fake, shared={H100_UUID: SharedSettings(4, 16 * GiB, 0.25)})
    ids = [s.id for s in inv.slices]
    fake_proc(tmp_path, 100, f"0::/system.slice/docker-{CID_A}.scope\n")
    fake_proc(tmp_path, 101, f"0::/system.slice/docker-{CID_A}.scope\n")
    fake_proc(tmp_path, 200, f"12:devices:/docker/{CID_B}\n")
    fake_proc(tmp_path, 300, "0::/user.slice/user-0.slice/session-1.scope\n")
    containers = {ids[0]: CID_A, ids[1]: CID_B[:12]}  # the ledger may hold a short id
    monitor = UtilizationMonitor(nvml=fake, proc_root=tmp_path)
    return fake, inv, ids, containers, monitor


def test_seats_get_their_containers_processes(seats, at):
    fake, inv, ids, containers, monitor = seats
    fake.set_processes(
        H100_UUID,
        [
            FakeProcess(100, GiB, 30),
            FakeProcess(101, 2 * GiB, 20, mps=True),
            FakeProcess(200, 4 * GiB, None),  # holds memory, runs no kernel
        ],
    )
    got = monitor.sample(inv, containers)
    assert (got[ids[0]].gpu_percent, got[ids[0]].memory_used_bytes) == (50, 3 * GiB)
    assert (got[ids[1]].gpu_percent, got[ids[1]].memory_used_bytes) == (0, 4 * GiB)
    assert got[ids[2]].gpu_percent == 0


def test_seats_whose_processes_ran_nothing_read_zero(seats, at):
    # NVML has no sample newer than the last read (NOT_FOUND): nothing ran, every seat is idle.
    fake, inv, ids, containers, monitor = seats
    fake.set_processes(H100_UUID, [FakeProcess(100, GiB, None), FakeProcess(200, GiB, None)])
    got = monitor.sample(inv, containers)
    assert [got[i].gpu_percent for i in ids[:2]] == [0, 0]
    assert [got[i].memory_used_bytes for i in ids[:2]] == [GiB, GiB]


def test_work_no_container_owns_makes_idle_seats_unknown(seats, at):
    fake, inv, ids, containers, monitor = seats
    fake.set_processes(H100_UUID, [FakeProcess(100, GiB, 30), FakeProcess(300, GiB, 40)])
    got = monitor.sample(inv, containers)
    assert got[ids[0]].gpu_percent == 30  # its own work is still its own
    assert got[ids[1]].gpu_percent is None  # 0 % might be the unattributed 40 %


def test_seats_without_per_process_utilisation_are_unknown(seats, at):
    fake, inv, ids, containers, monitor = seats
    fake.gpus[0].process_utilization_supported = False
    fake.set_processes(H100_UUID, [FakeProcess(100, GiB, 30)])
    got = monitor.sample(inv, containers)
    assert got[ids[0]].gpu_percent is None
    assert got[ids[0]].memory_used_bytes == GiB


def test_history_is_bounded_to_its_span(at):
    fake = FakeNVML([p40_gpu()])
    monitor = UtilizationMonitor(nvml=fake, span_s=60, interval_s=10)
    inv = discover(nvml=fake)
    for _ in range(20):
        monitor.sample(inv, {})
        at.move(10)
    history = monitor.history(P40_UUID)
    assert len(history) == 7
    assert history[-1].at - history[0].at == timedelta(seconds=60)


def test_slices_that_leave_the_inventory_are_forgotten(at):
    fake = FakeNVML.h100_mig_lab(2)
    inv = discover(nvml=fake)
    monitor = UtilizationMonitor(nvml=fake)
    monitor.sample(inv, {})
    monitor.sample(inv, {})
    smaller = Inventory(inv.devices[:1], inv.slices[:7], inv.source)
    monitor.sample(smaller, {})
    assert monitor.history(inv.slices[7].id) == ()
    assert len(fake.gpm_buffers) == 7  # one live GPM sample per slice still watched
    monitor.close()
    assert fake.gpm_buffers == {} and fake.refcount == 0


def test_without_nvml_every_figure_is_unknown(at):
    inv = discover(nvml=FakeNVML.h100_mig_lab(1))
    got = UtilizationMonitor(nvml=FakeNVML.library_missing()).sample(inv, {})
    assert {s.gpu_percent for s in got.values()} == {None}


# -- the culler fed by the monitor ----------------------------------------------------------------


def watch(fake, inv, slice_id, at, last_activity, hours, limits):
    """Sample every 10 s and decide every minute for ``hours``; return the cull decision."""
    monitor = UtilizationMonitor(nvml=fake, span_s=4 * 3600)
    settings = Settings(warn_before_s=600)
    started, warnings = at.now, {}
    for tick in range(int(hours * 360)):
        monitor.sample(inv, {})
        if tick % 6 == 0:
            server = Server(
                "ann", "", "pytorch-1g", started, limits,
                last_activity=last_activity(at.now), has_gpu=True,
                samples=monitor.history(slice_id),
            )  # fmt: skip
            d = decide(server, warnings, at.now, settings)
            if d.action == "cull":
                return d
            warnings = next_warnings(warnings, d)
        at.move(10)
    return None


LIMITS = Limits(idle_timeout=3600, gpu_idle_timeout=20 * 60, max_age=2 * 3600)


def test_open_tab_over_an_idle_mig_slice_is_culled_after_the_gpu_timeout(at):
    fake = FakeNVML.h100_mig_lab(1)
    inv = discover(nvml=fake)
    target = inv.slices[0].id
    d = watch(fake, inv, target, at, lambda now: now, hours=1, limits=LIMITS)
    assert d.rule == "gpu-idle"
    assert d.now - T0 <= timedelta(minutes=21)  # 20 minutes, give or take a pass


def test_closed_tab_over_a_busy_mig_slice_is_kept_until_max_age(at):
    fake = FakeNVML.h100_mig_lab(1)
    inv = discover(nvml=fake)
    target = inv.slices[0].id
    fake.set_utilization(target, gpu_percent=85)
    d = watch(fake, inv, target, at, lambda now: T0, hours=3, limits=LIMITS)
    assert d.rule == "max-age" and d.now == T0 + timedelta(hours=2)

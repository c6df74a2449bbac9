"""What real GPUs do that a naive fake would hide, against the fake that mimics pynvml: MIG devices
at scattered indices, GPM rates computed from two ordered samples, and each return code of the
per-process reads (see fake_nvml_sampling.py for what each call mimics)."""

from __future__ import annotations

from datetime import datetime, timezone

import pynvml
import pytest
from fake_nvml import (
    A100_UUID,
    H100_UUID,
    FakeNVML,
    FakeProcess,
    GiB,
    MiB,
    _a100_40gb_profiles,
    h100_gpu,
    mig_gpu,
)

from jupyterhub_gpulab.inventory import SharedSettings, SliceKind, discover
from jupyterhub_gpulab.inventory.nvml_sampling import GpmActivity, process_utilization
from jupyterhub_gpulab.service.monitor import UtilizationMonitor

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
CID_A = "a" * 64
CID_B = "b" * 64


@pytest.fixture
def clock_start():
    """Where ``at`` (conftest.py), the monitor's and the fake NVML's clock, starts."""
    return T0


# -- MIG devices at scattered indices -------------------------------------------------------------

SCATTERED = [
    ("MIG-5c1e7a90-aaaa-5b2c-9d3e-000000000001", "3g.20gb"),
    ("MIG-5c1e7a90-bbbb-5b2c-9d3e-000000000002", "1g.5gb"),
    ("MIG-5c1e7a90-cccc-5b2c-9d3e-000000000003", "1g.5gb"),
]


@pytest.mark.parametrize(
    "gap_error",
    [
        pytest.param(pynvml.NVML_ERROR_NOT_FOUND, id="not-found"),
        pytest.param(pynvml.NVML_ERROR_INVALID_ARGUMENT, id="invalid-argument"),
    ],
)
def test_mig_devices_at_scattered_indices_are_all_offered(gap_error):
    # instances destroyed and re-created leave holes below nvmlDeviceGetMaxMigDeviceCount (7)
    gpu = mig_gpu(
        A100_UUID,
        "NVIDIA A100-SXM4-40GB",
        40960 * MiB,
        _a100_40gb_profiles(),
        SCATTERED,
        positions=[1, 4, 6],
        gap_error=gap_error,
    )
    inv = discover(nvml=FakeNVML([gpu]))
    assert [d.uuid for d in inv.devices] == [A100_UUID]
    assert [(s.id, s.mig_profile) for s in inv.slices] == SCATTERED
    assert inv.warnings == ()


def test_a_mig_index_that_fails_otherwise_is_reported_and_the_rest_kept():
    gpu = mig_gpu(
        A100_UUID,
        "NVIDIA A100-SXM4-40GB",
        40960 * MiB,
        _a100_40gb_profiles(),
        SCATTERED,
        positions=[0, 1, 2],
        gap_error=pynvml.NVML_ERROR_NO_PERMISSION,
    )
    inv = discover(nvml=FakeNVML([gpu]))
    assert [s.id for s in inv.slices] == [m for m, _ in SCATTERED]
    assert [w for w in inv.warnings if "MIG device 3" in w and "NoPermission" in w]


# -- GPM: the busy share between two ordered samples ---------------------------------------------


def test_gpm_reports_the_busy_share_of_each_interval_not_the_rate_at_either_end(at):
    fake = FakeNVML.h100_mig_lab(1)
    target = discover(nvml=fake).slices[0]
    gpm = GpmActivity(fake)
    key = [(target.device_uuid, target.id)]
    fake.set_utilization(target.id, gpu_percent=60)
    assert gpm.read(key) == {target.id: None}  # one sample gives no rate
    at.move(10)
    assert gpm.read(key)[target.id] == pytest.approx(60)
    fake.set_utilization(target.id, gpu_percent=0)  # the run ends just after that read
    at.move(10)
    assert gpm.read(key)[target.id] == pytest.approx(0)
    at.move(5)
    fake.set_utilization(target.id, gpu_percent=80)  # busy for the second half of the interval
    at.move(5)
    assert gpm.read(key)[target.id] == pytest.approx(40)
    gpm.close()
    assert fake.gpm_buffers == {}


def test_a_whole_hopper_gpu_reads_its_interval_through_gpm(at):
    fake = FakeNVML([h100_gpu()])
    inv = discover(nvml=fake)
    monitor = UtilizationMonitor(nvml=fake)
    fake.set_utilization(H100_UUID, gpu_percent=90)
    monitor.sample(inv, {})
    at.move(10)
    fake.set_utilization(H100_UUID, gpu_percent=0)  # the rate now is 0; the interval was busy
    assert monitor.sample(inv, {})[H100_UUID].gpu_percent == pytest.approx(90)


def test_two_reads_within_nvmls_refresh_give_no_figure_rather_than_idle(at):
    # GPM refreshes every 100 ms: two samples of one refresh compute 0/0 (NaN), which must not
    # read as an idle GPU (the culler would stop a training run on it).
    fake = FakeNVML.h100_mig_lab(1)
    inv = discover(nvml=fake)
    busy = inv.slices[0].id
    fake.set_utilization(busy, gpu_percent=95)
    monitor = UtilizationMonitor(nvml=fake)
    monitor.sample(inv, {})
    at.move(0.05)
    assert monitor.sample(inv, {})[busy].gpu_percent is None
    at.move(10)
    assert monitor.sample(inv, {})[busy].gpu_percent == pytest.approx(95)


# -- per-process reads: every return code pynvml can raise ---------------------------------------


@pytest.fixture
def seats(tmp_path):
    """An H100 in 4 seats; seat 0 held by container A (pid 100), seat 1 by B (pid 200)."""
    fake = FakeNVML([h100_gpu()])
    inv = discover(nvml=fake, shared={H100_UUID: SharedSettings(4, 16 * GiB, 0.25)})
    assert {s.kind for s in inv.slices} == {SliceKind.SHARED}
    for pid, cid in ((100, CID_A), (200, CID_B)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(f"0::/system.slice/docker-{cid}.scope\n")
    ids = [s.id for s in inv.slices]
    monitor = UtilizationMonitor(nvml=fake, proc_root=tmp_path)
    return fake, inv, ids, {ids[0]: CID_A, ids[1]: CID_B}, monitor


def test_a_driver_that_answers_success_for_an_empty_read_means_nothing_ran(seats, at):
    # pynvml raises a bare NVMLError (value 0) when the size query answers NVML_SUCCESS
    fake, inv, ids, containers, monitor = seats
    fake.gpus[0].empty_process_read = pynvml.NVML_SUCCESS
    fake.set_processes(H100_UUID, [FakeProcess(100, GiB, None), FakeProcess(200, 2 * GiB, None)])
    got = monitor.sample(inv, containers)
    assert [got[i].gpu_percent for i in ids] == [0, 0, 0, 0]
    assert [got[i].memory_used_bytes for i in ids[:2]] == [GiB, 2 * GiB]


@pytest.mark.parametrize(
    "code",
    [
        pytest.param(pynvml.NVML_ERROR_UNKNOWN, id="unknown"),
        pytest.param(pynvml.NVML_ERROR_NO_PERMISSION, id="no-permission"),
        pytest.param(pynvml.NVML_ERROR_GPU_IS_LOST, id="gpu-lost"),
    ],
)
def test_a_failed_per_process_read_makes_the_seats_unknown_not_idle(seats, at, code):
    fake, inv, ids, containers, monitor = seats
    fake.gpus[0].process_read_error = code
    fake.set_processes(H100_UUID, [FakeProcess(100, GiB, 70), FakeProcess(200, GiB, None)])
    got = monitor.sample(inv, containers)
    assert [got[i].gpu_percent for i in ids] == [None] * 4
    assert got[ids[0]].memory_used_bytes == GiB  # the process list was still read


def test_a_refused_process_list_makes_the_device_unknown(seats, at):
    fake, inv, ids, containers, monitor = seats
    fake.gpus[0].running_processes_error = pynvml.NVML_ERROR_NO_PERMISSION
    fake.set_processes(H100_UUID, [FakeProcess(100, GiB, 30), FakeProcess(200, GiB, None)])
    got = monitor.sample(inv, containers)
    assert [(got[i].gpu_percent, got[i].memory_used_bytes) for i in ids] == [(None, None)] * 4


def test_the_fake_raises_what_pynvml_raises_for_each_code():
    fake = FakeNVML([h100_gpu()])
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByUUID(H100_UUID)
    for code, cls in (
        (pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVMLError_NotFound),
        (pynvml.NVML_SUCCESS, pynvml.NVMLError),
        (pynvml.NVML_ERROR_UNKNOWN, pynvml.NVMLError_Unknown),
    ):
        fake.gpus[0].empty_process_read = code
        with pytest.raises(pynvml.NVMLError) as e:
            fake.nvmlDeviceGetProcessUtilization(handle, 0)
        assert type(e.value) is cls and e.value.value == code
    fake.gpus[0].empty_process_read = pynvml.NVML_ERROR_NOT_FOUND
    assert fake.nvmlDeviceGetComputeRunningProcesses(handle) == []
    report = process_utilization({H100_UUID: 0}, nvml=fake)[H100_UUID]
    assert report is not None and report.processes == {}

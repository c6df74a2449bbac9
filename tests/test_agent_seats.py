"""Seats on node-agent nodes, read from the node's host: the agent's per-process report (NVML's
process lists and each pid's container from its cgroup, as the service reads its own host),
NOT_SUPPORTED on vGPU guests (those seats stay soft, and the report says why), its bounds, and
the service's schema refusing a malformed or oversized process list with a message."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pynvml
import pytest
from fake_nvml import P40_UUID, FakeNVML, FakeProcess, GiB, p40_gpu

from jupyterhub_gpulab.agent.report import build_report
from jupyterhub_gpulab.fairuse.seatguard import HeldSeat, device_reads, judge
from jupyterhub_gpulab.inventory.wire import MAX_PROCESSES, MAX_REPORT_PROCESSES
from jupyterhub_gpulab.service.web.inputs import MAX_BODY
from jupyterhub_gpulab.service.web.nodeapi import report_problem

A, B = "a" * 64, "b" * 64


def _proc(root, pid, container):
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "cgroup").write_text(f"0::/system.slice/docker-{container}.scope\n")


def _report(tmp_path, processes, **gpu):
    fake = FakeNVML([p40_gpu()])
    for key, value in gpu.items():
        setattr(fake.gpus[0], key, value)
    fake.set_processes(P40_UUID, processes)
    return build_report("gpu3", 10, fake, proc_root=tmp_path)


def test_the_agent_reports_each_process_with_its_container_from_the_hosts_cgroups(tmp_path):
    _proc(tmp_path, 100, A)
    _proc(tmp_path, 200, B)
    body = _report(
        tmp_path,
        [
            FakeProcess(100, GiB // 2, 10),
            FakeProcess(100, GiB // 2, None, graphics=True),  # the same process drawing: one
            FakeProcess(200, 3 * GiB, 10),
            FakeProcess(300, None, 10),  # outside Docker, memory unknown
        ],
    )
    assert report_problem(body) is None
    read = body["processes"][P40_UUID]
    assert read["readable"] is True
    assert read["processes"] == [
        {"pid": 200, "container": B, "memory_used_bytes": 3 * GiB},
        {"pid": 100, "container": A, "memory_used_bytes": GiB // 2},
        {"pid": 300, "container": None, "memory_used_bytes": None},
    ]


def test_a_vgpu_guest_reports_its_gpu_unreadable_and_says_its_seats_are_soft(tmp_path):
    body = _report(
        tmp_path,
        [FakeProcess(100, 4 * GiB, 10)],
        running_processes_error=pynvml.NVML_ERROR_NOT_SUPPORTED,
    )
    assert report_problem(body) is None
    assert body["processes"][P40_UUID] == {"readable": False, "processes": []}
    assert any(P40_UUID in w and "soft" in w for w in body["warnings"])


def test_a_crowded_gpu_sends_its_largest_users_within_the_bounds(tmp_path):
    many = [FakeProcess(1000 + i, i * 1024**2, 1) for i in range(MAX_PROCESSES + 10)]
    body = _report(tmp_path, many)
    sent = body["processes"][P40_UUID]["processes"]
    assert len(sent) == MAX_PROCESSES
    assert min(p["memory_used_bytes"] for p in sent) == 10 * 1024**2  # the 10 smallest dropped
    assert any("only the largest users sent" in w for w in body["warnings"])
    assert report_problem(body) is None


def test_a_full_report_fits_the_services_body_limit():
    import json

    gpus = [f"GPU-5e0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a{i:02d}" for i in range(8)]
    per = MAX_REPORT_PROCESSES // len(gpus)
    process = {"pid": 4194304, "container": A, "memory_used_bytes": 80 * GiB}
    body = {g: {"readable": True, "processes": [process] * per} for g in gpus}
    assert len(json.dumps(body)) < MAX_BODY * 0.75


def _valid(tmp_path):
    _proc(tmp_path, 100, A)
    return _report(tmp_path, [FakeProcess(100, GiB, 10)])


def _first(body):
    return body["processes"][P40_UUID]["processes"][0]


@pytest.mark.parametrize(
    "change, expect",
    [
        pytest.param(lambda b: _first(b).update(container="A" * 64), "is not a 64-hex Docker container id", id="upper-case id"),
        pytest.param(lambda b: _first(b).update(container="a" * 12), "is not a 64-hex Docker container id", id="short id"),
        pytest.param(lambda b: _first(b).update(pid=0), "pid: 0 is less than the minimum", id="pid 0"),
        pytest.param(lambda b: _first(b).update(pid=2**22 + 1), "is greater than the maximum", id="pid past pid_max"),
        pytest.param(lambda b: _first(b).update(memory_used_bytes=-1), "memory_used_bytes: -1", id="negative bytes"),
        pytest.param(lambda b: _first(b).update(cmdline="python"), "cmdline", id="unknown field"),
        pytest.param(lambda b: b["processes"][P40_UUID]["processes"].extend([_first(b)] * MAX_PROCESSES), f"{MAX_PROCESSES + 1} entries, more than the {MAX_PROCESSES} allowed", id="too many"),
        pytest.param(lambda b: b["processes"].update({P40_UUID.lower(): {"readable": True, "processes": []}}), "is not a UUID as NVML prints it", id="lower-case GPU"),
        pytest.param(lambda b: b["processes"][P40_UUID].pop("readable"), "'readable' is a required", id="no readable"),
    ],
)  # fmt: skip
def test_the_service_refuses_a_malformed_process_list_naming_the_problem(tmp_path, change, expect):
    body = _valid(tmp_path)
    change(body)
    problem = report_problem(body)
    assert problem and expect in problem, problem


def test_a_report_from_an_older_agent_without_processes_is_taken(tmp_path):
    body = _valid(tmp_path)
    del body["processes"]
    assert report_problem(body) is None


# -- the service's one decision, on a node's reports ----------------------------------------------

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
SEAT = HeldSeat(f"{P40_UUID}/seat-0", P40_UUID, GiB, A[:12], "alice", "")


def _reads_of_node(tmp_path, used_bytes, count, **gpu):
    """``count`` reports of a node, 5 s apart, with alice's pid 100 holding ``used_bytes``."""
    _proc(tmp_path, 100, A)
    return [
        device_reads(
            _report(tmp_path, [FakeProcess(100, used_bytes, 10)], **gpu)["processes"],
            T0 + timedelta(seconds=5 * i),
        )[P40_UUID]
        for i in range(count)
    ]


def test_a_node_seat_over_its_cap_past_the_grace_is_ended_by_the_same_rule(tmp_path):
    series = _reads_of_node(tmp_path, 2 * GiB, 4)
    assert judge(SEAT, series[:1], T0, grace_s=10).action == "warn"
    v = judge(SEAT, series, T0 + timedelta(seconds=15), grace_s=10)
    assert (v.action, v.pids, v.used_bytes) == ("kill", (100,), 2 * GiB)
    within = _reads_of_node(tmp_path / "b", GiB // 2, 4)
    assert judge(SEAT, within, T0 + timedelta(seconds=15), grace_s=10).action == "ok"


def test_a_vgpu_nodes_seat_is_judged_soft_not_ended(tmp_path):
    series = _reads_of_node(
        tmp_path, 4 * GiB, 4, running_processes_error=pynvml.NVML_ERROR_NOT_SUPPORTED
    )
    assert judge(SEAT, series, T0 + timedelta(seconds=15), grace_s=10).action == "soft"

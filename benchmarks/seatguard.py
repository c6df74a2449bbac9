"""What the seat guard adds to each sampling pass: its pass (``SeatGuard._judge``: the monitor's
reads into the history, the ledger's held seats, one verdict per seat over up to ``grace`` +
5 minutes of reads) against the sample it follows (``LabState.take_sample``: NVML through the
fake, every process mapped to its container through a /proc laid out on disk), the work the
service already does every ``sample_interval``, interleaved round by round in one run.

The lab: 64 Tesla P40s (the fake NVML) in 24 seats of 700 MiB each (1,536 seats), 1,000 of them
held in a SQLite ledger, each by a container running two GPU processes (2,000 processes), a
tenth of the seats over their cap (warned: the warnings are written, as in the service). A
real hub is not needed: nothing here asks it (no seat stays over past the grace). Usage:
``python benchmarks/seatguard.py [--rounds 40]``; ``--small`` (the test suite's run: 8 GPUs,
100 held seats, 10 rounds). The last line is one JSON object: ``guard_ms_p50/p95``,
``sample_ms_p50/p95``, ``guard_over_sample_p50`` (the guard's share of a pass), sizes,
``loadavg_1m``, targets.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

from fake_nvml import FakeGpu, FakeNVML, FakeProcess  # noqa: E402
from traitlets.config import Config  # noqa: E402

from jupyterhub_gpulab import clock  # noqa: E402
from jupyterhub_gpulab.hubapi.client import HubClient  # noqa: E402
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest  # noqa: E402
from jupyterhub_gpulab.lab.config import GPULab  # noqa: E402
from jupyterhub_gpulab.ledger import Ledger  # noqa: E402
from jupyterhub_gpulab.service.seatguard import SeatGuard  # noqa: E402
from jupyterhub_gpulab.service.state import LabState  # noqa: E402

MiB = 2**20
SEATS = 24
#: the guard's pass may cost at most this share of the sample it follows, and this long
TARGETS = {"guard_over_sample_p50": 0.5, "guard_ms_p95": 250}


def uuid(i: int) -> str:
    return f"GPU-5e0c1a2b-3c4d-4e5f-8a9b-{i:012x}"


def build(root: Path, gpus: int, held: int):
    fake = FakeNVML(
        [FakeGpu(uuid(i), "Tesla P40", 24 * 2**30, compute_capability=(6, 1)) for i in range(gpus)]
    )
    c = Config()
    c.GPULab.node_name = "bench"
    c.GPULab.inventory_source = "nvml"
    c.GPULab.shared_devices = {
        uuid(i): {"seats": SEATS, "memory_per_seat": "700MiB", "compute_share": 1 / SEATS}
        for i in range(gpus)
    }
    c.GPULab.profiles = [
        {"slug": "seat", "display_name": "S", "image": "x", "slice": {"kind": "shared"}}
    ]
    ledger = Ledger(f"sqlite:///{root / 'gpulab.sqlite'}", auto_upgrade=True)
    proc = root / "proc"
    state = LabState(GPULab(config=c), ledger, nvml=fake, proc_root=str(proc))
    state.sync()
    by_gpu: dict[str, list] = {}
    for n in range(held):
        a = ledger.claim(
            SliceRequest(kind=SliceKind.SHARED), user=f"u{n}", profile="seat"
        ).allocation
        cid = hashlib.sha256(str(n).encode()).hexdigest()  # random-looking, as Docker's
        ledger.set_container(a.id, cid)
        over = n % 10 == 0
        for k in range(2):
            pid = 10_000 + 2 * n + k
            d = proc / str(pid)
            d.mkdir(parents=True)
            (d / "cgroup").write_text(f"0::/system.slice/docker-{cid}.scope\n")
            (d / "status").write_text(f"Uid:\t1000\t1000\t1000\t1000\nNSpid:\t{pid}\t{7 + k}\n")
            used = (500 if over else 200) * MiB
            by_gpu.setdefault(a.slice_id.split("/")[0], []).append(FakeProcess(pid, used, 10))
    for gpu, procs in by_gpu.items():
        fake.set_processes(gpu, procs)
    hub = HubClient("http://127.0.0.1:9/hub/api", "unused", timeout=2)
    guard = SeatGuard(state, hub, grace_s=3600, action="kill-process", proc_root=proc)
    return state, guard


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    gpus, held, rounds = (8, 100, 10) if args.small else (64, 1000, args.rounds)
    guard_ms, sample_ms = [], []
    with tempfile.TemporaryDirectory() as tmp:
        state, guard = build(Path(tmp), gpus, held)
        t = clock.utcnow()
        clock.utcnow = lambda: t  # each round is one sample interval later
        loop = asyncio.new_event_loop()
        for i in range(rounds + 2):
            t0 = time.perf_counter()
            state.take_sample()
            t1 = time.perf_counter()
            verdicts = loop.run_until_complete(guard.run())
            t2 = time.perf_counter()
            if i >= 2:  # warm-up: the first passes write every warning
                sample_ms.append(1000 * (t1 - t0))
                guard_ms.append(1000 * (t2 - t1))
            t = t.__class__.fromtimestamp(t.timestamp() + 10, t.tzinfo)
        loop.close()
        warned = sum(v.action == "warn" for v in verdicts)
        state.close()
        state.ledger.close()
    ratio = statistics.median(g / s for g, s in zip(guard_ms, sample_ms))
    result = {
        "gpus": gpus,
        "seats": gpus * SEATS,
        "held_seats": held,
        "processes": 2 * held,
        "over_cap_seats": warned,
        "rounds": rounds,
        "guard_ms_p50": round(pct(guard_ms, 50), 2),
        "guard_ms_p95": round(pct(guard_ms, 95), 2),
        "sample_ms_p50": round(pct(sample_ms, 50), 2),
        "sample_ms_p95": round(pct(sample_ms, 95), 2),
        "guard_over_sample_p50": round(ratio, 3),
        "loadavg_1m": os.getloadavg()[0],
        "targets": TARGETS,
    }
    result["meets_targets"] = (
        result["guard_over_sample_p50"] <= TARGETS["guard_over_sample_p50"]
        and result["guard_ms_p95"] <= TARGETS["guard_ms_p95"]
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()

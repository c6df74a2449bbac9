"""Latency of the gpulab service's admin page and allocations API with 1,000 open allocations
on 100 devices, measured end to end.

A real JupyterHub (subprocess, with its proxy) starts the service as a managed service from
``configure_service``; the lab declares 100 devices (50 A100-80GB split in 7 MIG 1g.10gb each,
50 T4s split in 16 shared seats each: 1,150 slices); 1,000 allocations are claimed through the
ledger on the hub's database, for 400 users in 10 groups. Then:

- ``admin_page``: ``GET /services/gpulab/`` as a logged-in JupyterHub admin (the OAuth cookie,
  as a browser sends it), through the hub's proxy;
- ``api``: ``GET /services/gpulab/api/allocations`` with the admin's API token, through the proxy.

Each is requested ``--rounds`` times after ``--warmup`` requests; latencies are wall-clock times
of complete responses. Usage: ``python benchmarks/service.py [--rounds 200]``. The last line
printed is one JSON object (``admin_page_ms_p50/p95``, ``api_ms_p50/p95``, sizes, targets).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

from service_support import (  # noqa: E402
    PREFIX,
    ledger_for,
    login,
    start_hub,
    user_token,
    wait_for_service,
)

from jupyterhub_gpulab.inventory import SliceKind, SliceRequest  # noqa: E402

TARGETS = {"admin_page_ms_p95": 150, "api_ms_p95": 50}
N_DEVICES = 100
N_ALLOCATIONS = 1000
N_USERS = 400
GROUPS = [f"course-{i}" for i in range(10)]


def lab_spec() -> list[dict]:
    spec = []
    for i in range(N_DEVICES // 2):
        spec.append(
            {
                "uuid": f"GPU-a100-{i:04d}",
                "index": i,
                "name": "NVIDIA A100-SXM4-80GB",
                "memory": "80GiB",
                "mig": [{"uuid": f"MIG-{i:04d}-{j}", "profile": "1g.10gb"} for j in range(7)],
            }
        )
    for i in range(N_DEVICES // 2, N_DEVICES):
        spec.append(
            {
                "uuid": f"GPU-t4-{i:04d}",
                "index": i,
                "name": "Tesla T4",
                "memory": "16GiB",
                "shared": {"seats": 16, "memory_per_seat": "1GiB", "compute_share": 0.0625},
            }
        )
    return spec


EXTRA = """
c.GPULab.inventory = {spec!r}
c.GPULab.profiles = [
    {{"slug": "mig", "display_name": "MIG 1g.10gb", "image": "x", "slice": {{"kind": "mig", "mig_profile": "1g.10gb"}}}},
    {{"slug": "seat", "display_name": "Shared seat", "image": "x", "slice": {{"kind": "shared"}}}},
]
c.GPULab.group_policies = {policies!r}
c.GPULabService.hub_poll_interval = 30
c.GPULabService.sample_interval = 30
"""


def fill(ledger) -> None:
    mig = SliceRequest(kind=SliceKind.MIG, mig_profile="1g.10gb")
    seat = SliceRequest(kind=SliceKind.SHARED)
    for n in range(N_ALLOCATIONS):
        user = f"user{n % N_USERS:03d}"
        group = GROUPS[n % len(GROUPS)]
        ledger.claim(
            mig if n % 3 == 0 else seat,
            user=user,
            profile="mig" if n % 3 == 0 else "seat",
            server_name="" if n < N_USERS else f"s{n // N_USERS}",
            charge_groups=[(group, 200)],
        )
        if n % 50 == 0:
            ledger.record_refusal(user, "mig", "quota", "group full")


def timed(fn, rounds: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args()

    policies = {g: {"max_slices": 200, "max_slices_per_user": 4} for g in GROUPS}
    with tempfile.TemporaryDirectory(prefix="gpulab-bench-") as tmp:
        hub = start_hub(Path(tmp), extra=EXTRA.format(spec=lab_spec(), policies=policies))
        try:
            wait_for_service(hub)
            ledger = ledger_for(hub)
            t0 = time.perf_counter()
            fill(ledger)
            fill_s = time.perf_counter() - t0
            assert len(ledger.open_allocations()) == N_ALLOCATIONS
            session = login(hub, "admin")
            token = user_token(hub, session, "admin")
            page_url = hub.url + PREFIX
            api_url = hub.url + PREFIX + "api/allocations"
            headers = {"Authorization": f"token {token}"}

            def page():
                r = session.get(page_url, timeout=30)
                assert r.status_code == 200 and r.url == page_url, (r.status_code, r.url)
                return r

            def api():
                r = session.get(api_url, headers=headers, timeout=30)
                assert r.status_code == 200, r.text[:200]
                return r

            # what is timed is what an admin gets: every allocation, on the page and in the API
            first_page, first_api = page(), api()
            assert first_page.text.count('class="allocation"') == N_ALLOCATIONS
            assert len(first_api.json()["allocations"]) == N_ALLOCATIONS
            size = {
                "admin_page_bytes": len(first_page.content),
                "api_bytes": len(first_api.content),
            }
            page_ms = timed(page, args.rounds, args.warmup)
            api_ms = timed(api, args.rounds, args.warmup)
            ledger.close()
        finally:
            hub.stop()

    for name, values in (("admin page", page_ms), ("allocations API", api_ms)):
        print(
            f"{name:16s} n={len(values)}  p50 {statistics.median(values):6.1f} ms  "
            f"p95 {pct(values, 95):6.1f} ms  max {max(values):6.1f} ms"
        )
    summary = {
        "devices": N_DEVICES,
        "open_allocations": N_ALLOCATIONS,
        "fill_s": round(fill_s, 2),
        **size,
        "admin_page_ms_p50": round(statistics.median(page_ms), 1),
        "admin_page_ms_p95": round(pct(page_ms, 95), 1),
        "api_ms_p50": round(statistics.median(api_ms), 1),
        "api_ms_p95": round(pct(api_ms, 95), 1),
        "targets": TARGETS,
    }
    summary["meets_targets"] = all(summary[k] <= v for k, v in TARGETS.items())
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

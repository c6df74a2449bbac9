"""Latency of the gpulab service's admin page and allocations API with 10,000 open allocations
on 1,300 devices, measured end to end, and the service's resident memory.

A real JupyterHub (subprocess, with its proxy) starts the service as a managed service from
``configure_service``; the lab declares 1,300 devices (650 A100-80GB split in 7 MIG 1g.10gb
each, 650 T4s split in 16 shared seats each: 14,950 slices); 10,000 allocations are claimed
through the ledger on the hub's database, for 5,000 users in 10 groups. Then:

- ``admin_page``: ``GET /services/gpulab/`` as a logged-in JupyterHub admin (the OAuth cookie,
  as a browser sends it), through the hub's proxy: its table shows the first page (50) of the
  open allocations, paged in the database;
- ``api``: ``GET /services/gpulab/api/allocations?limit=200`` (a page of 200, JupyterHub's
  maximum, with its pagination ``Accept`` header) with the admin's API token, through the proxy;
- ``usage_api``: ``GET /services/gpulab/api/usage?limit=200`` (this week's GPU-hours, a page of
  200 of the 5,000 users, most first), the same way (no target of its own in issue 26: reported
  beside the allocations API's);
- ``metrics_http``: ``GET /services/gpulab/metrics`` with the same token, through the proxy;
- ``service_rss_mib`` / ``service_peak_rss_mib``: the service process's resident memory
  (``VmRSS`` / ``VmHWM`` of ``/proc/<pid>/status``, MiB) after those requests.

``metrics``: the service's server time for one scrape of ``/services/gpulab/metrics`` (the
collector reading the ledger and the exposition text, what the handler runs in its thread) on a
larger lab of its own: 10,000 slices (1,000 A100s in 7 MIG instances, 200 T4s in 15 seats), 5,000
open allocations and 5,000 closed ones (a third culled), the hub's list of 5,000 running servers,
a utilisation sample for every slice, and two course reservations keeping 40 slices each. Rounds alternate with the admin API's server work on
the same ledger (``state.snapshot()``), the alternative read an admin already pays for.

Each is requested ``--rounds`` times after ``--warmup`` requests; latencies are wall-clock times
of complete responses. Usage: ``python benchmarks/service.py [--rounds 200] [--allocations 10000]``
(``--allocations 1000``: the hub's lab sized for 1,000 open allocations, 130 devices, 500 users;
the metrics lab keeps its size); ``--small`` (the
test suite's run, seconds: 10 devices, 60 allocations, a 200-slice metrics lab, 10 rounds). The
last line printed is one JSON object (``admin_page_ms_p50/p95``, ``api_ms_p50/p95``,
``metrics_ms_p50/p95``, ``metrics_http_ms_p95``, sizes, targets).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import timedelta
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

TARGETS = {
    "admin_page_ms_p95": 150,
    "admin_page_bytes": 300_000,
    "api_ms_p95": 50,
    "metrics_ms_p95": 100,
    "service_peak_rss_mib": 300,
}
GROUPS = [f"course-{i}" for i in range(10)]
M_SEATS = 15  # seats per T4 of the metrics lab


@dataclass(frozen=True)
class Size:
    """The lab of one run: the hub's (``devices``, ``allocations`` over ``users``) and the
    metrics lab's (``m_a100`` MIG GPUs, ``m_t4`` seat GPUs, ``m_open`` + ``m_closed``
    allocations, ``m_booked`` slices kept by each of two course sessions)."""

    devices: int = 1300
    allocations: int = 10000
    users: int = 5000
    m_a100: int = 1000
    m_t4: int = 200
    m_open: int = 5000
    m_closed: int = 5000
    m_booked: int = 40

    @property
    def m_slices(self) -> int:
        return self.m_a100 * 7 + self.m_t4 * M_SEATS


FULL = Size()
#: ``--small``: seconds, the test suite's run (tests/test_benchmarks.py)
SMALL = Size(devices=10, allocations=60, users=30, m_a100=20, m_t4=4, m_open=100, m_closed=100,
             m_booked=10)  # fmt: skip


def scaled(allocations: int) -> Size:
    """:data:`FULL` with the hub's lab sized for ``allocations`` (``--allocations``): 13 devices
    per 100 allocations (1,300 for 10,000, as :data:`FULL`), half as many users as allocations."""
    if allocations < 1:
        raise SystemExit("--allocations must be at least 1")
    return replace(
        FULL,
        allocations=allocations,
        devices=max(2, -(-allocations * 13 // 100)),
        users=max(1, allocations // 2),
    )


def lab_spec(size: Size) -> list[dict]:
    spec = []
    for i in range(size.devices // 2):
        spec.append(
            {
                "uuid": f"GPU-a100-{i:04d}",
                "index": i,
                "name": "NVIDIA A100-SXM4-80GB",
                "memory": "80GiB",
                "mig": [{"uuid": f"MIG-{i:04d}-{j}", "profile": "1g.10gb"} for j in range(7)],
            }
        )
    for i in range(size.devices // 2, size.devices):
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
# a lab of 1,300 declared GPUs takes the service longer than JupyterHub's 10 s to come up on a
# loaded 2-core machine (the hub exits when a managed service does not answer in time)
for _service in c.JupyterHub.services:
    if _service.get("name") == "gpulab":
        _service["timeout"] = 300
"""


def fill(ledger, size: Size) -> None:
    mig = SliceRequest(kind=SliceKind.MIG, mig_profile="1g.10gb")
    seat = SliceRequest(kind=SliceKind.SHARED)
    for n in range(size.allocations):
        user = f"user{n % size.users:03d}"
        group = GROUPS[n % len(GROUPS)]
        ledger.claim(
            mig if n % 3 == 0 else seat,
            user=user,
            profile="mig" if n % 3 == 0 else "seat",
            server_name="" if n < size.users else f"s{n // size.users}",
            charge_groups=[(group, size.allocations)],
        )
        if n % 50 == 0:
            ledger.record_refusal(user, "mig", "quota", "group full")


def metrics_lab(tmp: Path, size: Size):
    """A LabState over a fresh SQLite ledger holding the metrics benchmark's lab (docstring)."""
    from traitlets.config import Config

    from jupyterhub_gpulab import clock
    from jupyterhub_gpulab.hubapi.client import HubClient
    from jupyterhub_gpulab.inventory import Utilization
    from jupyterhub_gpulab.lab.config import GPULab
    from jupyterhub_gpulab.ledger import Ledger
    from jupyterhub_gpulab.service.state import LabState, Sample

    spec = [
        {
            "uuid": f"GPU-a100-{i:05d}",
            "index": i,
            "name": "NVIDIA A100-SXM4-80GB",
            "memory": "80GiB",
            "mig": [{"uuid": f"MIG-{i:05d}-{j}", "profile": "1g.10gb"} for j in range(7)],
        }
        for i in range(size.m_a100)
    ] + [
        {
            "uuid": f"GPU-t4-{i:05d}",
            "index": i,
            "name": "Tesla T4",
            "memory": "16GiB",
            "shared": {"seats": M_SEATS, "memory_per_seat": "1GiB", "compute_share": 0.0625},
        }
        for i in range(size.m_a100, size.m_a100 + size.m_t4)
    ]
    c = Config()
    c.GPULab.db_url = f"sqlite:///{tmp / 'metrics.sqlite'}"
    c.GPULab.node_name = "bench"
    c.GPULab.inventory = spec
    c.GPULab.profiles = [
        {"slug": "mig", "display_name": "MIG", "image": "x",
         "slice": {"kind": "mig", "mig_profile": "1g.10gb"}},
        {"slug": "seat", "display_name": "Seat", "image": "x", "slice": {"kind": "shared"}},
    ]  # fmt: skip
    c.GPULab.group_policies = {g: {"max_slices_per_user": 8} for g in GROUPS}
    gpulab = GPULab(config=c)
    ledger = Ledger(gpulab.db_url)
    state = LabState(gpulab, ledger)
    state.sync()
    assert len(state.inventory.slices) == size.m_slices
    mig = SliceRequest(kind=SliceKind.MIG, mig_profile="1g.10gb")
    seat = SliceRequest(kind=SliceKind.SHARED)
    users = []
    for n in range(size.m_open + size.m_closed):
        user, group = f"user{n % 2500:04d}", GROUPS[n % len(GROUPS)]
        claim = ledger.claim(
            mig if n % 3 else seat,
            user=user,
            profile="mig" if n % 3 else "seat",
            server_name=f"s{n}",
            charge_groups=[(group, None)],
        )
        if n >= size.m_open:
            ledger.release(claim.allocation.id, "culled:gpu-idle" if n % 3 == 0 else "stopped")
        else:
            ledger.set_container(claim.allocation.id, f"c{n}", f"jupyter-{user}-s{n}")
            users.append({"name": user, "servers": {f"s{n}": {"name": f"s{n}", "ready": True}}})
    now = clock.utcnow()
    # two course sessions keeping seats now (one in its lead time, one started): the scrape
    # reads the reservations too
    for holder, start in (
        ("dl101", now + timedelta(minutes=20)),
        ("ml201", now - timedelta(minutes=5)),
    ):
        ledger.book(holder=holder, groups=[holder], profile="mig" if holder == "dl101" else "seat",
                    request=mig if holder == "dl101" else seat, count=size.m_booked, starts_at=start,
                    ends_at=start + timedelta(hours=2), lead_s=3600, grace_s=900)  # fmt: skip
    # the sampler's latest figures for this host (what ``take_sample`` keeps; ``sample`` merges
    # them with node agents' reports, so it has no setter)
    state._local = Sample(
        {s.id: Utilization(gpu_percent=float(i % 100), memory_used_bytes=i * 1024, at=now)
         for i, s in enumerate(state.inventory.slices)},
        now,
        None,
    )  # fmt: skip
    hub = HubClient("http://127.0.0.1:1/hub/api/", "unused")
    merged: dict[str, dict] = {}
    for u in users:
        merged.setdefault(u["name"], {"name": u["name"], "servers": {}})["servers"].update(
            u["servers"]
        )
    hub.remember_active(list(merged.values()), now)
    return state, hub


def metrics_server_time(rounds: int, warmup: int, size: Size) -> dict:
    """``metrics`` (docstring): p50/p95 of the collector plus exposition, interleaved with the
    admin API's ledger read."""
    from jupyterhub_gpulab.service.metrics import Exposition

    with tempfile.TemporaryDirectory(prefix="gpulab-bench-metrics-") as tmp:
        t0 = time.perf_counter()
        state, hub = metrics_lab(Path(tmp), size)
        fill_s = time.perf_counter() - t0
        metrics = Exposition(state, hub)
        # as the service does once started (service/launcher.py): what start built is frozen
        # out of the collector's full passes, which would otherwise land in a scrape now and then
        gc.collect()
        gc.freeze()
        t0 = time.perf_counter()
        metrics.sampled()  # in the sampler's thread, once per sample
        render_ms = (time.perf_counter() - t0) * 1000
        body = metrics.render()
        assert b"gpulab_allocations_stale" in body and b"gpulab_slice_utilization_percent" in body
        scrape_ms, scrape_cpu_ms, snapshot_ms = [], [], []
        for i in range(warmup + rounds):
            t0, c0 = time.perf_counter(), time.thread_time()
            metrics.render()
            t1, c1 = time.perf_counter(), time.thread_time()
            state.snapshot()
            t2 = time.perf_counter()
            if i >= warmup:
                scrape_ms.append((t1 - t0) * 1000)
                scrape_cpu_ms.append((c1 - c0) * 1000)
                snapshot_ms.append((t2 - t1) * 1000)
        state.close()
        state.ledger.close()
        gc.unfreeze()
    return {
        "metrics_slices": size.m_slices,
        "metrics_open_allocations": size.m_open,
        "metrics_fill_s": round(fill_s, 1),
        "metrics_bytes": len(body),
        "metrics_ms_p50": round(statistics.median(scrape_ms), 1),
        "metrics_ms_p95": round(pct(scrape_ms, 95), 1),
        # the scrape thread's CPU time: the same work without the waits for a shared CPU
        "metrics_cpu_ms_p95": round(pct(scrape_cpu_ms, 95), 1),
        "admin_snapshot_ms_p95": round(pct(snapshot_ms, 95), 1),
        "metrics_sample_render_ms": round(render_ms, 1),
    }


def service_memory(hub) -> dict:
    """The gpulab service's ``VmRSS`` and ``VmHWM`` (MiB): the hub's child process running
    ``jupyterhub_gpulab.service``."""
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            cmdline = (status.parent / "cmdline").read_bytes().replace(b"\0", b" ")
            text = status.read_text()
        except OSError:
            continue
        ppid = int(next(ln.split()[1] for ln in text.splitlines() if ln.startswith("PPid:")))
        if b"jupyterhub_gpulab.service" in cmdline and ppid == hub.proc.pid:
            kib = {ln.split(":")[0]: int(ln.split()[1]) for ln in text.splitlines()
                   if ln.startswith(("VmRSS:", "VmHWM:"))}  # fmt: skip
            return {"service_rss_mib": round(kib["VmRSS"] / 1024, 1),
                    "service_peak_rss_mib": round(kib["VmHWM"] / 1024, 1)}  # fmt: skip
    raise RuntimeError("the gpulab service process was not found under the hub")


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
    ap.add_argument("--small", action="store_true", help="seconds: a small lab, 10 rounds")
    ap.add_argument(
        "--allocations",
        type=int,
        default=FULL.allocations,
        help="open allocations on the hub's lab (devices: 13 per 100 allocations, users: half "
        "as many as allocations); the metrics lab keeps its size",
    )
    args = ap.parse_args()
    size = SMALL if args.small else scaled(args.allocations)
    if args.small:
        args.rounds, args.warmup = 10, 2

    metrics = metrics_server_time(args.rounds, 5, size)
    policies = {g: {"max_slices": 200, "max_slices_per_user": 4} for g in GROUPS}
    with tempfile.TemporaryDirectory(prefix="gpulab-bench-") as tmp:
        hub = start_hub(Path(tmp), extra=EXTRA.format(spec=lab_spec(size), policies=policies))
        try:
            wait_for_service(hub)
            ledger = ledger_for(hub)
            t0 = time.perf_counter()
            fill(ledger, size)
            fill_s = time.perf_counter() - t0
            assert len(ledger.open_allocations()) == size.allocations
            session = login(hub, "admin")
            token = user_token(hub, session, "admin")
            page_url = hub.url + PREFIX
            api_url = hub.url + PREFIX + "api/allocations?limit=200"
            headers = {"Authorization": f"token {token}"}
            paged = {**headers, "Accept": "application/jupyterhub-pagination+json"}

            def page():
                r = session.get(page_url, timeout=30)
                assert r.status_code == 200 and r.url == page_url, (r.status_code, r.url)
                return r

            def api():
                r = session.get(api_url, headers=paged, timeout=30)
                assert r.status_code == 200, r.text[:200]
                return r

            # what is timed is what an admin gets: a page of them, and the total
            first_page, first_api = page(), api()
            assert first_page.text.count('class="allocation"') == min(50, size.allocations)
            assert (
                f'<span class="badge text-bg-secondary total allocations-total">{size.allocations}<'
                in (first_page.text)
            )
            assert len(first_api.json()["items"]) == min(200, size.allocations)
            assert first_api.json()["_pagination"]["total"] == size.allocations
            body_bytes = {
                "admin_page_bytes": len(first_page.content),
                "api_bytes": len(first_api.content),
            }

            usage_url = hub.url + PREFIX + "api/usage?limit=200"

            def usage():
                r = session.get(usage_url, headers=paged, timeout=30)
                assert r.status_code == 200, r.text[:200]
                return r

            first_usage = usage().json()
            assert len(first_usage["items"]) == min(200, size.users)
            body_bytes["usage_api_bytes"] = len(usage().content)

            def scrape():
                r = session.get(hub.url + PREFIX + "metrics", headers=headers, timeout=30)
                assert r.status_code == 200, r.text[:200]
                return r

            page_ms = timed(page, args.rounds, args.warmup)
            api_ms = timed(api, args.rounds, args.warmup)
            usage_ms = timed(usage, args.rounds, args.warmup)
            scrape_ms = timed(scrape, args.rounds, args.warmup)
            memory = service_memory(hub)
            ledger.close()
        finally:
            hub.stop()

    for name, values in (
        ("admin page", page_ms),
        ("allocations API", api_ms),
        ("usage API", usage_ms),
        ("metrics (HTTP)", scrape_ms),
    ):
        print(
            f"{name:16s} n={len(values)}  p50 {statistics.median(values):6.1f} ms  "
            f"p95 {pct(values, 95):6.1f} ms  max {max(values):6.1f} ms"
        )
    summary = {
        "devices": size.devices,
        "open_allocations": size.allocations,
        "fill_s": round(fill_s, 2),
        **body_bytes,
        "admin_page_ms_p50": round(statistics.median(page_ms), 1),
        "admin_page_ms_p95": round(pct(page_ms, 95), 1),
        "api_ms_p50": round(statistics.median(api_ms), 1),
        "api_ms_p95": round(pct(api_ms, 95), 1),
        "usage_api_ms_p50": round(statistics.median(usage_ms), 1),
        "usage_api_ms_p95": round(pct(usage_ms, 95), 1),
        "metrics_http_ms_p95": round(pct(scrape_ms, 95), 1),
        "api_page_rows": min(200, size.allocations),
        **memory,
        **metrics,
        # the machine's 1-minute load average at the end (2 cores here): p95s under load
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "targets": TARGETS,
    }
    summary["meets_targets"] = all(summary[k] <= v for k, v in TARGETS.items())
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

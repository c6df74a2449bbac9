"""Spawn→ready, stop and refusal times of GPUDockerSpawner against plain DockerSpawner, on one engine.

Two real hubs (each with its real proxy) run side by side on the same image: one with
GPUDockerSpawner over a declared lab (attach mode ``env``: this engine has no NVIDIA runtime), one
with ``dockerspawner.DockerSpawner``, both with the same CPU and memory limits.

- **Single spawns**, ``--rounds`` of them (at least 20): each round spawns and stops one server on
  each hub, the order alternating (ours first in even rounds, plain first in odd ones) so that
  neither side always meets the machine as the other left it. Spawn→ready is measured as a client
  sees it: POST, then poll the REST API every 50 ms until ``ready``. Reported as the spread (min,
  median, max) of each side and of the per-round ratio ours/plain: a ratio spread that straddles
  1 says the difference is noise, not a result.
- **Storms** of ``--storm`` concurrent spawns in ABBA order (ours, plain, plain, ours): wall time
  from the first request to the last server ready, averaged per side.
- **A refusal burst** on ours: ``--burst`` (40) users spawn at once a profile with 4 free whole
  GPUs; 4 start, every other one is refused. ``refusal_p95_s`` is the 95th percentile of the
  refusals' response times over ``--bursts`` bursts. The same burst against a third hub whose
  spawner is DockerSpawner for 4 of the users and refuses the others at once
  (``refusal_p95_s_hub_floor``) is what JupyterHub and the engine cost on this machine for the
  same work: the floor no spawner can go below.

Usage: ``python benchmarks/spawn.py [--rounds 20] [--storm 30] [--burst 40] [--bursts 3]`` (needs
dockerd and the image; ``scripts/test-setup.sh`` provides both). About 5 minutes on the 2-core
development machine. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from e2e_support import IMAGE, remove_node_containers  # noqa: E402
from hubtools import Hub  # noqa: E402

from jupyterhub_gpulab.ledger import Ledger  # noqa: E402

LIMITS = 'c.DockerSpawner.mem_limit = "512M"\nc.DockerSpawner.cpu_limit = 1.0\n'
COMMON = f"""
c.DockerSpawner.image = {IMAGE!r}
c.DockerSpawner.pull_policy = "never"
c.DockerSpawner.remove = True
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 120
c.JupyterHub.concurrent_spawn_limit = 100
{LIMITS}
"""
#: Whole GPUs the refusal burst competes for.
BURST_SLICES = 4


def ours_config(node: str, seats: int) -> str:
    lab = [
        {
            "uuid": f"GPU-bench-{i}",
            "index": i,
            "name": "Tesla P40",
            "memory": "24GiB",
            "shared": {"seats": 8, "memory_per_seat": "3GiB", "compute_share": 0.125},
        }
        for i in range((seats + 7) // 8)
    ]
    lab += [
        {
            "uuid": f"GPU-bench-a40-{i}",
            "index": len(lab) + i,
            "name": "NVIDIA A40",
            "memory": "48GiB",
        }
        for i in range(BURST_SLICES)
    ]
    limits = {"mem_limit": "512M", "cpu_limit": 1.0}
    profiles = [
        {"slug": "seat", "display_name": "seat", "image": IMAGE, "slice": {"kind": "shared"}, **limits},
        {"slug": "a40", "display_name": "A40", "image": IMAGE, "slice": {"kind": "gpu"}, **limits},
    ]  # fmt: skip
    return (
        COMMON
        + f"""
c.JupyterHub.spawner_class = "gpulab"
c.DockerSpawner.prefix = {node!r}
c.GPULab.node_name = {node!r}
c.GPULab.inventory_source = "declared"
c.GPULab.inventory = {lab!r}
c.GPULab.profiles = {profiles!r}
c.GPUDockerSpawner.attach_mode = "env"
"""
    )


def plain_config(node: str) -> str:
    return (
        COMMON
        + f"""
c.JupyterHub.spawner_class = "dockerspawner.DockerSpawner"
c.DockerSpawner.prefix = {node!r}
c.DockerSpawner.name_template = "{node}-{{username}}"
"""
    )


def floor_config(node: str, winners: list[str]) -> str:
    """A hub whose spawner is plain DockerSpawner for ``winners`` and refuses everyone else at
    once: the burst's workload (the same containers starting, the same refusals) without gpulab,
    so that ``refusal_p95_s_hub_floor`` is what JupyterHub and the engine cost on this machine."""
    return (
        COMMON
        + f"""
from dockerspawner import DockerSpawner
from jupyterhub.spawner import SpawnException


class FloorSpawner(DockerSpawner):
    refused = False

    async def start(self):
        self.refused = self.user.name not in {winners!r}
        if self.refused:
            raise SpawnException("full", reason="no-free-slice", status_code=503)
        return await super().start()

    async def poll(self):
        return 0 if self.refused else await super().poll()


c.JupyterHub.spawner_class = FloorSpawner
c.DockerSpawner.prefix = {node!r}
c.DockerSpawner.name_template = "{node}-{{username}}"
"""
    )


def spawn_ready(hub: Hub, user: str, options: dict) -> float:
    t0 = time.perf_counter()
    r = hub.spawn(user, options)
    if r.status_code not in (201, 202):
        raise RuntimeError(f"spawn of {user} failed: {r.status_code} {r.text}")
    while True:
        s = hub.server(user)
        if s and s.get("ready"):
            return time.perf_counter() - t0
        if time.perf_counter() - t0 > 180:
            raise TimeoutError(f"{user} not ready:\n{hub.log_tail()}")
        time.sleep(0.05)


def stop(hub: Hub, user: str) -> float:
    """Seconds the hub takes to stop ``user``'s server. Then, untimed, wait until the engine has
    removed the container: DockerSpawner's auto-removal finishes after the stop answers, and a
    new start under the same name meanwhile fails with 409 Conflict (seen with plain
    DockerSpawner under load), which would end the run for a reason neither side measures."""
    t0 = time.perf_counter()
    hub.stop_server(user)
    took = time.perf_counter() - t0
    name = f"^/{hub.workdir.name}-{user}$"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"name={name}"], capture_output=True, text=True
        )
        if not r.stdout.strip():
            break
        time.sleep(0.1)
    return took


def storm(hub: Hub, users: list[str], options: dict) -> float:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(users)) as pool:
        list(pool.map(lambda u: spawn_ready(hub, u, options), users))
    wall = time.perf_counter() - t0
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda u: stop(hub, u), users))
    return wall


def burst(hub: Hub, users: list[str], options: dict) -> tuple[list[float], list[str]]:
    """Every user POSTs at once: ``(refusals' response times in s, users who got a server)``."""

    def one(user):
        t0 = time.perf_counter()
        r = hub.spawn(user, options)
        return user, r.status_code, time.perf_counter() - t0

    with ThreadPoolExecutor(len(users)) as pool:
        answers = list(pool.map(one, users))
    refused = [t for _, code, t in answers if code == 503]
    started = [u for u, code, _ in answers if code in (201, 202)]
    odd = [(u, code) for u, code, _ in answers if code not in (201, 202, 503)]
    if odd:
        raise RuntimeError(f"unexpected answers in the burst: {odd}\n{hub.log_tail()}")
    return refused, started


def p95(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=20, method="inclusive")[-1]


def spread(xs: list[float], digits: int = 3) -> dict:
    return {
        "min": round(min(xs), digits),
        "median": round(statistics.median(xs), digits),
        "max": round(max(xs), digits),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--storm", type=int, default=30)
    ap.add_argument("--storm-pairs", type=int, default=2, help="1: one storm each; 2: ABBA order")
    ap.add_argument("--burst", type=int, default=40, help="concurrent spawns in a refusal burst")
    ap.add_argument("--bursts", type=int, default=3)
    args = ap.parse_args(argv)
    if args.rounds < 20:
        ap.error("--rounds must be at least 20: fewer rounds cannot tell a difference from noise")
    tmp = Path(tempfile.mkdtemp(prefix="gpulab-bench-spawn-"))
    ours = Hub(tmp / "gpubenchours", ours_config("gpubenchours", args.storm + 2))
    plain = Hub(tmp / "gpubenchplain", plain_config("gpubenchplain"))
    crowd = [f"b{i}" for i in range(args.burst)]
    floor = Hub(tmp / "gpubenchfloor", floor_config("gpubenchfloor", crowd[:BURST_SLICES]))
    hubs = (ours, plain, floor)
    result: dict = {}
    t_start = time.perf_counter()
    try:
        for h in hubs:
            h.start()
        users = [f"u{i}" for i in range(args.storm)]
        for h in (ours, plain):
            for u in users:
                h.create_user(u)
        for h in (ours, floor):
            for u in crowd:
                h.create_user(u)
        # warm-up: first spawns pay for the image's page cache
        sides = {"ours": (ours, {"profile": "seat"}), "plain": (plain, {})}
        for h, opts in sides.values():
            spawn_ready(h, "u0", opts)
            stop(h, "u0")
        times = {"ours": [], "plain": []}
        stops = {"ours": [], "plain": []}
        for i in range(args.rounds):
            order = ("ours", "plain") if i % 2 == 0 else ("plain", "ours")
            for label in order:
                h, opts = sides[label]
                times[label].append(spawn_ready(h, "u1", opts))
                stops[label].append(stop(h, "u1"))
            print(
                f"round {i + 1} ({order[0]} first): ours {times['ours'][-1]:.2f} s, "
                f"plain {times['plain'][-1]:.2f} s",
                file=sys.stderr,
            )
        # Storms in ABBA order (ours, plain, plain, ours): neither side always goes first.
        walls = {"ours": [], "plain": []}
        for label in ("ours", "plain", "plain", "ours")[: 4 if args.storm_pairs > 1 else 2]:
            h, opts = sides[label]
            walls[label].append(storm(h, users, opts))
            print(f"storm of {args.storm}: {label} {walls[label][-1]:.1f} s", file=sys.stderr)
        # Refusal bursts: ours over BURST_SLICES free whole GPUs, then the hub's own floor.
        refusals = {"ours": [], "floor": []}
        for b in range(args.bursts):
            refused, started = burst(ours, crowd, {"profile": "a40"})
            if len(started) != BURST_SLICES:
                raise RuntimeError(f"{len(started)} servers started in a burst, not {BURST_SLICES}")
            refusals["ours"] += refused
            with ThreadPoolExecutor(BURST_SLICES) as pool:
                list(pool.map(lambda u: stop(ours, u), started))
            refused, started = burst(floor, crowd, {})
            refusals["floor"] += refused
            with ThreadPoolExecutor(BURST_SLICES) as pool:
                list(pool.map(lambda u: stop(floor, u), started))
            print(
                f"burst {b + 1} of {args.burst}: refusal p95 ours {p95(refusals['ours']):.2f} s, "
                f"hub floor {p95(refusals['floor']):.2f} s",
                file=sys.stderr,
            )
        ledger = Ledger(f"sqlite:///{ours.workdir}/gpulab.sqlite")
        doubles = len(ledger.double_allocations())
        leaked = len(ledger.open_allocations())
        ledger.close()
        med = {k: statistics.median(v) for k, v in times.items()}
        ratios = [o / p for o, p in zip(times["ours"], times["plain"])]
        storm_ours = statistics.mean(walls["ours"])
        storm_plain = statistics.mean(walls["plain"])
        result = {
            "spawn_ready_median_s_ours": round(med["ours"], 3),
            "spawn_ready_median_s_plain": round(med["plain"], 3),
            "overhead_ratio": round(med["ours"] / med["plain"], 3),
            "spawn_ready_s_ours": spread(times["ours"]),
            "spawn_ready_s_plain": spread(times["plain"]),
            "overhead_ratio_per_round": spread(ratios),
            "stop_median_s_ours": round(statistics.median(stops["ours"]), 3),
            "stop_median_s_plain": round(statistics.median(stops["plain"]), 3),
            "storm_size": args.storm,
            "storm_wall_s_ours": round(storm_ours, 2),
            "storm_wall_s_plain": round(storm_plain, 2),
            "storm_ratio": round(storm_ours / storm_plain, 3),
            "burst_size": args.burst,
            "burst_free_slices": BURST_SLICES,
            "refusals": len(refusals["ours"]),
            "refusal_p95_s": round(p95(refusals["ours"]), 3),
            "refusal_s": spread(refusals["ours"]),
            "refusal_p95_s_hub_floor": round(p95(refusals["floor"]), 3),
            "double_allocations": doubles,
            "open_allocations_after": leaked,
            "rounds": args.rounds,
            "wall_s": round(time.perf_counter() - t_start),
        }
    finally:
        for h in hubs:
            h.stop()
            remove_node_containers(h.workdir.name)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

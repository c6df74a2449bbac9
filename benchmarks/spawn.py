"""Spawn→ready and stop times of GPUDockerSpawner against plain DockerSpawner, on one engine.

Two real hubs (each with its real proxy) run side by side on the same image: one with
GPUDockerSpawner over a declared 32-seat lab (attach mode ``env``: this engine has no NVIDIA
runtime), one with ``dockerspawner.DockerSpawner``, both with the same CPU and memory limits.
Single spawns alternate between the two (ours, plain, ours, …) so drift in the machine's load hits
both alike; then each hub takes storms of 30 concurrent spawns in ABBA order (ours, plain, plain, ours),
wall time from the first request to the last server ready, averaged per side. Spawn→ready is measured as a client sees it: POST, then poll the REST
API every 50 ms until ``ready``.

Usage: ``python benchmarks/spawn.py [--rounds 10] [--storm 30]`` (needs dockerd and the image;
``scripts/test-setup.sh`` provides both). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
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
    profiles = [
        {
            "slug": "seat",
            "display_name": "seat",
            "image": IMAGE,
            "slice": {"kind": "shared"},
            "mem_limit": "512M",
            "cpu_limit": 1.0,
        }
    ]
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
    t0 = time.perf_counter()
    hub.stop_server(user)
    return time.perf_counter() - t0


def storm(hub: Hub, users: list[str], options: dict) -> float:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(users)) as pool:
        list(pool.map(lambda u: spawn_ready(hub, u, options), users))
    wall = time.perf_counter() - t0
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda u: stop(hub, u), users))
    return wall


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--storm", type=int, default=30)
    ap.add_argument("--storm-pairs", type=int, default=2, help="1: one storm each; 2: ABBA order")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="gpulab-bench-spawn-"))
    ours = Hub(tmp / "gpubenchours", ours_config("gpubenchours", args.storm + 2))
    plain = Hub(tmp / "gpubenchplain", plain_config("gpubenchplain"))
    result: dict = {}
    try:
        ours.start()
        plain.start()
        users = [f"u{i}" for i in range(args.storm)]
        for h in (ours, plain):
            for u in users:
                h.create_user(u)
        # warm-up: first spawns pay for the image's page cache
        for h, opts in ((ours, {"profile": "seat"}), (plain, {})):
            spawn_ready(h, "u0", opts)
            stop(h, "u0")
        times = {"ours": [], "plain": []}
        stops = {"ours": [], "plain": []}
        for i in range(args.rounds):
            for label, h, opts in (("ours", ours, {"profile": "seat"}), ("plain", plain, {})):
                times[label].append(spawn_ready(h, "u1", opts))
                stops[label].append(stop(h, "u1"))
            print(
                f"round {i + 1}: ours {times['ours'][-1]:.2f} s, plain {times['plain'][-1]:.2f} s",
                file=sys.stderr,
            )
        # Storms in ABBA order (ours, plain, plain, ours): neither side always goes first.
        walls = {"ours": [], "plain": []}
        for label in ("ours", "plain", "plain", "ours")[: 4 if args.storm_pairs > 1 else 2]:
            h, opts = (ours, {"profile": "seat"}) if label == "ours" else (plain, {})
            walls[label].append(storm(h, users, opts))
            print(f"storm of {args.storm}: {label} {walls[label][-1]:.1f} s", file=sys.stderr)
        storm_ours = statistics.mean(walls["ours"])
        storm_plain = statistics.mean(walls["plain"])
        ledger = Ledger(f"sqlite:///{ours.workdir}/gpulab.sqlite")
        doubles = len(ledger.double_allocations())
        leaked = len(ledger.open_allocations())
        ledger.close()
        med = {k: statistics.median(v) for k, v in times.items()}
        result = {
            "spawn_ready_median_s_ours": round(med["ours"], 3),
            "spawn_ready_median_s_plain": round(med["plain"], 3),
            "overhead_ratio": round(med["ours"] / med["plain"], 3),
            "stop_median_s_ours": round(statistics.median(stops["ours"]), 3),
            "stop_median_s_plain": round(statistics.median(stops["plain"]), 3),
            "storm_size": args.storm,
            "storm_wall_s_ours": round(storm_ours, 2),
            "storm_wall_s_plain": round(storm_plain, 2),
            "storm_ratio": round(storm_ours / storm_plain, 3),
            "double_allocations": doubles,
            "open_allocations_after": leaked,
            "rounds": args.rounds,
        }
    finally:
        for h in (ours, plain):
            h.stop()
            remove_node_containers(h.workdir.name)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

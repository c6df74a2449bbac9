"""A 30-spawn storm across the three nodes of a real Docker Swarm: gpulab's Swarm backend against
plain dockerspawner ``SwarmSpawner``, on the same Swarm and image, interleaved.

- **ours**: a hub with ``GPUSwarmSpawner`` and the gpulab service; two node agents report two
  Tesla T4s each on gpulab-swn2 and gpulab-swn3 (fake NVML, ``tests/agent_fakes.py``), which the
  lab splits in 5 seats each. A storm is ``--gpu`` users (20) spawning a seat (each service
  pinned to its slice's node, ``NVIDIA_VISIBLE_DEVICES`` its GPU's UUID) and the others (10)
  a CPU profile (any node), all at once: every node gets servers.
- **plain**: a hub with ``dockerspawner.SwarmSpawner``, changed only so that it works where the
  kernel has no IPVS (this machine): its port published in host mode and the server reached at
  its task's node address (``HostPortSwarmSpawner`` below, what dockerspawner's own docstring of
  ``get_ip_and_port`` suggests for such hosts). The same users, the same image, the same CPU and
  memory limits; Swarm places every task.

Rounds run in ABBA order (ours, plain, plain, ours, …) so neither side always meets the machine
as the other left it. A storm's wall time runs from the first request to the last server ready
(the REST API polled every 0.2 s). During each of our storms, at its peak, the ledger is asked for
slices held twice (``double_allocations``, always 0: the database forbids it) and every GPU
server's task is checked against its slice's node (``misplaced``: tasks not on it).

Measured on the 2-core development machine, shared with other runs (two ABBA rounds)::

    {"nodes": 3, "nodes_with_servers": 3, "users": 30, "gpu_users": 20, "storm_wall_s_ours": 37.97,
     "storm_wall_s_plain": 37.25, "storm_ratio": 1.019, "double_allocations": 0, "misplaced": 0,
     "walls_ours": [30.7, 40.6, 38.52, 37.41], "walls_plain": [37.91, 36.6, 38.98, 35.77]}

Usage: ``python benchmarks/swarm.py [--rounds 2] [--users 30] [--gpu 20]``; needs the test Swarm
(``scripts/ensure-swarm.sh``, which ``scripts/test-setup.sh`` runs). About 5 minutes on the 2-core
development machine; ``--small`` (the test suite's run): 3 users, one storm each. The last line
is one JSON object: ``nodes``, ``storm_wall_s_ours``,
``storm_wall_s_plain`` (medians), ``storm_ratio`` (ours / plain; target <= 1.10),
``double_allocations``, ``misplaced``, and each round's walls.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from agent_fakes import bench_uuid  # noqa: E402
from e2e_support import IMAGE  # noqa: E402
from hubtools import Hub, make_work_folder, remove_work_folder  # noqa: E402
from swarm_support import (  # noqa: E402
    HOST_IP,
    MANAGER,
    NODES,
    SwarmHub,
    require_swarm,
    sdocker,
)

LIMITS = {"mem_limit": "512M", "cpu_limit": 1.0}
SEATS = {
    bench_uuid(n, i): {"seats": 5, "memory_per_seat": "3GiB", "compute_share": 0.2}
    for n in ("n2", "n3")
    for i in range(2)
}
PROFILES = [
    {"slug": "seat", "display_name": "T4 seat", "image": IMAGE, "slice": {"kind": "shared"},
     "default": True, **LIMITS},
    {"slug": "cpu", "display_name": "CPU only", "image": IMAGE, **LIMITS},
]  # fmt: skip
OURS = f"""
c.JupyterHub.concurrent_spawn_limit = 100
c.Spawner.poll_interval = 30  # JupyterHub's default, as the plain hub's (the tests poll faster)
c.GPULab.shared_devices = {SEATS!r}
c.GPULab.profiles = {PROFILES!r}
c.GPULab.group_policies = {{}}
c.GPULab.default_policy = {{"max_slices_per_user": 1}}
"""

PLAIN = f"""
import asyncio
from dockerspawner import SwarmSpawner

class HostPortSwarmSpawner(SwarmSpawner):
    # SwarmSpawner reaches a server through the ingress mesh or the service's virtual IP, which
    # need IPVS: publish the port on the task's node instead and connect there.
    async def get_ip_and_port(self):
        while True:
            tasks = await self.docker("tasks", filters={{"service": self.service_name, "desired-state": "running"}})
            ports = ((tasks[0].get("Status") or {{}}).get("PortStatus") or {{}}).get("Ports") if tasks else None
            if ports:
                break
            await asyncio.sleep(0.2)
        node = await self.docker("inspect_node", tasks[0]["NodeID"])
        return node["Status"]["Addr"], ports[0]["PublishedPort"]

c.JupyterHub.ip = {HOST_IP!r}
c.JupyterHub.spawner_class = HostPortSwarmSpawner
c.JupyterHub.concurrent_spawn_limit = 100
c.SwarmSpawner.image = {IMAGE!r}
c.SwarmSpawner.prefix = "plain"
c.SwarmSpawner.mem_limit = "512M"
c.SwarmSpawner.cpu_limit = 1.0
c.SwarmSpawner.extra_endpoint_spec = {{"ports": [{{"Protocol": "tcp", "TargetPort": 8888, "PublishMode": "host"}}]}}
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 120
"""


def storm(hub: Hub, users: list[str], profiles: dict[str, str]) -> float:
    """Spawn every user at once; seconds from the first request to the last server ready."""
    t0 = time.monotonic()
    with ThreadPoolExecutor(len(users)) as pool:
        codes = list(
            pool.map(
                lambda u: hub.spawn(u, {"profile": profiles[u]} if profiles else {}).status_code,
                users,
            )
        )
    bad = [c for c in codes if c not in (201, 202)]
    if bad:
        raise RuntimeError(f"spawns refused: {bad}\n{hub.log_tail(30)}")
    waiting = set(users)
    while waiting:
        waiting = {u for u in waiting if not (hub.server(u) or {}).get("ready")}
        if time.monotonic() - t0 > 600:
            raise TimeoutError(f"{sorted(waiting)} not ready in 600 s\n{hub.log_tail(30)}")
        if waiting:
            time.sleep(0.2)
    return time.monotonic() - t0


def stop_all(hub: Hub, users: list[str]) -> None:
    with ThreadPoolExecutor(len(users)) as pool:
        list(pool.map(lambda u: hub.api("DELETE", hub.server_path(u)), users))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and any(hub.server(u) for u in users):
        time.sleep(0.5)


def check_ours(hub: SwarmHub) -> tuple[int, int, set[str]]:
    """``(double allocations, misplaced GPU tasks, nodes with servers)`` at a storm's peak."""
    led = hub.ledger()
    try:
        doubles = len(led.double_allocations())
        slices = {s["id"]: s for s in led.slices()}
        held = {a.container_name: a for a in led.open_allocations()}
    finally:
        led.close()
    misplaced = 0
    for name, a in held.items():
        if hub.task(name)["node"] != slices[a.slice_id]["node"]:
            misplaced += 1
    names = sdocker("service", "ls", "--format", "{{.Name}}").stdout.split()
    nodes = {hub.task(n)["node"] for n in names if n.startswith(hub.prefix + "-")}
    return doubles, misplaced, nodes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2, help="ABBA pairs of storms")
    ap.add_argument("--users", type=int, default=30)
    ap.add_argument("--gpu", type=int, default=20, help="users of the storm who take a GPU seat")
    ap.add_argument("--small", action="store_true", help="3 users (2 on seats), one storm each")
    args = ap.parse_args()
    if args.small:
        args.rounds, args.users, args.gpu = 1, 3, 2
    require_swarm()
    users = [f"u{i:02d}" for i in range(args.users)]
    profiles = {u: "seat" if i < args.gpu else "cpu" for i, u in enumerate(users)}
    tmp = make_work_folder("gpulab-bench-swarm-")
    ours = SwarmHub(
        tmp / "ours", extra=OURS, boards={"gpulab-swn2": "bench-n2", "gpulab-swn3": "bench-n3"}
    )
    plain = Hub(tmp / "plain", PLAIN, env={"DOCKER_HOST": MANAGER}, gateway=HOST_IP)
    plain.url = f"http://{HOST_IP}:{plain.port}"
    walls: dict[str, list[float]] = {"ours": [], "plain": []}
    doubles = misplaced = 0
    spread: set[str] = set()
    try:
        ours.start()
        plain.start()
        for u in users:
            ours.create_user(u)
            plain.create_user(u)
        order = []
        for _ in range(args.rounds):
            order += ["ours", "plain"] if args.small else ["ours", "plain", "plain", "ours"]
        for i, side in enumerate(order):
            hub = ours if side == "ours" else plain
            wall = storm(hub, users, profiles if side == "ours" else {})
            walls[side].append(wall)
            if side == "ours":
                d, m, nodes = check_ours(ours)
                doubles, misplaced, spread = doubles + d, misplaced + m, spread | nodes
            print(f"storm {i + 1}/{len(order)} {side}: {wall:.1f} s", file=sys.stderr, flush=True)
            stop_all(hub, users)
    finally:
        ours.close()
        plain.stop()
        ids = sdocker("service", "ls", "-q", "--filter", "name=plain-").stdout.split()
        if ids:
            sdocker("service", "rm", *ids, check=False)
    med_ours, med_plain = statistics.median(walls["ours"]), statistics.median(walls["plain"])
    remove_work_folder(tmp)
    print(
        json.dumps(
            {
                "nodes": len(NODES),
                "nodes_with_servers": len(spread),
                "users": args.users,
                "gpu_users": args.gpu,
                "storm_wall_s_ours": round(med_ours, 2),
                "storm_wall_s_plain": round(med_plain, 2),
                "storm_ratio": round(med_ours / med_plain, 3),
                "double_allocations": doubles,
                "misplaced": misplaced,
                "walls_ours": [round(w, 2) for w in walls["ours"]],
                "walls_plain": [round(w, 2) for w in walls["plain"]],
            }
        )
    )


if __name__ == "__main__":
    main()

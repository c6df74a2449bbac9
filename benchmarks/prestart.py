"""Pre-start of a course: our service against a plain script over plain DockerSpawner.

Two real hubs (each with its proxy) on one engine and one image (the lab image, which has git and
nbgitpuller):

- **ours**: GPUDockerSpawner over a declared lab of shared seats (every server claims a slice),
  the gpulab service and a course of ``--students`` students whose content is a real git
  repository (``git daemon`` on the Docker bridge). A staff member presses "Start all"
  (``POST /services/gpulab/api/courses/<slug>/start``); the service starts every course server
  through the hub API with the course's token, in batches of ``concurrent_spawn_limit``, and each
  server pulls the repository into its home volume before it starts.
- **plain**: ``dockerspawner.DockerSpawner`` with the same image, home volumes and limits, its
  servers pulling the same repository at start as an admin without gpulab would have them do
  (``c.DockerSpawner.cmd``: nbgitpuller's ``gitpuller <repo> main course`` in the same image,
  under the same timeout, then ``jupyterhub-singleuser``); a script POSTs
  ``/hub/api/users/<u>/servers/<slug>`` for every student at once (the hub's
  ``concurrent_spawn_limit`` applies) — no profile, no slice. So the ratio is what the slices,
  the course's token and the service's batches cost, not the pull.

Both are timed the same way, from outside: from the first request until the hub lists every
student's server as ready (``GET /hub/api/users?state=ready``, every 0.5 s). Rounds run in ABBA
order (ours, plain, plain, ours, …) so neither side always meets the machine as the other left it;
all servers are stopped and their containers removed, untimed, between rounds.

Usage: ``python benchmarks/prestart.py [--students 60] [--rounds 2]`` (dockerd, the lab image and
git; ``scripts/test-setup.sh`` provides them); ``--small``: 3 students, one round each (the test
suite's run). The last line is one JSON object with ``prestart_wall_s_ours``,
``prestart_wall_s_plain``, ``prestart_ratio``, ``ready_pct`` (ours, its worst round),
``content_present_pct`` (ours, after its first round), ``ready_pct_plain``,
``content_present_pct_plain`` and
``double_allocations``.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import requests  # noqa: E402
from course_support import (  # noqa: E402
    LAB_IMAGE,
    GitServer,
    course_hub,
    read_home,
    remove_volumes,
    work_of,
)
from e2e_support import remove_node_containers  # noqa: E402
from hubtools import Hub, make_work_folder, remove_work_folder  # noqa: E402
from service_support import PREFIX, login, user_token, wait_for_service  # noqa: E402

from jupyterhub_gpulab.courses.content import PULL_TIMEOUT_S  # noqa: E402
from jupyterhub_gpulab.ledger import Ledger  # noqa: E402
from jupyterhub_gpulab.ledger.schema import allocations  # noqa: E402

SLUG = "bench"
LIMITS = 'c.DockerSpawner.mem_limit = "512M"\nc.DockerSpawner.cpu_limit = 1.0\n'
COMMON = f"""
c.JupyterHub.concurrent_spawn_limit = 100
c.Spawner.start_timeout = 300
c.Spawner.http_timeout = 240
{LIMITS}
"""


def seats(n: int) -> list[dict]:
    return [
        {
            "uuid": f"GPU-bench-{i}",
            "index": i,
            "name": "Tesla P40",
            "memory": "24GiB",
            "shared": {"seats": 8, "memory_per_seat": "3GiB", "compute_share": 0.125},
        }
        for i in range((n + 7) // 8)
    ]


def ours_hub(tmp: Path, repo: GitServer, n: int) -> Hub:
    course = {
        "slug": SLUG,
        "title": "Benchmark course",
        "profiles": ["seat"],
        "content": [{"repo": repo.url, "dir": "course"}],
    }
    profile = {
        "slug": "seat",
        "display_name": "Shared seat",
        "image": LAB_IMAGE,
        "slice": {"kind": "shared"},
        "mem_limit": "512M",
        "cpu_limit": 1.0,
    }
    extra = (
        COMMON
        + f"""
c.GPULab.inventory = {seats(n)!r}
c.GPULab.profiles = c.GPULab.profiles + [{profile!r}]
c.GPULab.default_policy = {{"max_slices_per_user": 1}}
c.JupyterHub.cleanup_servers = True
"""
    )
    return course_hub(tmp, course, extra=extra)


def plain_pull(repo: GitServer) -> list[str]:
    """The plain side's container command: pull ``repo`` into ``~/course`` with nbgitpuller (a
    failure is reported and the server starts anyway, as ours does), then start the server."""
    script = (
        f"cd /home/jovyan && timeout {PULL_TIMEOUT_S} gitpuller {repo.url} main course"
        ' || echo "could not pull" >&2; exec "$@"'
    )
    return ["sh", "-c", script, "plain-course", "jupyterhub-singleuser"]


def plain_hub(tmp: Path, repo: GitServer) -> Hub:
    node = "gpulabpln" + secrets.token_hex(3)
    return Hub(
        tmp / node,
        COMMON
        + f"""
c.JupyterHub.spawner_class = "dockerspawner.DockerSpawner"
c.DockerSpawner.image = {LAB_IMAGE!r}
c.DockerSpawner.pull_policy = "never"
c.DockerSpawner.remove = True
c.DockerSpawner.prefix = {node!r}
c.DockerSpawner.volumes = {{"{node}-home-{{username}}": "/home/jovyan"}}
c.DockerSpawner.cmd = {plain_pull(repo)!r}
""",
    )


def content_present(node: str, users: list[str], *, course: bool) -> float:
    """Per cent of ``users`` whose volume on hub ``node`` holds the pulled lesson: their
    course-work volume on ours (``course``: where a course server works), their home on plain."""
    vols = [work_of(node, SLUG, u) if course else f"{node}-home-{u}" for u in users]
    with ThreadPoolExecutor(4) as pool:
        found = list(pool.map(lambda v: read_home(v, "course/lesson1.py"), vols))
    return 100.0 * sum(1 for f in found if f) / len(users)


def ready_count(hub: Hub, users: set[str]) -> int:
    r = hub.api("GET", "/users?state=ready&limit=1000")
    r.raise_for_status()
    body = r.json()
    items = body["items"] if isinstance(body, dict) else body
    return sum(
        1
        for u in items
        if u["name"] in users and (u.get("servers") or {}).get(SLUG, {}).get("ready")
    )


def wait_all_ready(hub: Hub, users: set[str], t0: float, timeout: float = 900) -> tuple[float, int]:
    n = 0
    while time.perf_counter() - t0 < timeout:
        n = ready_count(hub, users)
        if n == len(users):
            return time.perf_counter() - t0, n
        time.sleep(0.5)
    return time.perf_counter() - t0, n


def stop_all(hub: Hub, users: list[str], node: str) -> None:
    def one(u):
        hub.api("DELETE", f"/users/{u}/servers/{SLUG}")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, users))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        r = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"name={node}"], capture_output=True, text=True
        )
        active = hub.api("GET", "/users?state=active&limit=1000").json()
        items = active["items"] if isinstance(active, dict) else active
        if not r.stdout.strip() and not any(
            SLUG in (u.get("servers") or {}) for u in items if u["name"] in users
        ):
            return
        time.sleep(1)
    raise TimeoutError(f"servers of {node} did not stop")


def round_ours(hub: Hub, token: str, users: list[str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    r = requests.post(
        f"{hub.url}{PREFIX}api/courses/{SLUG}/start",
        headers={"Authorization": f"token {token}"},
        timeout=60,
    )
    if r.status_code != 202:
        raise RuntimeError(f"start all: {r.status_code} {r.text}")
    return wait_all_ready(hub, set(users), t0)


def round_plain(hub: Hub, users: list[str]) -> tuple[float, int]:
    t0 = time.perf_counter()

    def one(u):
        r = hub.api("POST", f"/users/{u}/servers/{SLUG}", json={})
        if r.status_code not in (201, 202):
            raise RuntimeError(f"spawn {u}: {r.status_code} {r.text}")

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, users))
    return wait_all_ready(hub, set(users), t0)


def double_allocations(ledger: Ledger) -> int:
    """Slices held by two open allocations at once (the unique index makes this 0), plus
    allocations whose time ranges overlap on one slice in the history."""
    import sqlalchemy as sa

    with ledger.engine.connect() as conn:
        rows = conn.execute(
            sa.select(allocations.c.slice_id, allocations.c.started_at, allocations.c.ended_at)
        ).all()
    by_slice: dict[str, list] = {}
    for sid, s, e in rows:
        by_slice.setdefault(sid, []).append((s, e))
    overlaps = 0
    for spans in by_slice.values():
        spans.sort(key=lambda x: x[0])
        for (_s1, e1), (s2, _e2) in zip(spans, spans[1:]):
            if e1 is None or e1 > s2:
                overlaps += 1
    return overlaps + len(ledger.double_allocations())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--students", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=2, help="ABBA pairs (each side runs this many)")
    ap.add_argument("--small", action="store_true", help="3 students, one round each")
    args = ap.parse_args(argv)
    if args.small:
        args.students, args.rounds = 3, 1
    n = args.students
    users = [f"st{i:03d}" for i in range(n)]
    tmp = make_work_folder("gpulab-prestart-")
    repo = GitServer(tmp / "git")
    repo.commit({"lesson1.py": "print('lesson 1')\n"}, "lesson 1")
    ours = ours_hub(tmp, repo, n)
    plain = plain_hub(tmp, repo)
    walls: dict[str, list[float]] = {"ours": [], "plain": []}
    ready: dict[str, list[float]] = {"ours": [], "plain": []}
    content: dict[str, list[float]] = {"ours": [], "plain": []}
    doubles = 0
    try:
        ours.start()
        plain.start()
        wait_for_service(ours)
        for u in users:
            ours.create_user(u, [SLUG])
            plain.create_user(u)
        ours.create_user("prof", [f"{SLUG}-staff"])
        token = user_token(ours, login(ours, "prof"), "prof")
        order = []
        for _ in range(args.rounds):
            order += ["ours", "plain"] if len(order) % 4 == 0 else ["plain", "ours"]
        for i, side in enumerate(order):
            hub, node = (ours, ours.node) if side == "ours" else (plain, plain.workdir.name)
            if side == "ours":
                wall, got = round_ours(ours, token, users)
            else:
                wall, got = round_plain(plain, users)
            ready[side].append(100.0 * got / n)
            if len(content[side]) < 1:  # the first round's pull (later ones merge onto it)
                content[side].append(content_present(node, users, course=side == "ours"))
            stop_all(hub, users, node)
            walls[side].append(wall)
            print(f"round {i + 1} {side}: {wall:.1f} s, {got} of {n} ready", flush=True)
        led = Ledger(f"sqlite:///{ours.workdir}/gpulab.sqlite")
        doubles = double_allocations(led)
        led.close()
    finally:
        for hub, node in ((ours, ours.node), (plain, plain.workdir.name)):
            hub.stop()
            remove_node_containers(node)
            remove_volumes(node)
        repo.stop()
    o, p = statistics.mean(walls["ours"]), statistics.mean(walls["plain"])
    result = {
        "students": n,
        "rounds": args.rounds,
        "prestart_wall_s_ours": round(o, 2),
        "prestart_wall_s_plain": round(p, 2),
        "prestart_wall_s_ours_each": [round(x, 2) for x in walls["ours"]],
        "prestart_wall_s_plain_each": [round(x, 2) for x in walls["plain"]],
        "prestart_ratio": round(o / p, 3),
        "ready_pct": round(min(ready["ours"]), 1),
        "content_present_pct": round(min(content["ours"]), 1),
        "ready_pct_plain": round(min(ready["plain"]), 1),
        "content_present_pct_plain": round(min(content["plain"]), 1),
        "double_allocations": doubles,
    }
    remove_work_folder(tmp)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

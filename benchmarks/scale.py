"""A storm of 1,000 servers starting at once on one real hub: GPUDockerSpawner with the gpulab
service over a declared lab of 1,200 slices, against the same hub with plain DockerSpawner.

Two real JupyterHubs (subprocesses, each with its real configurable-http-proxy), configured alike
but for the spawner: ``ours`` runs GPUDockerSpawner (profiles, entitlement, a claim in the ledger
per start, the continuous reconcile) and the managed gpulab service (``configure_service``) over a
declared lab of 1,200 slices (84 A100s in 7 MIG 1g.10gb instances, 51 T4s in 12 shared seats);
``plain`` runs ``dockerspawner.DockerSpawner``. Both raise ``concurrent_spawn_limit`` and
``active_server_limit`` to the number of users and keep JupyterHub's other defaults.

What is stood in, and why: a container per user does not fit on 2 cores, so (as JupyterHub's own
load tests do) the servers are light stand-ins. The Docker engine is answered at the same seam on
both sides, DockerSpawner's ``docker(method, …)`` coroutine (tests/enginefree_support.py: its
``EngineRecorder``, with ``HubEngine`` sharing one dict of containers among a hub's spawners, so
the reconcile lists what the spawners made); every container's published port is that of one
shared stand-in single-user server (tests/standin_singleuser.py), which answers the hub's
readiness check (``GET /user/<name>/api``) for any user, so the proxy routes all 1,000 servers to
one process. Both sides do the same engine work and get the same request body
(``{"profile": …}``, which JupyterHub saves on both); what differs is the spawner and the service.

Rounds are interleaved: ``--rounds`` pairs in ABBA order (ours, plain, plain, ours for 2). Each
round (users created through the REST API beforehand, untimed): every user POSTs
``/users/<name>/server`` at once (one HTTP client, no bound of its own: a 429 from JupyterHub is
retried after its Retry-After), and the wall time runs until the paged users API
(``?state=ready``) lists every user ready. Then (untimed) every server is stopped at once; on
ours, the ledger is read while all are running (``open_at_peak``, ``double_allocations``: two
open allocations on one slice) and after the stops (``open_allocations_after``).

What 1,000 at once meets in JupyterHub itself, on both hubs (measured here, 2 cores):

- ``Spawner.start_timeout`` (60 s) and ``http_timeout`` (30 s) are raised to ``--start-timeout``
  (600 s) on both hubs. With JupyterHub's defaults 833 of 1,000 starts gave up ("failed to start
  in 60 seconds"): the hub's one event loop runs each request's spawn prelude (its API token,
  OAuth client and database commits, 40-115 ms a spawn here, 1,000 of them queued) and the
  timeout counts from the ``start()`` call while every step of the start waits behind the
  preludes still queued (the log's "Event loop was unresponsive for at least 7 s").
- The proxy answers 503 ("read ECONNRESET") for a few POSTs: it opens a connection to the hub
  per request and tornado listens with a queue of 128 (``tornado.netutil._DEFAULT_BACKLOG``),
  which 1,000 at once overflow (``listen_overflows``: the machine's ``TcpExt ListenOverflows``
  over the run). Those never reached JupyterHub and are sent again.
- JupyterHub can answer 500 (``InvalidStateError: Exception is not set``, handlers/base.py's
  ``finish_spawn_future.exception()`` on a spawn not yet done) when its ``slow_spawn_timeout``
  check polls a start still in flight; the start goes on, so a 500 is counted (``answers``) and
  the wait for ready decides.

Figures: ``storm_wall_s_ours``/``_plain`` (mean per side), ``storm_ratio`` (ours / plain), named
``storm_1000_ratio`` too when ``--users`` is 1,000 (the target: at most 1.10), and the peak
resident memory (``VmHWM``, MiB) of each hub process and of the gpulab service. Each round
also says where the CPU went until every server was ready (``cpu_s``: the hub process, the
service on ours, and the whole machine: the proxy, the stand-in and this client are the rest).

Usage: ``python benchmarks/scale.py [--users 1000] [--rounds 2]`` (about 6 minutes on the 2-core
machine; needs the proxy, scripts/ensure-proxy.sh, and no Docker engine). ``--small`` (the test
suite's run, 20-40 s: 20 users, one round each side, a 26-slice lab) checks that it runs; its
figures say nothing. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import aiohttp
import requests

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))

from hubtools import Hub, free_port, make_work_folder, remove_work_folder  # noqa: E402
from service_support import ledger_for, service_config, service_pid, wait_for_service  # noqa: E402

from jupyterhub_gpulab.service.app import GPULabService  # noqa: E402

TARGET_RATIO = 1.10
PAGE = 200  # JupyterHub's largest page of the users API
PAGINATED = {"Accept": "application/jupyterhub-pagination+json"}

COMMON = """
import sys
sys.path.insert(0, {tests!r})
from enginefree_support import NO_ENGINE, HubEngine
c.JupyterHub.concurrent_spawn_limit = {users}
c.JupyterHub.active_server_limit = {users}
c.JupyterHub.last_activity_interval = 300  # JupyterHub's default (hubtools' base: 5 s)
c.DockerSpawner.client_kwargs = NO_ENGINE  # only the docker() seam answers
c.DockerSpawner.image = "gpulab/singleuser:standin"
c.DockerSpawner.pull_policy = "never"
c.DockerSpawner.remove = True
c.Spawner.start_timeout = {start_timeout}
c.Spawner.http_timeout = {start_timeout}
"""

PLAIN = """
from enginefree_support import EngineRecorder


class StandinDockerSpawner(HubEngine, EngineRecorder):
    host_port = "{port}"


c.JupyterHub.spawner_class = StandinDockerSpawner
"""

OURS = """
from enginefree_support import EngineFreeSpawner


class StandinGPUDockerSpawner(HubEngine, EngineFreeSpawner):
    host_port = "{port}"


c.JupyterHub.spawner_class = StandinGPUDockerSpawner
c.GPULab.node_name = "scale-node"
c.GPULab.inventory_source = "declared"
c.GPULab.inventory = {lab!r}
c.GPULab.profiles = {profiles!r}
c.GPULab.group_policies = {{}}
c.GPULabService.hub_poll_interval = {hub_poll}  # the service's defaults, not the tests' 2 s
c.GPULabService.sample_interval = {sample}
for _service in c.JupyterHub.services:  # a loaded 2-core machine: more than JupyterHub's 10 s
    if _service.get("name") == "gpulab":
        _service["timeout"] = 120
"""

PROFILES = [
    {"slug": "mig", "display_name": "MIG 1g.10gb", "image": "gpulab/singleuser:standin",
     "slice": {"kind": "mig", "mig_profile": "1g.10gb"}},
    {"slug": "seat", "display_name": "Shared seat", "image": "gpulab/singleuser:standin",
     "slice": {"kind": "shared"}},
]  # fmt: skip


def lab_spec(a100: int, t4: int) -> list[dict]:
    """``a100`` A100-80GBs in 7 MIG 1g.10gb instances each, then ``t4`` T4s in 12 seats each
    (the most seats of 1 GiB a 16 GiB T4 holds with each seat's CUDA context counted)."""
    spec = [
        {"uuid": f"GPU-a100-{i:04d}", "index": i, "name": "NVIDIA A100-SXM4-80GB",
         "memory": "80GiB",
         "mig": [{"uuid": f"MIG-{i:04d}-{j}", "profile": "1g.10gb"} for j in range(7)]}
        for i in range(a100)
    ]  # fmt: skip
    spec += [
        {"uuid": f"GPU-t4-{i:04d}", "index": a100 + i, "name": "Tesla T4", "memory": "16GiB",
         "shared": {"seats": 12, "memory_per_seat": "1GiB", "compute_share": 0.08}}
        for i in range(t4)
    ]  # fmt: skip
    return spec


def slices(spec: list[dict]) -> int:
    return sum(len(d.get("mig", ())) + d.get("shared", {}).get("seats", 0) for d in spec)


def options_for(side: str, i: int) -> dict:
    """User ``i``'s spawn options, the same on both sides (a MIG instance or a seat): JupyterHub
    saves them as the next default whatever the spawner (a write); DockerSpawner ignores them."""
    return {"profile": ("mig", "seat")[i % 2]}


def make_hubs(
    tmp: Path, users: int, port: int, spec: list[dict], start_timeout: float
) -> dict[str, Hub]:
    common = COMMON.format(tests=str(TESTS), users=users, start_timeout=start_timeout)
    service_port = free_port()
    defaults = GPULabService.class_traits()
    ours_extra = OURS.format(
        port=port, lab=spec, profiles=PROFILES,
        hub_poll=defaults["hub_poll_interval"].default(),
        sample=defaults["sample_interval"].default(),
    )  # fmt: skip
    ours = Hub(
        tmp / "ours",
        service_config(service_port, tmp / "ours") + common + ours_extra,
        gateway="127.0.0.1",
    )
    ours.service_port = service_port
    plain = Hub(tmp / "plain", common + PLAIN.format(port=port), gateway="127.0.0.1")
    return {"ours": ours, "plain": plain}


def start_standin(tmp: Path, port: int) -> subprocess.Popen:
    """The one stand-in single-user server every container's port leads to."""
    proc = subprocess.Popen(
        [sys.executable, str(TESTS / "standin_singleuser.py")],
        env=dict(os.environ, JUPYTERHUB_SERVICE_URL=f"http://127.0.0.1:{port}/", HOME=str(tmp)),
    )
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            try:
                if requests.get(f"http://127.0.0.1:{port}/user/x/api", timeout=2).ok:
                    return proc
            except requests.RequestException:
                time.sleep(0.1)
        raise TimeoutError("the stand-in single-user server did not answer")
    except BaseException:  # the timeout, or a SIGTERM while it starts: it must not outlive us
        proc.kill()
        proc.wait(10)
        raise


class Client:
    """The hub's REST API (through its proxy) with the hub's service token, on aiohttp."""

    def __init__(self, hub: Hub, session: aiohttp.ClientSession):
        self.base = hub.url + "/hub/api"
        self.headers = {"Authorization": f"token {hub.token}"}
        self.session = session

    async def call(self, method: str, path: str, **kw) -> tuple[int, dict | list | None, dict]:
        headers = {**self.headers, **kw.pop("headers", {})}
        async with self.session.request(method, self.base + path, headers=headers, **kw) as r:
            body = await r.read()
            if r.content_type != "application/json":  # the proxy's or tornado's error page
                return r.status, {"text": body[:200].decode(errors="replace")}, dict(r.headers)
            return r.status, (json.loads(body) if body else None), dict(r.headers)

    async def count(self, state: str) -> int:
        """Users with a server in ``state``: ``active`` from one page's total; ``ready`` (which
        JupyterHub filters page by page, after its count) by reading every page."""
        limit = 1 if state == "active" else PAGE
        status, page, _ = await self.call(
            "GET", f"/users?state={state}&limit={limit}", headers=PAGINATED
        )
        assert status == 200, (status, page)
        total = page["_pagination"]["total"]
        if state == "active":
            return total
        n = len(page["items"])
        for offset in range(PAGE, total, PAGE):
            status, page, _ = await self.call(
                "GET", f"/users?state={state}&offset={offset}&limit={PAGE}", headers=PAGINATED
            )
            assert status == 200, (status, page)
            n += len(page["items"])
        return n

    async def wait_count(self, state: str, want: int, timeout: float, hub: Hub) -> None:
        """Until ``want`` users have a server in ``state``; waiting for ``ready``, fails as soon
        as fewer than ``want`` are active (a spawn failed after JupyterHub took it)."""
        deadline = time.monotonic() + timeout
        while (n := await self.count(state)) != want:
            if state == "ready" and (active := await self.count("active")) < want:
                raise RuntimeError(
                    f"{want - active} of {want} spawns failed:\n"
                    + hub.log_tail(40, skip_polls=True)
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{n} {state} servers, not {want}, after {timeout:.0f} s:\n"
                    + hub.log_tail(40, skip_polls=True)
                )
            await asyncio.sleep(0.5)


async def spawn(api: Client, user: str, options: dict, answers: Counter) -> None:
    """POST the user's server until JupyterHub takes it: a 429 again after its Retry-After, the
    proxy's 503 (its connection to the hub reset: the hub's listen queue overflowed) again at
    once. A 500 is counted and left to the wait for ready (JupyterHub answers one when its
    ``slow_spawn_timeout`` poll races the start, which goes on)."""
    while True:
        status, body, headers = await api.call("POST", f"/users/{user}/server", json=options)
        answers[status] += 1
        if status in (201, 202, 500) or (status == 400 and "is pending" in str(body)):
            return
        if status == 429:
            await asyncio.sleep(float(headers.get("Retry-After", 1)))
        elif status != 503 or "text" not in body:  # JupyterHub's own errors are JSON
            raise RuntimeError(f"spawn of {user}: {status} {body}")


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used, its threads included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_s() -> float:
    """CPU seconds every process of the machine has used (``/proc/stat``, all but idle)."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


async def storm(hub: Hub, side: str, users: list[str], timeout: float) -> dict:
    """One round on ``hub``: the storm's wall time and answers, the CPU seconds the hub, the
    service (ours) and the whole machine used until every server was ready, the ledger while
    every server runs and after the stops (ours)."""
    pids = {"hub": hub.proc.pid}
    if side == "ours":
        pids["service"] = service_pid(hub)
    limits = {"connector": aiohttp.TCPConnector(limit=0), "timeout": aiohttp.ClientTimeout(timeout)}
    async with aiohttp.ClientSession(**limits) as session:
        api = Client(hub, session)
        answers: Counter = Counter()
        cpu0 = {k: cpu_s(p) for k, p in pids.items()}
        busy0 = machine_busy_s()
        t0 = time.perf_counter()
        await asyncio.gather(
            *(spawn(api, u, options_for(side, i), answers) for i, u in enumerate(users))
        )
        await api.wait_count("ready", len(users), timeout, hub)
        out = {"wall_s": time.perf_counter() - t0, "answers": dict(answers)}
        out["cpu_s"] = {k: round(cpu_s(p) - cpu0[k], 1) for k, p in pids.items()}
        out["cpu_s"]["machine"] = round(machine_busy_s() - busy0, 1)
        ledger = ledger_for(hub) if side == "ours" else None
        if ledger is not None:
            out["open_at_peak"] = len(ledger.open_allocations())
            out["double_allocations"] = len(ledger.double_allocations())
        stops = await asyncio.gather(*(api.call("DELETE", f"/users/{u}/server") for u in users))
        if odd := [s for s, _, _ in stops if s not in (202, 204)]:
            raise RuntimeError(f"stops answered {Counter(odd)}")
        await api.wait_count("active", 0, timeout, hub)
    if ledger is not None:
        out["double_allocations"] += len(ledger.double_allocations())
        out["open_allocations_after"] = len(ledger.open_allocations())
        ledger.close()
    return out


def peak_mib(pid: int) -> float:
    """``VmHWM`` of ``/proc/<pid>/status``: the process's peak resident memory, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise LookupError(f"no VmHWM for {pid}")


def listen_overflows() -> int:
    """The machine's ``TcpExt ListenOverflows`` (every process's, since boot)."""
    head, values = [ln.split() for ln in Path("/proc/net/netstat").read_text().splitlines()][:2]
    return int(values[head.index("ListenOverflows")])


def create_users(hub: Hub, users: list[str]) -> None:
    for i in range(0, len(users), PAGE):
        r = hub.api("POST", "/users", json={"usernames": users[i : i + PAGE]}, timeout=300)
        assert r.status_code == 201, r.text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2, help="pairs of storms; 2: ABBA order")
    ap.add_argument("--timeout", type=float, default=900, help="seconds a storm or stop may take")
    ap.add_argument("--start-timeout", type=float, default=600, help="both hubs' start_timeout "
                    "and http_timeout (JupyterHub's: 60, 30 s; module docstring)")  # fmt: skip
    ap.add_argument("--small", action="store_true", help="runs, measures nothing: tiny sizes")
    args = ap.parse_args(argv)
    spec = lab_spec(2, 1) if args.small else lab_spec(84, 51)  # 26 or 1,200 slices
    if args.small:
        args.users, args.rounds = 20, 1
    mig = sum(len(d.get("mig", ())) for d in spec)
    if (args.users + 1) // 2 > mig or args.users // 2 > slices(spec) - mig:
        ap.error(f"--users {args.users} do not fit the lab's {slices(spec)} slices, half each")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the hubs on the way out
    tmp = make_work_folder("gpulab-bench-scale-")
    port = free_port()
    standin = start_standin(tmp, port)
    users = [f"u{i}" for i in range(args.users)]
    walls: dict[str, list[float]] = {"ours": [], "plain": []}
    rounds: list[dict] = []
    load0, overflows0, t_start = os.getloadavg()[0], listen_overflows(), time.perf_counter()
    hubs: dict[str, Hub] = {}
    try:  # from here on, a SIGTERM or a failure stops the stand-in and every hub made
        hubs = make_hubs(tmp, args.users, port, spec, args.start_timeout)
        for h in hubs.values():
            h.start(timeout=180)
            create_users(h, users)
        wait_for_service(hubs["ours"], timeout=180)
        for r in range(args.rounds):
            for side in ("ours", "plain") if r % 2 == 0 else ("plain", "ours"):
                got = asyncio.run(storm(hubs[side], side, users, args.timeout))
                walls[side].append(got["wall_s"])
                rounds.append({"side": side, **got, "wall_s": round(got["wall_s"], 2)})
                print(f"storm of {args.users}: {side} {got['wall_s']:.1f} s", file=sys.stderr)
        memory = {
            "hub_peak_rss_mib_ours": peak_mib(hubs["ours"].proc.pid),
            "hub_peak_rss_mib_plain": peak_mib(hubs["plain"].proc.pid),
            "service_peak_rss_mib": peak_mib(service_pid(hubs["ours"])),
        }
    finally:
        for h in hubs.values():
            h.stop()
        standin.terminate()
        standin.wait(10)
    ours, plain = statistics.mean(walls["ours"]), statistics.mean(walls["plain"])
    ours_rounds = [x for x in rounds if x["side"] == "ours"]
    ratio = round(ours / plain, 3)
    result = {
        "users": args.users,
        "slices": slices(spec),
        "rounds": args.rounds,
        "order": [x["side"] for x in rounds],
        "storm_wall_s_ours": round(ours, 2),
        "storm_wall_s_plain": round(plain, 2),
        "storm_ratio": ratio,
        "storm_1000_ratio": ratio if args.users == 1000 else None,
        "target_ratio": TARGET_RATIO,
        "meets_target": ratio <= TARGET_RATIO,
        "open_at_peak": min(x["open_at_peak"] for x in ours_rounds),
        "double_allocations": sum(x["double_allocations"] for x in ours_rounds),
        "open_allocations_after": max(x["open_allocations_after"] for x in ours_rounds),
        **memory,
        "per_round": rounds,
        "listen_overflows": listen_overflows() - overflows0,  # the machine's, during the run
        "loadavg_1m_start": load0,
        "loadavg_1m": os.getloadavg()[0],
        "small": args.small,
        "wall_s": round(time.perf_counter() - t_start),
    }
    remove_work_folder(tmp)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Spawn→ready, stop and refusal times of GPUDockerSpawner against plain DockerSpawner, on one engine.

Two real hubs (each with its real proxy) run side by side on the same image: one with
GPUDockerSpawner over a declared lab (attach mode ``env``: this engine has no NVIDIA runtime), one
with ``dockerspawner.DockerSpawner``, both with the same CPU and memory limits.

- **Single spawns**, ``--rounds`` of them (at least 20): each round spawns and stops one server on
  each hub, the order alternating (ours first in even rounds, plain first in odd ones) so that
  neither side always meets the machine as the other left it. Spawn→ready is measured as a client
  sees it: POST (answered when the spawn ends: ``slow_spawn_timeout`` 120 s on every hub), then poll
  the REST API every 50 ms until ``ready``. Reported as the spread (min,
  median, max) of each side and of the per-round ratio ours/plain: a ratio spread that straddles
  1 says the difference is noise, not a result. ``overhead_ratio_ci90`` is the 90 % bootstrap
  interval of ``overhead_ratio`` (the rounds resampled in pairs, 2,000 times, a fixed seed): on
  this machine one round's spawn→ready varies 0.5–3 s on either hub (JupyterHub's jittered
  wait for the server, the container's start), so 20 rounds move the ratio of medians by about
  ±0.15 from run to run; 40 rounds by default, and the interval says how far one run can be
  trusted.
- **Storms** of ``--storm`` concurrent spawns in ABBA order (ours, plain, plain, ours): wall time
  from the first request to the last server ready, averaged per side.
- **A refusal burst** on ours: ``--burst`` (40) users spawn at once a profile with 4 free whole
  GPUs; 4 start, every other one is refused. ``refusal_p95_s`` is the 95th percentile of the
  refusals' response times over ``--bursts`` bursts. The same burst against a third hub whose
  spawner is DockerSpawner for 4 of the users and refuses the others at once
  (``refusal_p95_s_hub_floor``) is what JupyterHub and the engine cost on this machine for the
  same work: the floor no spawner can go below. ``refusal_p95_over_floor`` is the ratio of the
  two (ours / the bare hub's, bursts of the same run, alternating).

``--profile DIR`` samples both hubs' processes (every thread, their waits included) with py-spy
during each burst (``pip install py-spy``; ``DIR/{ours,floor}-burst<N>.txt``, py-spy's ``raw``
collapsed stacks, one ``thread;frame;frame;… count`` per line) and adds each side's busy time to the
JSON (``profile``, :func:`busy_profile`: seconds busy per thread and the event loop's hottest
frames); sampling slows both hubs alike, so a profiled run's timings are not the benchmark's
figures.

Usage: ``python benchmarks/spawn.py [--rounds 40] [--storm 30] [--burst 40] [--bursts 3]`` (needs
dockerd and the image; ``scripts/test-setup.sh`` provides both). About 7 minutes on the 2-core
development machine; ``--small`` (the test suite's run: 2 rounds, storms of 2, one burst of 6)
checks that it runs, its figures say nothing. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from e2e_support import IMAGE, remove_node_containers  # noqa: E402
from hubtools import Hub, make_work_folder, remove_work_folder  # noqa: E402

from jupyterhub_gpulab.ledger import Ledger  # noqa: E402

LIMITS = 'c.DockerSpawner.mem_limit = "512M"\nc.DockerSpawner.cpu_limit = 1.0\n'
COMMON = f"""
c.DockerSpawner.image = {IMAGE!r}
c.DockerSpawner.pull_policy = "never"
c.DockerSpawner.remove = True
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 120
c.JupyterHub.concurrent_spawn_limit = 100
# a POST answers with the spawn's outcome (JupyterHub's default answers 202 after 10 s and the
# spawn goes on): under load a refusal can take longer, and would be counted as a start
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 120}}
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


#: ``--steps``: ours runs this subclass, which writes when each step of a start began and ended
#: (``time.time()``, one JSON line per step) to ``steps.jsonl`` in the hub's folder.
STEPS = """
import json as _json
import time as _time

from jupyterhub_gpulab.spawner.gpudocker import GPUDockerSpawner

_STEPS = open({path!r}, "a", buffering=1)


def _step(user, step, t0):
    _STEPS.write(_json.dumps({{"user": user, "step": step, "t0": t0, "t1": _time.time()}}) + "\\n")


class StepsSpawner(GPUDockerSpawner):
    async def start(self):
        t0 = _time.time()
        try:
            return await super().start()
        finally:
            _step(self.user.name, "start", t0)

    async def image_requirements(self, profile):
        t0 = _time.time()
        try:
            return await super().image_requirements(profile)
        finally:
            _step(self.user.name, "image", t0)

    def _reserve(self, rt, profile, ctx, ent, who, need=None):
        t0 = _time.time()
        try:
            return super()._reserve(rt, profile, ctx, ent, who, need)
        finally:
            _step(who.user, "reserve", t0)

    async def poll(self):
        t0 = _time.time()
        try:
            return await super().poll()
        finally:
            _step(self.user.name, "poll", t0)


c.JupyterHub.spawner_class = StepsSpawner
"""


def step_breakdown(path: Path, answers: dict[str, tuple[float, float]]) -> dict[str, list[float]]:
    """Per refused user of one burst (``answers``: ``{user: (sent, answered)}``, ``time.time()``),
    milliseconds spent in each part of the refusal: ``before_start`` (the hub's request handling
    until ``start()``), ``image`` (the image's labels), ``reserve_queue`` (waiting for a thread),
    ``reserve`` (budget, claim, the refusal's record: one thread trip), ``after_reserve`` (back on
    the loop until ``start()`` raised), ``after_start`` (JupyterHub's handling of the failure,
    ``poll`` included, until the answer), ``poll``, and ``total``; ``start`` is the whole of
    ``start()``. A floor hub's refusals (:data:`FLOOR_STEPS`) have ``before_start``, ``start``,
    ``after_start`` and ``total`` only. The answers are appended to ``path`` (step ``answer``)
    and the file is kept as ``<stem>-burst<N>.jsonl`` beside it, a burst's raw timeline."""
    with path.open("a") as f:
        for user, (sent, answered) in answers.items():
            f.write(json.dumps({"user": user, "step": "answer", "t0": sent, "t1": answered}) + "\n")
    kept = sorted(path.parent.glob(f"{path.stem}-burst*.jsonl"))
    shutil.copy(path, path.with_name(f"{path.stem}-burst{len(kept) + 1}.jsonl"))
    steps: dict[str, dict[str, tuple[float, float]]] = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        steps.setdefault(rec["user"], {})[rec["step"]] = (rec["t0"], rec["t1"])
    out: dict[str, list[float]] = {}

    def add(name, seconds):
        out.setdefault(name, []).append(seconds * 1000)

    for user, (sent, answered) in answers.items():
        got = steps.get(user, {})
        if "start" not in got:
            continue
        start = got["start"]
        add("before_start", start[0] - sent)
        add("start", start[1] - start[0])
        if {"image", "reserve"} <= got.keys():
            image, reserve = got["image"], got["reserve"]
            add("image", image[1] - image[0])
            add("reserve_queue", reserve[0] - image[1])
            add("reserve", reserve[1] - reserve[0])
            add("after_reserve", start[1] - reserve[1])
        add("after_start", answered - start[1])
        if "poll" in got:
            add("poll", got["poll"][1] - got["poll"][0])
        add("total", answered - sent)
    return out


#: ``--steps``: the floor's spawner (:func:`floor_config`) writes when its ``start()`` began and
#: ended, as :data:`STEPS` does, so that the two hubs' refusals split into the same parts.
FLOOR_STEPS = """
import json as _json
import time as _time

_STEPS = open({path!r}, "a", buffering=1)


class FloorStepsSpawner(FloorSpawner):
    async def start(self):
        t0 = _time.time()
        try:
            return await super().start()
        finally:
            _STEPS.write(
                _json.dumps({{"user": self.user.name, "step": "start", "t0": t0, "t1": _time.time()}})
                + "\\n"
            )


c.JupyterHub.spawner_class = FloorStepsSpawner
"""


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


def settle_and_stop(hub: Hub, user: str) -> float:
    """Stop a burst's winner once its spawn has finished (JupyterHub answers a stop of a pending
    spawn with a 500; under load the winners are still starting when the refusals are in)."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        s = hub.server(user)
        if s and s.get("ready"):
            break
        time.sleep(0.2)
    return stop(hub, user)


def storm(hub: Hub, users: list[str], options: dict) -> float:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(users)) as pool:
        list(pool.map(lambda u: spawn_ready(hub, u, options), users))
    wall = time.perf_counter() - t0
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda u: stop(hub, u), users))
    return wall


def burst(
    hub: Hub, users: list[str], options: dict
) -> tuple[list[float], list[str], dict[str, tuple[float, float]]]:
    """Every user POSTs at once: ``(refusals' response times in s, users who got a server,
    {refused user: (sent, answered)} as ``time.time()``)``."""

    def one(user):
        t0, w0 = time.perf_counter(), time.time()
        r = hub.spawn(user, options)
        return user, r.status_code, time.perf_counter() - t0, (w0, time.time())

    with ThreadPoolExecutor(len(users)) as pool:
        answers = list(pool.map(one, users))
    refused = [t for _, code, t, _ in answers if code == 503]
    started = [u for u, code, _, _ in answers if code in (201, 202)]
    odd = [(u, code) for u, code, _, _ in answers if code not in (201, 202, 503)]
    if odd:
        raise RuntimeError(f"unexpected answers in the burst: {odd}\n{hub.log_tail()}")
    return refused, started, {u: w for u, code, _, w in answers if code == 503}


#: py-spy's samples per second in ``--profile`` runs
SPY_RATE = 200


@contextlib.contextmanager
def sampled(hub: Hub, out: Path | None):
    """Sample ``hub``'s process with py-spy into ``out`` (raw collapsed stacks of every thread
    while it runs, idle waits left out; the hub is never paused) while the block runs; nothing
    when ``out`` is ``None``."""
    if out is None:
        yield
        return
    exe = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if exe is None:
        raise SystemExit("--profile needs py-spy: pip install py-spy")
    spy = subprocess.Popen(
        [exe, "record", "--pid", str(hub.proc.pid), "--format", "raw", "--threads",
         "--nonblocking", "--rate", str(SPY_RATE), "-o", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(1.0)  # attached before the first request
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        spy.wait(60)


def _frame(f: str) -> str:
    """``"Handler.get (jupyterhub/handlers/base.py:554)"`` -> ``"Handler.get (base.py)"``."""
    name, _, where = f.partition(" (")
    return f"{name} ({where.rstrip(')').rsplit('/', 1)[-1].rsplit(':', 1)[0]})"


def busy_profile(paths: list[Path], n: int = 30) -> dict:
    """Where a hub's threads were busy in py-spy raw files ``paths`` (:func:`sampled`), in
    seconds of samples: ``threads_s`` per thread kind (``MainThread``: the event loop;
    ``ThreadPoolExecutor``: DockerSpawner's one engine thread; ``asyncio``: the loop's default
    executor, where gpulab's ledger calls run), and ``event_loop_s``, the ``n`` frames the event
    loop spent most time in (inclusive), leaving out the frames on nearly every stack."""
    threads: Counter[str] = Counter()
    loop: Counter[str] = Counter()
    loop_total = 0
    for path in paths:
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            head, *frames = stack.split(";")
            kind = head.split(": ", 1)[-1].rstrip("_0123456789-")
            threads[kind] += int(count)
            if kind == "MainThread":
                loop_total += int(count)
                for f in {_frame(f) for f in frames}:
                    loop[f] += int(count)
    hot = {f: c for f, c in loop.most_common() if c < 0.95 * loop_total}
    return {
        "threads_s": {k: round(c / SPY_RATE, 2) for k, c in threads.most_common()},
        "event_loop_s": {f: round(c / SPY_RATE, 2) for f, c in list(hot.items())[:n]},
    }


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
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--storm", type=int, default=30)
    ap.add_argument("--storm-pairs", type=int, default=2, help="1: one storm each; 2: ABBA order")
    ap.add_argument("--burst", type=int, default=40, help="concurrent spawns in a refusal burst")
    ap.add_argument("--bursts", type=int, default=3)
    ap.add_argument("--small", action="store_true", help="runs, measures nothing: tiny sizes")
    ap.add_argument(
        "--steps",
        action="store_true",
        help="time each step of our refusals (refusal_steps_ms in the JSON; a subclass of "
        "GPUDockerSpawner that records them)",
    )
    ap.add_argument("--bursts-only", action="store_true", help="skip the spawns and storms")
    ap.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="sample both hubs with py-spy during each burst into DIR (module docstring)",
    )
    args = ap.parse_args(argv)
    if args.small:
        args.rounds, args.storm, args.storm_pairs, args.burst, args.bursts = 2, 2, 1, 6, 1
        args.steps = True
    elif args.rounds < 20:
        ap.error("--rounds must be at least 20: fewer rounds cannot tell a difference from noise")
    tmp = make_work_folder("gpulab-bench-spawn-")
    steps_file = tmp / "gpubenchours" / "steps.jsonl"
    steps: dict[str, list[float]] = {}
    ours = Hub(
        tmp / "gpubenchours",
        ours_config("gpubenchours", args.storm + 2)
        + (STEPS.format(path=str(steps_file)) if args.steps else ""),
    )
    plain = Hub(tmp / "gpubenchplain", plain_config("gpubenchplain"))
    crowd = [f"b{i}" for i in range(args.burst)]
    floor_steps = tmp / "gpubenchfloor" / "steps.jsonl"
    floor = Hub(
        tmp / "gpubenchfloor",
        floor_config("gpubenchfloor", crowd[:BURST_SLICES])
        + (FLOOR_STEPS.format(path=str(floor_steps)) if args.steps else ""),
    )
    floor_steps_ms: dict[str, list[float]] = {}
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
        for i in range(0 if args.bursts_only else args.rounds):
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
        for label in ("ours", "plain", "plain", "ours")[: 4 if args.storm_pairs > 1 else 2] * (
            not args.bursts_only
        ):
            h, opts = sides[label]
            walls[label].append(storm(h, users, opts))
            print(f"storm of {args.storm}: {label} {walls[label][-1]:.1f} s", file=sys.stderr)
        # Refusal bursts: ours over BURST_SLICES free whole GPUs and the hub's own floor, in ABBA
        # order (ours first in bursts 1 and 4, the floor first in 2 and 3, …), so that neither
        # side always meets the machine as the other's burst left it.
        refusals = {"ours": [], "floor": []}
        per_burst = []

        def one_burst(side: str, b: int) -> None:
            hub, opts, out = (ours, {"profile": "a40"}, steps) if side == "ours" else (
                floor, {}, floor_steps_ms)  # fmt: skip
            path = steps_file if side == "ours" else floor_steps
            if args.steps:
                path.write_text("")
            with sampled(hub, prof and prof / f"{side}-burst{b + 1}.txt"):
                refused, started, answers = burst(hub, crowd, opts)
            if args.steps:
                for k, v in step_breakdown(path, answers).items():
                    out.setdefault(k, []).extend(v)
            if side == "ours" and len(started) != BURST_SLICES:
                raise RuntimeError(f"{len(started)} servers started in a burst, not {BURST_SLICES}")
            refusals[side] += refused
            this[side] = p95(refused)
            with ThreadPoolExecutor(BURST_SLICES) as pool:
                list(pool.map(lambda u: settle_and_stop(hub, u), started))

        for b in range(args.bursts):
            prof = args.profile
            if prof is not None:
                prof.mkdir(parents=True, exist_ok=True)
            this: dict[str, float] = {}
            for side in ("ours", "floor") if b % 4 in (0, 3) else ("floor", "ours"):
                one_burst(side, b)
            per_burst.append(this["ours"] / this["floor"])
            print(
                f"burst {b + 1} of {args.burst}: refusal p95 ours {p95(refusals['ours']):.2f} s, "
                f"hub floor {p95(refusals['floor']):.2f} s",
                file=sys.stderr,
            )
        ledger = Ledger(f"sqlite:///{ours.workdir}/gpulab.sqlite")
        doubles = len(ledger.double_allocations())
        leaked = len(ledger.open_allocations())
        ledger.close()
        result = {} if args.bursts_only else spawn_figures(times, stops, walls)
        result |= {
            "burst_size": args.burst,
            "burst_free_slices": BURST_SLICES,
            "refusals": len(refusals["ours"]),
            "refusal_p95_s": round(p95(refusals["ours"]), 3),
            "refusal_s": spread(refusals["ours"]),
            "refusal_p95_s_hub_floor": round(p95(refusals["floor"]), 3),
            "refusal_p95_over_floor": round(p95(refusals["ours"]) / p95(refusals["floor"]), 3),
            # each burst's own ratio: a spread that straddles 1.10 says one run decides nothing
            "refusal_p95_over_floor_per_burst": spread(per_burst),
            "double_allocations": doubles,
            "open_allocations_after": leaked,
            "rounds": args.rounds,
            "storm_size": args.storm,
            "small": args.small,
            "wall_s": round(time.perf_counter() - t_start),
        }
        if args.steps:
            result["refusal_steps_ms"] = {
                k: {"p50": round(statistics.median(v), 1), "p95": round(p95(v), 1)}
                for k, v in steps.items()
                if len(v) > 1
            }
            result["refusal_steps_ms_hub_floor"] = {
                k: {"p50": round(statistics.median(v), 1), "p95": round(p95(v), 1)}
                for k, v in floor_steps_ms.items()
                if len(v) > 1
            }
        if args.profile is not None:
            result["profile"] = {
                side: busy_profile(sorted(args.profile.glob(f"{side}-burst*.txt")))
                for side in ("ours", "floor")
            }
    finally:
        for h in hubs:
            h.stop()
            remove_node_containers(h.workdir.name)
    remove_work_folder(tmp)
    print(json.dumps(result))
    return 0


def ratio_interval(ours: list[float], plain: list[float], runs: int = 2000) -> list[float]:
    """The 90 % bootstrap interval ``[low, high]`` of median(ours) / median(plain), the rounds
    resampled in pairs (``ours[i]``, ``plain[i]`` ran back to back) with a fixed seed."""
    rng = random.Random(0)
    n = len(ours)
    ratios = sorted(
        statistics.median(ours[i] for i in picks) / statistics.median(plain[i] for i in picks)
        for picks in ([rng.randrange(n) for _ in range(n)] for _ in range(runs))
    )
    return [round(ratios[int(0.05 * (runs - 1))], 3), round(ratios[int(0.95 * (runs - 1))], 3)]


def spawn_figures(times: dict, stops: dict, walls: dict) -> dict:
    """The single spawns' and storms' figures (module docstring)."""
    med = {k: statistics.median(v) for k, v in times.items()}
    ratios = [o / p for o, p in zip(times["ours"], times["plain"])]
    storm_ours = statistics.mean(walls["ours"])
    storm_plain = statistics.mean(walls["plain"])
    return {
        "spawn_ready_median_s_ours": round(med["ours"], 3),
        "spawn_ready_median_s_plain": round(med["plain"], 3),
        "overhead_ratio": round(med["ours"] / med["plain"], 3),
        "overhead_ratio_ci90": ratio_interval(times["ours"], times["plain"]),
        "spawn_ready_s_ours": spread(times["ours"]),
        "spawn_ready_s_plain": spread(times["plain"]),
        "overhead_ratio_per_round": spread(ratios),
        "stop_median_s_ours": round(statistics.median(stops["ours"]), 3),
        "stop_median_s_plain": round(statistics.median(stops["plain"]), 3),
        "storm_wall_s_ours": round(storm_ours, 2),
        "storm_wall_s_plain": round(storm_plain, 2),
        "storm_ratio": round(storm_ours / storm_plain, 3),
    }


if __name__ == "__main__":
    sys.exit(main())

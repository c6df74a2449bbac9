"""A simulated 14-week term on a 4-GPU lab: static whole GPUs vs gpulab's slices, culler and quotas.

Usage: ``python benchmarks/semester.py [--weeks 14] [--seed 7] [--rounds 3000]``. Deterministic for
a seed. The last line printed is one JSON object with ``students_per_gpu_ratio``, ``refused_pct``,
``idle_held_pct`` (for b) and ``sampling_cpu_pct``, plus the other figures.

The two labs (4 × H100 80GB each; Hopper, so GPM reports per-MIG utilisation)
------------------------------------------------------------------------------
(a) **static**: every GPU profile gets a whole GPU, first come first served, and an activity-only
    culler as ``jupyterhub-idle-culler`` runs under Zero to JupyterHub's defaults (``cull.timeout``
    3600 s, no max age): it sees the hub's ``last_activity`` and busy kernels, not the GPU.
(b) **gpulab**: GPUs 0-1 in MIG mode as 7 × ``1g.10gb`` (14 student slices), GPUs 2-3 whole for
    researchers: the four GPUs split in proportion to each population's p95 concurrent demand
    in GPUs, computed from the request list before simulating (students 15 sessions / 7 per GPU
    = 2.1 GPUs, researchers 2), rounded. Students: ``gpu_idle_timeout`` 20 min,
    ``idle_timeout`` 1 h, ``max_age`` 8 h, 4 GPU-hours a week (28 h of a 1g slice), one slice
    each. Researchers: ``gpu_idle_timeout`` 30 min, ``idle_timeout`` 2 h, ``max_age`` 3 days, no
    budget, one GPU each. Warnings 10 min ahead; threshold 5 %.

Both labs place through a real :class:`~jupyterhub_gpulab.ledger.Ledger` on SQLite and decide with
the real :func:`~jupyterhub_gpulab.fairuse.culler.decide` (a pass every 5 minutes, utilisation
summarised per 5-minute bin: busy when any GPU work ran in it); (b) also checks
:func:`~jupyterhub_gpulab.fairuse.quota.check_spawn` before each spawn and
:func:`~jupyterhub_gpulab.fairuse.quota.over_budget_servers` each pass.

Workload (assumptions, with the reasoning; none is a measured trace)
--------------------------------------------------------------------
- **Students**: 200 in 4 courses of 50, each course with a weekly deadline (Tue, Wed, Thu, Fri
  23:59). Homework sessions: Poisson, mean 1.5 a week per student (one or two sittings for a
  weekly GPU assignment), days weighted towards the deadline (x1 up to three days before, x2 two
  days, x3 the day before, x4 the day itself), start hours weighted to the afternoon and evening
  (10:00-24:00, peak 20:00-23:00): students work after classes and close to deadlines. Each
  course also has two lab sections a week (2 h, at 10:00 or 14:00 on weekdays) where 12 of the
  section's 25 students use a GPU at once. Time at the keyboard: log-normal, median 75 min,
  sigma 0.5 (labs: until the lab ends). While present, work alternates "think/edit" (exponential,
  mean 8 min, GPU idle) and "run a cell" (exponential, mean 3 min, GPU busy): an interactive
  notebook's GPU is idle most of the time, which is why whole-GPU assignment wastes it. Warned
  while present by a GPU-idle or idle warning, a user reacts (runs something) with probability 0.8.
- **Leaving** (students): 30 % stop the server, 45 % close the tab with the server running,
  25 % leave the tab open (the laptop sleeps later: log-normal, median 3 h, sigma 0.7). 15 % leave
  a training run going (log-normal, median 45 min, sigma 0.6), half of them in a notebook (a
  busy kernel). These shares are assumptions from the usual observation that most users never
  stop their servers, which is why every JupyterHub deployment runs a culler.
- **Researchers**: 20; sessions Poisson, mean 1 a week, weekdays 08:00-18:00; present log-normal
  median 2 h, sigma 0.5, with GPU work half the time (think mean 10 min, run mean 10 min); on
  leaving 30 % start a run (log-normal, median 3 h, sigma 0.8, in a notebook half the time),
  otherwise they stop the server (50 %) or close the tab. Long training goes to the campus
  cluster; this lab serves development and short runs.
- **Retries**: a refused student tries again 15 minutes later, twice, then gives up; a refused
  researcher retries every 15 minutes for up to 4 hours (the wait is the research wait). A user
  who comes back while their server still runs uses it (no spawn). A student culled while at the
  keyboard with 30 minutes or more of work left tries to start again. ``--load`` scales every
  session rate.

The workload's peak demand, from the request list alone (a session held from its start to 20
minutes, researchers 30, after its last work): students p95 15 concurrent sessions (labs meeting
homework), researchers p95 2. The split leaves each population just under its p95, so (b) refuses
at the 14:00 labs (there is no class-time reservation yet) and researchers queue on their two
GPUs; the refusal figures are reported per group so that this stays visible.

What is reported
----------------
- **student sessions served per GPU** over the term (distinct sessions that got a slice, / 4);
  the ratio is (b) over (a).
- **refused spawns**: refused attempts / all attempts, retries included (``refused_pct``), per
  group, and the share of student sessions never served.
- **GPU-hours held idle**: slice-hours, weighted by share (a 1g slice 1/7), held while nobody was
  at the keyboard *and* the GPU was idle (abandoned capacity, what a culler can win back), as a
  percentage of weighted hours held. Hours held idle while the user was present and thinking are
  reported apart: no culler should take those.
- **research wait**: from the first attempt to the slice, for sessions served; and sessions never
  served within 4 hours.
- **culled at the keyboard**: servers culled while their user was present (the price of the
  GPU-idle rule, softened by warnings).
- **sampling cost**: :meth:`UtilizationMonitor.sample` over 8 GPUs × 7 MIG slices against the
  fake NVML (``tests/fake_nvml.py``), CPU time (``time.process_time``) per round as a percentage
  of a 10 s interval. The fake answers in Python; the real driver's calls cost differently, so the
  NVML calls per round are reported too.
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import json
import math
import random
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from jupyterhub_gpulab import clock
from jupyterhub_gpulab.fairuse.culler import Limits, Sample, Server, Settings, decide, next_warnings
from jupyterhub_gpulab.fairuse.quota import check_spawn, over_budget_servers, user_budget
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest, load_declared
from jupyterhub_gpulab.lab.policy import GroupPolicy
from jupyterhub_gpulab.ledger import Ledger, LedgerRefusal

TERM_START = datetime(2026, 9, 7, tzinfo=timezone.utc)  # a Monday
TICK = 5  # minutes between culler passes (and utilisation bins)
WHOLE = SliceRequest(SliceKind.GPU)
MIG_1G = SliceRequest(SliceKind.MIG, mig_profile="1g.10gb")
STUDENTS = GroupPolicy("students", max_slices_per_user=1, gpu_hours=4, period="week")
POLICIES = {"students": STUDENTS}
SETTINGS = Settings(threshold_percent=5.0, warn_before_s=600, max_sample_gap_s=2 * TICK * 60)


@dataclass
class Request:
    """One session a user wants: ``at`` minutes into the term, ``present`` minutes at the keyboard,
    ``runs`` (start, length) minutes of GPU work while present, how they leave."""

    at: int
    user: str
    group: str
    present: int
    runs: list[tuple[int, int]]
    leave: str  # "stop", "close", "open"
    open_for: int = 0
    run_after: int = 0
    notebook_run: bool = False
    first_at: int = -1
    attempts_left: int = 2
    respawn: bool = False


def _poisson(rng: random.Random, mean: float) -> int:
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def _alternate(rng, present, think_mean, run_mean) -> list[tuple[int, int]]:
    runs, t = [], 0.0
    while True:
        t += rng.expovariate(1 / think_mean)
        if t >= present:
            return runs
        length = max(1, round(rng.expovariate(1 / run_mean)))
        runs.append((round(t), length))
        t += length


def _student(rng, at, user, present) -> Request:
    r = rng.random()
    leave = "stop" if r < 0.30 else "close" if r < 0.75 else "open"
    run_after = round(rng.lognormvariate(math.log(45), 0.6)) if rng.random() < 0.15 else 0
    return Request(
        at, user, "students", present, _alternate(rng, present, 8, 3), leave,
        open_for=round(rng.lognormvariate(math.log(180), 0.7)) if leave == "open" else 0,
        run_after=run_after, notebook_run=rng.random() < 0.5,
    )  # fmt: skip


#: Mean sessions a week: a student's homework sittings, a researcher's sessions (x ``--load``).
HOMEWORK_PER_WEEK = 1.5
RESEARCH_PER_WEEK = 1.0
HOUR_WEIGHTS = [0] * 10 + [2, 3, 3, 4, 5, 5, 5, 5, 5, 6, 8, 8, 8, 6]  # 10:00-24:00 students


def workload(rng: random.Random, weeks: int, load: float = 1.0) -> list[Request]:
    """Every session request of the term (module docstring), sorted by time."""
    reqs: list[Request] = []
    day = 24 * 60
    for week in range(weeks):
        w0 = week * 7 * day
        for course in range(4):
            deadline = 1 + course  # Tue..Fri
            day_w = [
                max(0, 1 + max(0, 3 - (deadline - d))) if d <= deadline else 1 for d in range(7)
            ]
            for s in range(50):
                user = f"s{course}-{s:02d}"
                for _ in range(_poisson(rng, HOMEWORK_PER_WEEK * load)):
                    d = rng.choices(range(7), day_w)[0]
                    h = rng.choices(range(24), HOUR_WEIGHTS)[0]
                    at = w0 + d * day + h * 60 + rng.randrange(60)
                    present = min(240, max(10, round(rng.lognormvariate(math.log(75), 0.5))))
                    reqs.append(_student(rng, at, user, present))
            for section in range(2):
                lab_day, lab_hour = (course + 2 * section) % 5, 10 + 4 * section
                start = w0 + lab_day * day + lab_hour * 60
                for s in rng.sample(range(section * 25, section * 25 + 25), 12):
                    at = start + rng.randrange(10)
                    reqs.append(_student(rng, at, f"s{course}-{s:02d}", 110 - (at - start)))
        for r in range(20):
            for _ in range(_poisson(rng, RESEARCH_PER_WEEK * load)):
                at = w0 + rng.randrange(5) * day + rng.randrange(8 * 60, 18 * 60)
                present = round(rng.lognormvariate(math.log(120), 0.5))
                run = rng.random() < 0.3
                reqs.append(
                    Request(
                        at, f"r{r:02d}", "research", present, _alternate(rng, present, 10, 10),
                        "close" if run or rng.random() < 0.5 else "stop",
                        run_after=round(rng.lognormvariate(math.log(180), 0.8)) if run else 0,
                        notebook_run=rng.random() < 0.5, attempts_left=16,
                    )
                )  # fmt: skip
    return sorted(reqs, key=lambda q: (q.at, q.user))


@dataclass
class Live:
    req: Request
    alloc: object
    start: int
    present_until: int
    tab_until: int
    run_until: int
    limits: Limits
    busy_until: int = 0
    samples: deque = field(default_factory=lambda: deque(maxlen=12))
    warnings: dict = field(default_factory=dict)


@dataclass
class Lab:
    name: str
    spec: list[dict]
    gpu_aware: bool
    students: Limits
    research: Limits


def _h100(i: int, mig: bool) -> dict:
    d = {"uuid": f"GPU-h100-{i}", "index": i, "name": "NVIDIA H100 80GB HBM3", "memory": "80GiB"}
    if mig:
        d["mig"] = [{"uuid": f"MIG-h100-{i}-{j}", "profile": "1g.10gb"} for j in range(7)]
    return d


STATIC = Lab(
    "a: static whole GPUs, activity culler",
    [_h100(i, False) for i in range(4)],
    gpu_aware=False,
    students=Limits(idle_timeout=3600),
    research=Limits(idle_timeout=3600),
)
GPULAB = Lab(
    "b: gpulab slices, GPU-aware culler, quotas",
    [_h100(0, True), _h100(1, True), _h100(2, False), _h100(3, False)],
    gpu_aware=True,
    students=Limits(idle_timeout=3600, gpu_idle_timeout=20 * 60, max_age=8 * 3600),
    research=Limits(idle_timeout=7200, gpu_idle_timeout=30 * 60, max_age=72 * 3600),
)


class Simulation:
    """One lab through the term; :meth:`run` returns its figures."""

    def __init__(self, lab: Lab, requests: list[Request], seed: int, db: Path):
        self.lab = lab
        self.rng = random.Random(seed)
        self.queue = [
            (q.at, i, dataclasses.replace(q, runs=list(q.runs))) for i, q in enumerate(requests)
        ]
        heapq.heapify(self.queue)
        self.seq = len(self.queue)
        self.now = TERM_START
        clock.utcnow = lambda: self.now  # the one time seam: the ledger stamps simulated time
        self.ledger = Ledger(f"sqlite:///{db}")
        self.ledger.sync_inventory(load_declared(lab.spec))
        self.live: dict[str, Live] = {}
        self.history: dict[str, list] = {}  # user -> allocations (for budgets)
        self.m = {k: 0.0 for k in (
            "student_sessions", "student_served", "attempts", "refused", "refused_students",
            "refused_quota", "attempts_students", "unserved_students", "held", "idle_held", "present_idle", "culled_present", "culls",
            "research_sessions", "research_served", "research_wait_sum", "reused",
        )}  # fmt: skip
        self.research_waits: list[int] = []

    def _dt(self, minute: int) -> datetime:
        return TERM_START + timedelta(minutes=minute)

    def _spawn(self, q: Request, minute: int) -> None:
        if q.first_at < 0:
            q.first_at = minute
            if not q.respawn:
                self.m["student_sessions" if q.group == "students" else "research_sessions"] += 1
        if q.user in self.live and not q.respawn:  # their server still runs: they use it
            self._extend(self.live[q.user], q, minute)
            self.m["reused"] += 1
            return
        self.m["attempts"] += 1
        student = q.group == "students"
        self.m["attempts_students"] += student
        request = MIG_1G if (self.lab.gpu_aware and student) else WHOLE
        refusal = None
        if self.lab.gpu_aware and student:
            refusal = check_spawn(
                q.user, ["students"], POLICIES, self.history.get(q.user, ()), self.now
            )
            if refusal:
                self.m["refused_quota"] += 1
        claim = None
        if refusal is None:
            try:
                claim = self.ledger.claim(
                    request, user=q.user, profile=request.kind.value, user_limit=1,
                    charge_groups=[(q.group, None)],
                )  # fmt: skip
            except LedgerRefusal as exc:
                refusal = exc.message
        if claim is None:
            self.m["refused"] += 1
            self.m["refused_students"] += student
            if q.attempts_left > 0 and not (refusal and "GPU-hours" in refusal):
                q.attempts_left -= 1
                self._push(minute + 15, q)
            elif student and not q.respawn:
                self.m["unserved_students"] += 1
            return
        if not q.respawn:
            self.m["student_served" if student else "research_served"] += 1
            if not student:
                self.research_waits.append(minute - q.first_at)
        self.history.setdefault(q.user, []).append(claim.allocation)
        limits = self.lab.students if student else self.lab.research
        live = Live(q, claim.allocation, minute, 0, 0, 0, limits)
        self.live[q.user] = live
        self._extend(live, q, minute)

    def _extend(self, live: Live, q: Request, minute: int) -> None:
        live.req = q
        live.present_until = minute + q.present
        live.tab_until = live.present_until + q.open_for
        live.run_until = live.present_until + q.run_after
        q.runs = [(minute + s, minute + s + n) for s, n in q.runs]

    def _push(self, minute: int, q: Request) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (minute, self.seq, q))

    def _release(self, user: str, reason: str) -> None:
        live = self.live.pop(user)
        self.ledger.release(live.alloc.id, reason)
        allocs = self.history[user]
        allocs[-1] = dataclasses.replace(allocs[-1], ended_at=self.now, end_reason=reason)

    def _busy(self, live: Live, lo: int, hi: int) -> bool:
        if live.busy_until > lo or (live.present_until <= lo < live.run_until):
            return True
        return any(s < hi and e > lo for s, e in live.req.runs)

    def run(self, weeks: int) -> dict:
        end = weeks * 7 * 24 * 60
        for minute in range(0, end + TICK, TICK):
            self.now = self._dt(minute)
            while self.queue and self.queue[0][0] <= minute:
                _, _, q = heapq.heappop(self.queue)
                self._spawn(q, minute)
            self._observe(minute)
            self._cull(minute)
        for user in list(self.live):
            self._release(user, "stopped")
        self.ledger.close()
        return self._figures(weeks)

    def _observe(self, minute: int) -> None:
        lo = minute - TICK
        for user, live in list(self.live.items()):
            if live.start > lo:
                continue
            present = live.present_until > lo
            busy = self._busy(live, lo, minute)
            live.samples.append(Sample(self.now, 60.0 if busy else 0.0))
            share = live.alloc.share
            self.m["held"] += TICK * share
            if not busy:
                self.m["idle_held" if not present else "present_idle"] += TICK * share
            if not present and live.req.leave == "stop" and live.run_until <= lo:
                self._release(user, "stopped")

    def _cull(self, minute: int) -> None:
        budget_at = {}
        if self.lab.gpu_aware:
            users = [u for u, lv in self.live.items() if lv.req.group == "students"]
            budgets = {
                u: user_budget(u, ["students"], POLICIES, self.history[u], self.now) for u in users
            }
            opened = [self.live[u].alloc for u in users]
            for ob in over_budget_servers(opened, budgets, self.now, within_s=3600):
                budget_at[ob.allocation.user] = ob.exhausted_at
        for user, live in list(self.live.items()):
            present = live.present_until > minute
            tab = present or live.tab_until > minute
            run_on = live.present_until <= minute < live.run_until
            server = Server(
                user, "", live.req.group, self._dt(live.start), live.limits,
                last_activity=self.now if tab else self._dt(live.present_until),
                kernels_busy=(run_on and live.req.notebook_run) or live.busy_until > minute,
                has_gpu=self.lab.gpu_aware, samples=live.samples,
                budget_exhausted_at=budget_at.get(user),
            )  # fmt: skip
            d = decide(server, live.warnings, self.now, SETTINGS)
            live.warnings = next_warnings(live.warnings, d)
            if d.action == "warn" and present and d.rule in ("gpu-idle", "idle"):
                if self.rng.random() < 0.8:
                    live.busy_until = minute + TICK  # the user runs something
            elif d.action == "cull":
                self.m["culls"] += 1
                self._release(user, d.end_reason)
                if present:
                    self.m["culled_present"] += 1
                    left = live.present_until - minute
                    if left >= 30 and d.rule in ("gpu-idle", "idle"):
                        again = dataclasses.replace(
                            live.req, present=left, runs=[], respawn=True, first_at=minute,
                            attempts_left=2,
                        )  # fmt: skip
                        again.runs = _alternate(self.rng, left, 8, 3)
                        self._push(minute + TICK, again)

    def _figures(self, weeks: int) -> dict:
        m = self.m
        waits = sorted(self.research_waits)
        return {
            "lab": self.lab.name,
            "student_sessions": int(m["student_sessions"]),
            "student_sessions_served": int(m["student_served"]),
            "students_per_gpu": m["student_served"] / 4,
            "spawn_attempts": int(m["attempts"]),
            "refused_pct": 100 * m["refused"] / max(1, m["attempts"]),
            "refused_pct_students": 100 * m["refused_students"] / max(1, m["attempts_students"]),
            "refused_pct_research": 100
            * (m["refused"] - m["refused_students"])
            / max(1, m["attempts"] - m["attempts_students"]),
            "student_sessions_never_served_pct": 100
            * m["unserved_students"]
            / max(1, m["student_sessions"]),
            "refused_quota": int(m["refused_quota"]),
            "sessions_on_a_running_server": int(m["reused"]),
            "gpu_hours_held": m["held"] / 60,
            "idle_held_pct": 100 * m["idle_held"] / max(1e-9, m["held"]),
            "present_idle_pct": 100 * m["present_idle"] / max(1e-9, m["held"]),
            "culls": int(m["culls"]),
            "culled_at_keyboard": int(m["culled_present"]),
            "research_sessions": int(m["research_sessions"]),
            "research_unserved": int(m["research_sessions"] - m["research_served"]),
            "research_wait_mean_min": sum(waits) / max(1, len(waits)),
            "research_wait_p90_min": waits[int(0.9 * (len(waits) - 1))] if waits else 0,
        }


def sampling_cost(rounds: int) -> dict:
    """CPU per sampling round of 8 H100 × 7 MIG slices through the real monitor and fake NVML."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from fake_nvml import FakeNVML

    from jupyterhub_gpulab.inventory import discover
    from jupyterhub_gpulab.service.monitor import UtilizationMonitor

    fake = FakeNVML.h100_mig_lab(8)
    inventory = discover(nvml=fake)
    rng = random.Random(1)
    for s in inventory.slices:
        fake.set_utilization(s.id, gpu_percent=rng.choice([0, 0, 3, 40, 90]), memory_used=2**30)
    monitor = UtilizationMonitor(nvml=fake)
    monitor.sample(inventory, {})
    start = time.process_time()
    for _ in range(rounds):
        monitor.sample(inventory, {})
    per_round = (time.process_time() - start) / rounds
    monitor.close()
    calls = _count_calls(FakeNVML, inventory)
    return {
        "slices": len(inventory.slices),
        "cpu_ms_per_round": per_round * 1000,
        "sampling_cpu_pct": 100 * per_round / 10.0,
        "nvml_calls_per_round": calls,
    }


def _count_calls(fake_cls, inventory) -> int:
    from jupyterhub_gpulab.service.monitor import UtilizationMonitor

    class Counting:
        def __init__(self, inner):
            self.inner, self.calls = inner, 0

        def __getattr__(self, name):
            value = getattr(self.inner, name)
            if callable(value) and name.startswith("nvml"):

                def counted(*a, **kw):
                    self.calls += 1
                    return value(*a, **kw)

                return counted
            return value

    counting = Counting(fake_cls.h100_mig_lab(8))
    monitor = UtilizationMonitor(nvml=counting)
    monitor.sample(inventory, {})
    counting.calls = 0
    monitor.sample(inventory, {})
    monitor.close()
    return counting.calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weeks", type=int, default=14)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3000, help="sampling rounds to time")
    parser.add_argument("--load", type=float, default=1.0, help="scale every session rate")
    args = parser.parse_args()
    requests = workload(random.Random(args.seed), args.weeks, args.load)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, lab in enumerate((STATIC, GPULAB)):
            t = time.perf_counter()
            sim = Simulation(lab, requests, args.seed, Path(tmp) / f"lab{i}.sqlite")
            results.append(sim.run(args.weeks))
            print(f"{lab.name}: simulated in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    a, b = results
    sampling = sampling_cost(args.rounds)
    rows = [k for k in a if k != "lab"]
    print(f"{'':32s} {'(a) static':>14s} {'(b) gpulab':>14s}")
    for k in rows:
        print(f"{k:32s} {a[k]:14.1f} {b[k]:14.1f}")
    print(
        f"sampling: {sampling['slices']} slices, {sampling['cpu_ms_per_round']:.2f} ms CPU a round, "
        f"{sampling['nvml_calls_per_round']} NVML calls a round"
    )
    summary = {
        "students_per_gpu_ratio": round(
            b["students_per_gpu"] / max(1e-9, a["students_per_gpu"]), 2
        ),
        "refused_pct": round(b["refused_pct"], 2),
        "idle_held_pct": round(b["idle_held_pct"], 2),
        "sampling_cpu_pct": round(sampling["sampling_cpu_pct"], 4),
        "students_per_gpu": {"a": a["students_per_gpu"], "b": b["students_per_gpu"]},
        "refused_pct_static": round(a["refused_pct"], 2),
        "refused_pct_students": round(b["refused_pct_students"], 2),
        "refused_pct_research": round(b["refused_pct_research"], 2),
        "student_sessions_never_served_pct": {
            "a": round(a["student_sessions_never_served_pct"], 2),
            "b": round(b["student_sessions_never_served_pct"], 2),
        },
        "idle_held_pct_static": round(a["idle_held_pct"], 2),
        "research_wait_mean_min": {
            "a": round(a["research_wait_mean_min"], 1),
            "b": round(b["research_wait_mean_min"], 1),
        },
        "research_unserved": {"a": a["research_unserved"], "b": b["research_unserved"]},
        "culled_at_keyboard_b": b["culled_at_keyboard"],
        "nvml_calls_per_round": sampling["nvml_calls_per_round"],
        "weeks": args.weeks,
        "load": args.load,
        "seed": args.seed,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()

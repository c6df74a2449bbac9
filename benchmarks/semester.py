"""A 14-week term on a 4-GPU lab, on real usage data, through gpulab's own decisions; beside it,
on the same demand, the static lab and plain JupyterHub with the stock idle culler.

Usage: ``python benchmarks/semester.py [--weeks 14] [--seed 7] [--load 1.0] [--labs …]
[--jobs N]``; ``--small`` (the test suite's run): one week at a fifth of the load. Deterministic
for a seed; the labs run ``--jobs`` at a time, each in its own process (default: one per CPU).
The last line printed is one JSON object: the gpulab lab's ``class_served_within_1min_pct``,
``homework_intents_unserved_pct``, ``research_wait_p50_min``, ``research_wait_p90_min``,
``idle_held_pct``, ``culled_at_keyboard_pct``, ``budget_refusals``, ``preemptions``,
``students_per_gpu_ratio`` (student intents served, gpulab over static), ``double_allocations``
(every lab); the same figures for ``static`` and ``plain_jupyterhub``; ``by_lab`` (every lab's
figures), ``levers`` (issue 22 items 2 and 3: for each lever, the research waits and the students'
figures with it off, the ``gpulab`` lab, and on, in the same run; items 2 and 3 too), ``inputs`` (each input:
``"measured: …"`` or ``"assumed: …"``), ``settings`` (the service's defaults the culler and the
waitlist ran with), ``lab`` (what was simulated) and ``run`` (wall seconds, jobs, load average).

The labs (``term/labs.py``), each on 4 × H100 80GB (``--mig-gpus`` in MIG mode, 7 × 1g.10gb each,
for students; ``--research-gpus`` whole; default 2 + 2):

- ``static``: plain JupyterHub, a whole GPU per server, Zero to JupyterHub's idle culler (1 h);
- ``plain``: plain JupyterHub on the same slices, ``jupyterhub-idle-culler``'s defaults (600 s);
- ``today``: gpulab's rules without courses (entitlement, budget, image needs, claim, culler);
- ``gpulab``: plus each section's reservation, the waitlist, priority and preemption;
- ``fairshare``: plus the waitlist's fair share (``c.GPULab.fairshare_half_life``,
  ``--half-life-days`` 7: Slurm's default ``PriorityDecayHalfLife``);
- ``session``: plus a maximum session on the research profile (its ``max_age``,
  ``--research-max-hours`` 4; the culler warns ``cull_warn_before`` ahead, then stops it);
- ``keep``: a user at the keyboard who sees a GPU-idle warning (``--lever-seen`` 0.8, assumed:
  it is in JupyterLab's status bar) clicks Keep, the service's ``keeping.keep_server`` with their
  group's ``keeps_per_day``;
- ``cpu``: they click Move to CPU instead (``keeping.move_to_cpu``: the slice is released, the
  server starts again on the CPU profile; a move, not a cull);
- ``spare``: the culler spares a GPU-idle server whose user was active in the last
  ``--spare-minutes`` (5) while a slice of its kind is free and nobody queues for one
  (``c.GPULabService.gpu_idle_spare_active``, ``fairuse.spare``): the slice is reclaimed only
  when someone needs it;
- ``signal``: the spare, with every server's JupyterLab extension reporting its user's last
  keystroke, click or scroll to the service (``service.presence``): at the keyboard means a
  keystroke in the last ``--spare-minutes``, not an open tab (a server's interaction time is
  its user's keyboard time);
- ``mig-research``: a MIG layout schedule (``c.GPULab.mig_schedule``) re-lays the first
  ``--layout-gpus`` MIG GPUs 2 x 3g.40gb outside booked class time, and a researcher refused a
  whole GPU takes a 3g.40gb instance (profile ``research-mig``);
- ``layout``: the same schedule with the research layout 1 x 7g.80gb;
- ``all``: every lever at once (fair share, session, the spare on the interaction report, Keep
  then Move to CPU, the 2 x 3g.40gb schedule with ``research-mig``).

``levers`` compares each of ``fairshare``, ``session``, ``keep``, ``cpu``, ``spare``, ``signal``,
``mig-research``, ``layout``, ``all`` (on) with ``gpulab`` (off). The spare is the culler's
own pass with the setting on; Keep, Move to CPU and the schedule run through the service's own
functions (``term/levers.py``): ``keep_server``, ``move_to_cpu``, and a subclass of the
service's ``LayoutKeeper`` whose pass (``layoutplan.decide``, drain, warn, stop holders, re-lay
only when empty) is unchanged; only NVML's re-lay is stood in (the GPU's
instances rewritten in the declared inventory, the ledger synced with it).

What runs is the product's code, called as the product calls it (``term/sim.py``): the spawner
core's reservation path (``ReservationMixin._reserve``: budget, image needs, the ledger's claim
with reservations and the waitlist's gate) on a real ledger (SQLite in a temporary folder), the
queue API's ``join_queue``, and the service's own ``Culler.run_pass`` and
``WaitlistKeeper.run_pass`` with a default ``GPULabService``'s settings (``cull_every`` 1 min,
``cull_warn_before`` 10 min, ``max_sample_gap`` 2 min, ``gpu_idle_threshold`` 5 %,
``preempt_min_idle`` 30 min, ``waitlist_hold`` 5 min). Modelled, not the product: the users
(``term/demand.py``), the hub's REST answers and ``last_activity`` (``term/hubsim.py``), and plain
JupyterHub's allocation and idle culler (``term/stock.py``).

Inputs (``term/data.py``'s ``INPUTS``, printed in the JSON):

- **measured**: which days are busy (DataHub SP2023 daily active users), how long a sitting lasts
  (DataHub's session-length histogram, 0-5 h), how long a GPU cell runs (NotebookOS, ASPLOS
  2026); the batch clusters' utilisation CDFs (AcmeTrace) as a check only;
- **assumed**, each with why: the population, the homework rate and hours, the sections, how
  users leave, researchers' sessions, patience, how often a warning is seen where it is shown,
  the hub's activity, the samples, the image's labels, the lab's configuration, the levers'
  settings (half-life, longest research session), how often a warning in JupyterLab is acted
  on (Keep, Move to CPU), and the layout schedule's reach.

The levers' figures are *measured* by the product's own rules on that demand (the waitlist's
order, ``ledger.fairshare``; the culler's ``max-age`` rule); what they would be on another lab
rests on the *assumed* inputs above, the researchers' sessions and patience first of all.

Figures and their reading: ``docs/source/architecture/term.md``. Counting: ``term/figures.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from term.data import INPUTS, LEVER_SEEN, below_threshold_shares
from term.demand import workload
from term.labs import (
    BOOKING,
    FAIRSHARE_HALF_LIFE,
    LABS,
    LEVERS,
    RESEARCH_MAX_SESSION,
    SCHEDULE,
    SPARE,
)
from term.sim import Simulation

#: what ``levers`` compares off and on
LEVER_FIGURES = (
    "research_wait_p50_min", "research_wait_p90_min", "research_unserved",
    "class_served_within_1min_pct", "homework_intents_unserved_pct", "culled_at_keyboard_pct",
)  # fmt: skip
#: the figures the last line gives for each lab (issue 22)
HEADLINE = (
    "class_served_within_1min_pct", "homework_intents_unserved_pct", "research_wait_p50_min",
    "research_wait_p90_min", "idle_held_pct", "culled_at_keyboard_pct", "budget_refusals",
    "preemptions",
)  # fmt: skip


def settings_used(sim: Simulation) -> dict:
    s = sim.settings
    return {
        k: getattr(s, k)
        for k in ("cull_every", "cull_warn_before", "max_sample_gap", "gpu_idle_threshold",
                  "preempt_min_idle", "waitlist_hold", "utilization_history")
    }  # fmt: skip


def run_lab(key: str, args) -> tuple[dict, dict, float]:
    """One lab's term (its own ledger in a temporary folder, its own clock): ``(figures, the
    service's settings it ran with, seconds)``. Every lab draws the same demand (the seed)."""
    spec = next(s for s in LABS if s.key == key)
    intents = workload(random.Random(args.seed), args.weeks, args.load)
    layout = (args.mig_gpus, args.research_gpus)
    t = time.perf_counter()

    async def term(db: str) -> tuple[dict, dict]:
        sim = Simulation(spec, intents, args.seed, db, args.weeks, layout, args.warning_seen)
        try:
            return await sim.run(), settings_used(sim)
        finally:
            sim.ledger.close()

    with tempfile.TemporaryDirectory() as tmp:
        result, settings = asyncio.run(term(f"sqlite:///{Path(tmp) / spec.key}.sqlite"))
    return result, settings, time.perf_counter() - t


def run_labs(args, specs) -> tuple[dict, dict]:
    """Every lab, ``--jobs`` at a time (each in its own process: the labs share nothing)."""
    keys = [s.key for s in specs]
    if args.jobs <= 1:
        done = [run_lab(k, args) for k in keys]
    else:  # fork: the children inherit BOOKING and the levers' settings as parsed
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(min(args.jobs, len(keys)), mp_context=ctx) as pool:
            done = list(pool.map(run_lab, keys, [args] * len(keys)))
    results = {}
    for spec, (result, _, seconds) in zip(specs, done):
        results[spec.key] = result
        print(f"({spec.key}) {spec.name}: {seconds:.0f} s", file=sys.stderr)
    return results, done[-1][1] if done else {}


def levers(results: dict) -> dict:
    """Each lever of issue 22 items 2 and 3: the research waits with it off (``gpulab``) and on."""
    off = results.get("gpulab")
    found = {}
    for lever, key in LEVERS.items():
        if off is None or key not in results:
            continue
        found[lever] = {
            side: {k: r[k] for k in LEVER_FIGURES}
            for side, r in (("off", off), ("on", results[key]))
        }
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weeks", type=int, default=14, help="term length, weeks (1-14)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--load", type=float, default=1.0, help="scale every session rate")
    parser.add_argument("--lead", type=int, default=60, help="bookings' lead, minutes")
    parser.add_argument("--seats", type=int, default=12, help="seats each section reserves")
    parser.add_argument("--mig-gpus", type=int, default=2, help="H100s in MIG mode (students)")
    parser.add_argument("--research-gpus", type=int, default=2, help="whole H100s (research)")
    parser.add_argument(
        "--warning-seen",
        type=float,
        default=0.2,
        help="probability (0-1) that a user at the keyboard sees a warning",
    )
    parser.add_argument(
        "--labs",
        default=",".join(s.key for s in LABS),
        help="comma-separated labs to run: " + ", ".join(s.key for s in LABS),
    )
    parser.add_argument("--small", action="store_true", help="one week at a fifth of the load")
    parser.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="labs run at once, each in its own process (default: the CPUs)",
    )
    parser.add_argument(
        "--half-life-days",
        type=float,
        default=7.0,
        help="the fairshare lab's c.GPULab.fairshare_half_life, days",
    )
    parser.add_argument(
        "--research-max-hours",
        type=float,
        default=4.0,
        help="the session lab's research profile max_age, hours",
    )
    parser.add_argument(
        "--lever-seen",
        type=float,
        default=LEVER_SEEN["p"],
        help="keep, cpu, all: probability (0-1) that a user at the keyboard acts on a GPU-idle "
        "warning shown in JupyterLab",
    )
    parser.add_argument(
        "--spare-minutes",
        type=float,
        default=SPARE["s"] / 60,
        help="spare, signal, all: c.GPULabService.gpu_idle_spare_active, minutes",
    )
    parser.add_argument(
        "--spare-longest-minutes",
        type=float,
        default=SPARE["longest"] / 60,
        help="spare, signal, all: c.GPULabService.gpu_idle_spare_longest, minutes",
    )
    parser.add_argument(
        "--layout-gpus",
        type=int,
        default=SCHEDULE["gpus"],
        help="mig-research, layout, all: MIG GPUs the layout schedule covers",
    )
    args = parser.parse_args()  # fmt: skip
    if args.small:
        args.weeks, args.load = 1, 0.2
    BOOKING["lead"], BOOKING["seats"] = args.lead, args.seats
    FAIRSHARE_HALF_LIFE["s"] = round(args.half_life_days * 86400)
    RESEARCH_MAX_SESSION["s"] = round(args.research_max_hours * 3600)
    LEVER_SEEN["p"], SCHEDULE["gpus"] = args.lever_seen, args.layout_gpus
    SPARE["s"] = round(args.spare_minutes * 60)
    SPARE["longest"] = round(args.spare_longest_minutes * 60)
    wanted = args.labs.split(",")
    unknown = [k for k in wanted if k not in {s.key for s in LABS}]
    if unknown or not 1 <= args.weeks <= 14:
        parser.error(f"--labs takes {', '.join(s.key for s in LABS)}; --weeks 1-14 ({unknown})")
    specs = [s for s in LABS if s.key in wanted]
    started = time.perf_counter()
    results, settings = run_labs(args, specs)
    wall = time.perf_counter() - started
    keys = list(results)
    print(f"{'':32s}" + "".join(f"{k:>12s}" for k in keys))
    for k, v in results[keys[0]].items():
        if isinstance(v, (int, float)):
            print(f"{k:32s}" + "".join(f"{results[lab][k]:12.1f}" for lab in keys))
    if "static" in results:
        print(f"utilisation samples below 5 % in static: {results['static']['idle_samples_pct']}"
              f" %; in published clusters: {below_threshold_shares()}")  # fmt: skip
    main_lab = results.get("gpulab") or results[keys[-1]]
    static = results.get("static")
    summary = {k: main_lab[k] for k in HEADLINE}
    summary["students_per_gpu_ratio"] = (
        round(main_lab["student_intents_served"] / max(1, static["student_intents_served"]), 2)
        if static else None
    )  # fmt: skip
    summary["double_allocations"] = sum(r["double_allocations"] for r in results.values())
    for key, name in (("static", "static"), ("plain", "plain_jupyterhub")):
        if key in results:
            summary[name] = {k: results[key][k] for k in HEADLINE}
    summary["levers"] = levers(results)
    summary["by_lab"] = results
    summary["inputs"] = INPUTS
    summary["settings"] = settings
    summary["lab"] = {
        "simulated": main_lab["lab"], "labs": keys,
        "devices": f"{args.mig_gpus + args.research_gpus} x NVIDIA H100 80GB: {args.mig_gpus} "
        f"in MIG mode, 7 x 1g.10gb each ({7 * args.mig_gpus} student slices), "
        f"{args.research_gpus} whole for research",
        "students": 200, "courses": 4, "roster_per_section": 25,
        "seats_reserved_per_section": args.seats, "class_gpu_users_per_section": 12,
        "sections_per_week": 8, "researchers": 20, "booking_lead_min": args.lead,
        "booking_grace_min": BOOKING["grace"], "term_weeks": args.weeks, "load": args.load,
        "seed": args.seed, "warning_seen": args.warning_seen,
        "fairshare_half_life_days": args.half_life_days,
        "research_max_session_hours": args.research_max_hours,
        "lever_seen": args.lever_seen, "layout_gpus": args.layout_gpus,
        "gpu_idle_spare_active_min": args.spare_minutes,
        "gpu_idle_spare_longest_min": args.spare_longest_minutes,
    }  # fmt: skip
    summary["run"] = {"wall_s": round(wall, 1), "jobs": args.jobs,
                      "loadavg_1m": round(os.getloadavg()[0], 2)}  # fmt: skip
    print(json.dumps(summary))


if __name__ == "__main__":
    main()

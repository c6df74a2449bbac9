"""What one lab's term measured (:func:`figures`). Counted per *intent* (a user who wanted a GPU
for a sitting), never per retry; an intent whose user finds their server running is served.

- ``class_served_within_1min_pct``: class intents holding a slice at most a minute after
  arriving; ``homework_intents_unserved_pct``: homework intents never served, budget refusals
  apart (``homework_budget_refused_pct``);
- ``research_wait_p50_min`` / ``_p90_min``: minutes from wanting to holding a GPU, an unserved
  intent counted at its full patience (240 min);
- ``idle_held_pct``: slice-minutes (a 1g slice 1/7) held while nobody was at the keyboard and
  the GPU idle, of all held; ``culled_at_keyboard_pct``: culls whose user was at the keyboard in
  the last 5 minutes, of all culls (``culled_at_keyboard_rules``: those by rule);
  ``budget_refusals``: spawns the GPU-hour budget refused;
  ``preemptions``: culls by the ``preempt`` rule;
- ``double_allocations``: slices with two open allocations (the ledger, every 15 minutes) plus
  overlapping allocations of one slice over the whole history.
"""

from __future__ import annotations

from datetime import timedelta

from .demand import PATIENCE, TERM_START


def pct(part: float, whole: float) -> float:
    return round(100 * part / whole, 2) if whole else 0.0


def figures(sim) -> dict:
    m, qs = sim.m, sim.intents
    cls = [q for q in qs if q.kind == "class"]
    hw = [q for q in qs if q.kind == "homework"]
    res = [q for q in qs if q.kind == "research"]
    waits = sorted((q.served_at - q.at) if q.served_at >= 0 else PATIENCE["research"] for q in res)
    history = sim.ledger.allocations_between(TERM_START - timedelta(days=1), sim.now)
    spans: dict[str, list] = {}
    for a in history:  # held offers included: a hold occupies its slice too
        spans.setdefault(a.slice_id, []).append((a.started_at, a.ended_at or sim.now))
    overlaps = sum(
        1 for v in spans.values() for (_, e1), (s2, _) in zip(sorted(v), sorted(v)[1:]) if s2 < e1
    )
    served = [q for q in cls + hw if q.served_at >= 0]
    return {
        "lab": sim.spec.name,
        "class_intents": len(cls),
        "class_served_within_1min_pct": pct(sum(0 <= q.served_at - q.at <= 1 for q in cls),
                                            len(cls)),
        "class_unserved_pct": pct(sum(q.served_at < 0 for q in cls), len(cls)),
        "homework_intents": len(hw),
        "homework_intents_unserved_pct": pct(
            sum(q.served_at < 0 and not q.budget_refused for q in hw), len(hw)
        ),
        "homework_budget_refused_pct": pct(sum(q.budget_refused for q in hw), len(hw)),
        "student_intents_served": len(served),
        "research_intents": len(res),
        "research_unserved": sum(q.served_at < 0 for q in res),
        "research_wait_p50_min": waits[len(waits) // 2] if waits else 0,
        "research_wait_p90_min": waits[int(0.9 * (len(waits) - 1))] if waits else 0,
        "sessions_on_a_running_server": m["reused"],
        "gpu_hours_held": round(m["held"] / 60, 1),
        "idle_held_pct": pct(m["idle_held"], m["held"]),
        "present_idle_pct": pct(m["present_idle"], m["held"]),
        "idle_samples_pct": pct(m["idle_minutes"], m["minutes"]),
        "culls": m["culls"],
        "culled_at_keyboard": m["culled_at_keyboard"],
        "culled_at_keyboard_pct": pct(m["culled_at_keyboard"], m["culls"]),
        "cull_rules": dict(sorted(sim.cull_rules.items())),
        "culled_at_keyboard_rules": dict(sorted(sim.keyboard_rules.items())),
        "warnings": m["warnings"],
        "warnings_at_keyboard": m["warnings_at_keyboard"],
        "budget_refusals": m["budget_refusals"],
        "budget_culls": m["budget_culls"],
        "preemptions": m["preemptions"],
        "keeps": m["keeps"],
        "keeps_refused": m["keeps_refused"],
        "moved_to_cpu": m["moved_to_cpu"],
        "cpu_starts": m["cpu_starts"],
        "research_on_mig": m["research_on_mig"],
        "relayouts": m["relayouts"],
        "layout_stops": m["layout_stops"],
        "double_allocations": m["doubles"] + overlaps,
    }  # fmt: skip

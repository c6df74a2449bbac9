"""The users of the term: who wants a GPU when, for how long, and how they leave. A **model**
(the product decides nothing here); its inputs are in :data:`.data.INPUTS` (``busy_days``,
``sitting_length``, ``gpu_cell_runs`` and ``think_time`` from data, the rest assumed).

Time is in minutes from the term's first Monday 00:00 (:data:`TERM_START`)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import datetime, timezone

from .data import day_weights, session_lengths

TERM_START = datetime(2026, 9, 7, tzinfo=timezone.utc)  # a Monday
DAY = 24 * 60
STUDENTS = [f"s{c}-{s:02d}" for c in range(4) for s in range(50)]
RESEARCHERS = [f"r{r:02d}" for r in range(20)]
#: minutes a queued user waits, per group (``patience``)
PATIENCE = {"students": 30, "research": 240}
HOUR_WEIGHTS = [0] * 10 + [2, 3, 3, 4, 5, 5, 5, 5, 5, 6, 8, 8, 8, 6]  # 10:00-24:00


@dataclass
class Intent:
    """A user who wants a GPU for a sitting from minute ``at``: ``present`` minutes at the
    keyboard, GPU cells ``runs`` (``(start, length)`` from ``at``), then ``leave``: ``stop``
    (stops the server), ``close`` (closes the tab), ``open`` (the tab stays open
    ``open_for`` more minutes); ``run_after``: minutes a run goes on after they left."""

    id: int
    kind: str  # class, homework, research
    user: str
    at: int
    present: int
    runs: list[tuple[int, int]]
    leave: str
    open_for: int = 0
    run_after: int = 0
    section: str = ""
    served_at: int = -1
    gave_up: bool = False
    budget_refused: bool = False
    retries: int = 0
    respawn: bool = False

    @property
    def group(self) -> str:
        return "research" if self.kind == "research" else "students"


def runs(rng, present, think_mean, run_median, run_sigma) -> list[tuple[int, int]]:
    """GPU cells over ``present`` minutes: think (exponential), run (log-normal), repeat."""
    found, t = [], 0.0
    while True:
        t += rng.expovariate(1 / think_mean)
        if t >= present:
            return found
        length = max(1, round(rng.lognormvariate(math.log(run_median), run_sigma)))
        found.append((round(t), length))
        t += length


def student_runs(rng, present: int) -> list[tuple[int, int]]:
    return runs(rng, present, 40, 6, 1.31)


def _student(rng, i, kind, at, user, present, section="") -> Intent:
    r = rng.random()
    leave = "stop" if r < 0.30 else "close" if r < 0.75 else "open"
    return Intent(
        i, kind, user, at, present, student_runs(rng, present), leave,
        open_for=round(rng.lognormvariate(math.log(180), 0.7)) if leave == "open" else 0,
        run_after=round(rng.lognormvariate(math.log(45), 0.6)) if rng.random() < 0.15 else 0,
        section=section,
    )  # fmt: skip


def sections() -> list[tuple[str, int, int, list[str]]]:
    """``(section group, weekday, hour, roster)`` of every lab section."""
    out = []
    for course in range(4):
        for sec in range(2):
            day, hour = (course + 2 * sec) % 5, 10 + 4 * sec
            roster = [f"s{course}-{s:02d}" for s in range(sec * 25, sec * 25 + 25)]
            out.append((f"c{course}-sec{sec}", day, hour, roster))
    return out


def poisson(rng: random.Random, mean: float) -> int:
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def workload(rng: random.Random, weeks: int, load: float) -> list[Intent]:
    """Every intent of the term, in time order (the same for every lab of a run)."""
    weights = day_weights(weeks * 7)
    hours, counts = session_lengths()
    intents: list[Intent] = []

    def new(kind, *a, **kw):
        intents.append(_student(rng, len(intents), kind, *a, **kw))

    for d in range(weeks * 7):
        mean = 1.5 / 7 * weights[d] * load
        for user in STUDENTS:
            for _ in range(poisson(rng, mean)):
                h = rng.choices(range(24), HOUR_WEIGHTS)[0]
                at = d * DAY + h * 60 + rng.randrange(60)
                length = rng.choices(hours, counts)[0] * 60 + rng.randrange(60)
                new("homework", at, user, max(10, length - 60))
    for week in range(weeks):
        for group, day, hour, roster in sections():
            start = week * 7 * DAY + day * DAY + hour * 60
            for user in rng.sample(roster, 12):
                at = start + rng.randrange(10)
                new("class", at, user, 120 - (at - start), section=group)
        for user in RESEARCHERS:
            for _ in range(poisson(rng, 1.0 * load)):
                at = week * 7 * DAY + rng.randrange(5) * DAY + rng.randrange(8 * 60, 18 * 60)
                present = round(rng.lognormvariate(math.log(120), 0.5))
                run = rng.random() < 0.3
                intents.append(
                    Intent(
                        len(intents), "research", user, at, present,
                        runs(rng, present, 10, 10, 0.5),
                        "close" if run or rng.random() < 0.5 else "stop",
                        run_after=round(rng.lognormvariate(math.log(180), 0.8)) if run else 0,
                    )
                )  # fmt: skip
    return sorted(intents, key=lambda q: (q.at, q.id))

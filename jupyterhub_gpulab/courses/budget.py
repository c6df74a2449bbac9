"""A course's GPU-hour budget (``gpu_hours`` in its record): what all its course servers (the
named servers ``<slug>`` of its roster and staff) may use together, weighted as every GPU-hour in
gpulab is (:func:`~..fairuse.accounting.gpu_seconds`: a whole GPU 1, a ``1g.10gb`` MIG slice
1/7, a seat its compute share).

The window is the lab's term (``c.GPULab.term_start`` / ``term_end``) while it runs, else the
course record's life (since it was created). A course server's start is refused once the budget
is spent (HTTP 429, :func:`refusal`); servers already running keep running, and users' own
budgets still apply to each of them. Pure: the caller reads the allocations.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from ..fairuse.accounting import gpu_seconds
from ..ledger.models import Allocation
from .model import Course

__all__ = ["refusal", "used_gpu_hours", "window_start"]


def window_start(term, created_at: datetime, now: datetime) -> datetime:
    """Where the course's budget window starts: the term's start while ``now`` is in the term
    (``term``: a :class:`~..lab.term.Term` or ``None``), else ``created_at``."""
    if term is not None and term.start <= now < term.end:
        return term.start
    return created_at


def used_gpu_hours(
    course: Course, allocations: Iterable[Allocation], start: datetime, now: datetime
) -> float:
    """GPU-hours the course's servers used in ``[start, now)``."""
    return (
        sum(
            gpu_seconds(a, start, now, now)
            for a in allocations
            if a.server_name == course.server_name
        )
        / 3600
    )


def refusal(course: Course, used: float) -> str | None:
    """The message refusing a course server's start once ``used`` GPU-hours reach the course's
    budget, else ``None`` (also for a course without one)."""
    if course.gpu_hours is None or used < course.gpu_hours:
        return None
    return (
        f"Course {course.title} has used {used:.1f} of its {course.gpu_hours:g} GPU-hours, so "
        "its servers cannot start now. Ask the course's staff."
    )

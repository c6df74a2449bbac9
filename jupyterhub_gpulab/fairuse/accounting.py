"""Usage accounting: GPU-seconds per allocation, summed per user, group and profile; CSV export.

Pure logic, no I/O: the caller reads allocations from the ledger
(:meth:`~jupyterhub_gpulab.ledger.Ledger.allocations_between`) and passes them in.

The weighting rule
------------------
A GPU-second is one second of one whole device. An allocation counts its wall-clock time inside
the window times its slice's ``share`` (recorded on the allocation when it was claimed, so a later
change of MIG layout does not rewrite history):

- a whole GPU (``gpu``): share 1.0 — a vGPU guest counts as one device too;
- a MIG device (``mig``): ``g / 7``, its compute slices ``g`` (the ``<g>g`` of ``1g.10gb``) over
  the parent's 7 compute slices on A100/H100/H200/B200 (4 on A30). Source: NVIDIA's *Multi-Instance
  GPU User Guide*, "Terminology" and "Supported MIG Profiles": a GPU instance of profile ``Ng``
  owns N of the GPU's 7 (A30: 4) compute slices. Compute, not memory, is the scarce part a
  student's ``1g.10gb`` takes from the lab, so a ``1g.10gb`` hour counts 1/7 of an A100 hour;
- a shared seat (``shared``): its configured compute share (``compute_share``, which MPS enforces
  as ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``; without MPS it is the seat's nominal share).

An open allocation counts up to ``now``; an allocation is counted only inside ``[start, end)``.
Usage therefore never depends on when it is computed, only on the ledger: a hub restart loses
nothing (DESIGN invariant 3).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from ..ledger.models import Allocation

__all__ = [
    "CSV_COLUMNS",
    "Usage",
    "UsageRow",
    "gpu_seconds",
    "slice_kind",
    "to_csv",
    "usage",
]

#: The columns of :func:`to_csv`, in order.
CSV_COLUMNS = (
    "period_start",
    "period_end",
    "user",
    "group",
    "profile",
    "slice_kind",
    "allocations",
    "gpu_seconds",
    "gpu_hours",
)


def slice_kind(allocation: Allocation) -> str:
    """``"mig"``, ``"shared"`` or ``"gpu"`` from the slice id's form (see
    :class:`~jupyterhub_gpulab.inventory.model.Slice`: ``MIG-…``, ``<uuid>/seat-<n>``, ``GPU-…``)."""
    sid = allocation.slice_id
    if sid.startswith("MIG-"):
        return "mig"
    if "/seat-" in sid:
        return "shared"
    return "gpu"


def gpu_seconds(allocation: Allocation, start: datetime, end: datetime, now: datetime) -> float:
    """Weighted GPU-seconds of ``allocation`` inside ``[start, end)``: the overlap in seconds times
    ``allocation.share``. An open allocation runs until ``now``; nothing counts after ``now``.
    All datetimes are timezone-aware. Never negative."""
    stop = allocation.ended_at if allocation.ended_at is not None else now
    lo = max(allocation.started_at, start)
    hi = min(stop, end, now)
    if hi <= lo:
        return 0.0
    return (hi - lo).total_seconds() * allocation.share


@dataclass(frozen=True)
class UsageRow:
    """Usage of one ``(user, group, profile, slice_kind)`` in ``[start, end)``.

    ``group`` is the allocation's charge group (``""`` when none); ``allocations`` counts those
    overlapping the window; ``gpu_seconds`` is weighted (module docstring)."""

    start: datetime
    end: datetime
    user: str
    group: str
    profile: str
    slice_kind: str
    allocations: int
    gpu_seconds: float

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600.0


@dataclass(frozen=True)
class Usage:
    """Weighted GPU-seconds in ``[start, end)``: ``rows`` (one per user, group, profile and slice
    kind, sorted) and the sums ``by_user``, ``by_group`` (charge group, ``""`` for none) and
    ``by_profile``; ``total`` is their grand total."""

    start: datetime
    end: datetime
    rows: tuple[UsageRow, ...]
    by_user: dict[str, float] = field(default_factory=dict)
    by_group: dict[str, float] = field(default_factory=dict)
    by_profile: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.by_user.values())

    def hours(self, user: str) -> float:
        """``user``'s weighted GPU-hours in the window (0.0 when they used none)."""
        return self.by_user.get(user, 0.0) / 3600.0


def usage(
    allocations: Iterable[Allocation], start: datetime, end: datetime, now: datetime
) -> Usage:
    """Sum :func:`gpu_seconds` of ``allocations`` over ``[start, end)`` (see module docstring).

    Allocations that do not overlap the window are ignored, so passing more than needed is safe.
    """
    cells: dict[tuple[str, str, str, str], list] = {}
    by_user: dict[str, float] = {}
    by_group: dict[str, float] = {}
    by_profile: dict[str, float] = {}
    for a in allocations:
        if a.started_at >= end or a.started_at > now:
            continue
        if a.ended_at is not None and a.ended_at <= start:
            continue
        seconds = gpu_seconds(a, start, end, now)
        group = a.charge_group or ""
        cell = cells.setdefault((a.user, group, a.profile, slice_kind(a)), [0, 0.0])
        cell[0] += 1
        cell[1] += seconds
        by_user[a.user] = by_user.get(a.user, 0.0) + seconds
        by_group[group] = by_group.get(group, 0.0) + seconds
        by_profile[a.profile] = by_profile.get(a.profile, 0.0) + seconds
    rows = tuple(
        UsageRow(start, end, user, group, profile, kind, n, seconds)
        for (user, group, profile, kind), (n, seconds) in sorted(cells.items())
    )
    return Usage(start, end, rows, by_user, by_group, by_profile)


# Cells starting with these are formulas to spreadsheet programs (OWASP "CSV injection").
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(text: str) -> str:
    return "'" + text if text.startswith(_FORMULA_START) else text


def to_csv(rows: Iterable[UsageRow]) -> str:
    """``rows`` as CSV text with a header (:data:`CSV_COLUMNS`): times in ISO 8601 UTC,
    ``gpu_seconds`` to 0.1 s, ``gpu_hours`` to 0.0001 h. Names that a spreadsheet would run as a
    formula (``=…``, ``+…``, ``-…``, ``@…``) are prefixed with ``'``."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in rows:
        writer.writerow(
            [
                r.start.isoformat(),
                r.end.isoformat(),
                _cell(r.user),
                _cell(r.group),
                _cell(r.profile),
                r.slice_kind,
                r.allocations,
                f"{r.gpu_seconds:.1f}",
                f"{r.gpu_hours:.4f}",
            ]
        )
    return out.getvalue()

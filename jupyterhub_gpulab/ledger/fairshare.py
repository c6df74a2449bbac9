"""Fair share in the waitlist: among users of one priority, who used the GPUs less lately goes
first. Pure logic, no I/O: :class:`~.waitlist.Waitlist` reads the queued users' allocations and
orders its entries with :func:`serving_order`.

The rule, after Slurm's fair-share (``priority/multifactor`` with ``PriorityDecayHalfLife``,
slurm.conf(5) and "Multifactor Priority Plugin"): a user's *decayed usage* is their weighted
GPU-hours (an allocation's wall-clock time times its slice's ``share``, as
:mod:`..fairuse.accounting` counts them) where a GPU-second used ``age`` seconds ago counts
``2 ** (-age / half_life)``. Slurm's fair-share factor ``2 ** (-U / S)`` falls as the usage ``U``
grows; with every user of one priority holding the same shares ``S``, ordering by the factor is
ordering by ``U``, which is what :func:`serving_order` does:

1. the policy's ``priority``, high first (research before students, as without fair share);
2. decayed usage, low first (``c.GPULab.fairshare_half_life``; 0 turns this step off);
3. first come (the entry's id).

There is no age factor: a heavy user waits behind lighter ones who queue later, until their own
usage has decayed below theirs or they give up (their patience, the queue's ``left``).
Usage older than :data:`LOOKBACK_HALF_LIVES` half-lives weighs under 0.1 % and is not read.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Protocol, TypeVar

__all__ = [
    "LOOKBACK_HALF_LIVES",
    "decayed_gpu_hours",
    "lookback_start",
    "serving_key",
    "serving_order",
]

#: How far back usage is read, in half-lives (2 ** -10 < 0.1 %).
LOOKBACK_HALF_LIVES = 10


class _Span(Protocol):
    user: str
    share: float
    started_at: datetime
    ended_at: datetime | None


class _Entry(Protocol):
    id: int
    user: str
    priority: int


E = TypeVar("E", bound=_Entry)


def lookback_start(now: datetime, half_life_s: float) -> datetime:
    """The earliest time whose usage :func:`decayed_gpu_hours` still weighs (module docstring)."""
    return now - timedelta(seconds=LOOKBACK_HALF_LIVES * half_life_s)


def decayed_gpu_hours(
    spans: Iterable[_Span], now: datetime, half_life_s: float
) -> dict[str, float]:
    """``{user: decayed GPU-hours}`` of ``spans`` (allocations: ``user``, ``share``,
    ``started_at``, ``ended_at``; an open one runs until ``now``) at ``now``.

    A span ``[s, e)`` of share ``w`` counts ``w * h / ln 2 * (2 ** (-(now - e) / h) -
    2 ** (-(now - s) / h)) / 3600`` GPU-hours, ``h = half_life_s``: the integral of
    ``2 ** (-age / h)`` over its seconds. So an hour just ended counts about 1, one a half-life
    ago about 0.5. Nothing after ``now`` counts. Raises ``ValueError`` for ``half_life_s <= 0``.
    """
    if half_life_s <= 0:
        raise ValueError(f"half_life_s must be positive seconds, not {half_life_s!r}")
    rate = math.log(2) / half_life_s
    found: dict[str, float] = {}
    for a in spans:
        end = min(a.ended_at or now, now)
        if end <= a.started_at:
            continue
        age_end = (now - end).total_seconds()
        age_start = (now - a.started_at).total_seconds()
        seconds = (math.exp(-rate * age_end) - math.exp(-rate * age_start)) / rate
        found[a.user] = found.get(a.user, 0.0) + a.share * seconds / 3600.0
    return found


def serving_key(entry: _Entry, usage: Mapping[str, float] | None = None) -> tuple:
    """The sort key of ``entry`` in serving order (module docstring): priority high first, then
    ``usage`` (``{user: decayed GPU-hours}``, a user not in it counts 0) low first, then id.
    ``usage`` ``None``: fair share off, priority then first come."""
    used = usage.get(entry.user, 0.0) if usage is not None else 0.0
    return (-entry.priority, used, entry.id)


def serving_order(entries: Iterable[E], usage: Mapping[str, float] | None = None) -> list[E]:
    """``entries`` sorted by :func:`serving_key`."""
    return sorted(entries, key=lambda e: serving_key(e, usage))

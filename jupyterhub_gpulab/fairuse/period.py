"""The budget period's allocations, read once and then only what changed: the culler's pass
needs every allocation since the GPU-hour window's start (a week, a term) every
``c.GPULabService.cull_every``, and reading the whole window each time made that pass cost in
proportion to the lab's history (a busy week: thousands of rows a minute).

An allocation that has ended never changes again as far as a budget counts it (its user, share,
start and end; only its ``end_reason`` may be amended), so :class:`PeriodReader` keeps the ended
ones and re-reads only the open ones and those ended since its last read, less
:data:`MARGIN` (a claim in another process stamps its own clock: a row committed a little late
with an earlier time is still seen). A new window (the week turned) or a clock that went back starts
over with a full read. The ledger never deletes a committed allocation.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ..ledger import Allocation

__all__ = ["MARGIN", "PeriodReader"]

#: How far before the last read the next one looks again for allocations that ended.
MARGIN = timedelta(minutes=5)


class PeriodReader:
    """``read(start, now)``: the ledger's allocations overlapping ``[start, now)``, oldest first,
    the same list :meth:`~..ledger.Ledger.allocations_between` gives, at the cost of the rows
    that changed since the previous call (module docstring). One per reader of the ledger (the
    service's culler); not shared between threads."""

    def __init__(self, ledger):
        self.ledger = ledger
        self._start: datetime | None = None
        self._read_at: datetime | None = None
        self._ended: dict[int, Allocation] = {}
        #: rows read by the last call (what the saving is measured in)
        self.last_rows = 0

    def read(self, start: datetime, now: datetime) -> list[Allocation]:
        if start >= now:
            self._start = self._read_at = None
            return []
        full = self._start != start or self._read_at is None or now < self._read_at
        since = None if full else self._read_at - MARGIN
        fresh = self.ledger.allocations_between(start, now, ended_since=since)
        self.last_rows = len(fresh)
        if full:
            self._ended = {}
        for a in fresh:
            if a.ended_at is not None:
                self._ended[a.id] = a
        self._start, self._read_at = start, now
        merged = dict(self._ended)
        merged.update((a.id, a) for a in fresh if a.ended_at is None)
        return [merged[k] for k in sorted(merged)]

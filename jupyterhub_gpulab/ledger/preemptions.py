"""The record of preemptions: servers stopped so that a higher-priority queued user got their
slice (:mod:`..fairuse.preempt`); shown to the user who lost it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from .. import clock
from ..clock import as_utc
from .models import slice_from_row
from .schema import preemptions, slices


@dataclass(frozen=True)
class Preemption:
    """``user``'s server ``server_name`` (allocation ``allocation_id``) was stopped at ``at`` for
    ``for_user``; ``reason`` is the message the user was shown."""

    at: datetime
    user: str
    server_name: str
    allocation_id: int | None
    for_user: str
    reason: str


class PreemptionRecords:
    """Mixed into :class:`~.ledger.Ledger` (uses ``_read``, ``_write``)."""

    def record_preemption(
        self, user: str, server_name: str, allocation_id: int | None, for_user: str, reason: str
    ) -> None:
        with self._write() as conn:
            conn.execute(
                preemptions.insert().values(
                    at=clock.utcnow(),
                    user=user,
                    server_name=server_name,
                    allocation_id=allocation_id,
                    for_user=for_user,
                    reason=reason,
                )
            )

    def preemptions(self, user: str | None = None) -> list[Preemption]:
        """Preemptions, newest first (the last 50); only ``user``'s when given."""
        q = sa.select(preemptions).order_by(preemptions.c.id.desc()).limit(50)
        if user is not None:
            q = q.where(preemptions.c.user == user)
        with self._read() as conn:
            rows = list(conn.execute(q))
        return [
            Preemption(as_utc(r.at), r.user, r.server_name, r.allocation_id, r.for_user, r.reason)
            for r in rows
        ]

    def slice_objects(self, ids=None) -> dict:
        """``{slice id: Slice}`` (of ``ids`` when given) for matching requests in Python."""
        q = sa.select(slices)
        if ids is not None:
            q = q.where(slices.c.id.in_(list(ids)))
        with self._read() as conn:
            return {r.id: slice_from_row(r) for r in conn.execute(q)}

"""The record of Keeps: each click on **Keep** under a GPU-idle warning (rules in
:mod:`~jupyterhub_gpulab.fairuse.keeps`), counted per user per local day; the culler reads the
latest per allocation, the admin page the count per user today."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from .models import as_utc
from .schema import keeps

#: How often :meth:`KeepRecords.take_keep` re-counts after losing a race for a number.
_TRIES = 5


class KeepRecords:
    """Mixed into :class:`~.ledger.Ledger` (uses ``_read``, ``_write``)."""

    def keeps_used(self, user: str, day: str) -> int:
        """How many Keeps ``user`` took on ``day`` (ISO date, :func:`~..fairuse.keeps.keep_day`)."""
        q = sa.select(sa.func.count()).where(keeps.c.user == user, keeps.c.day == day)
        with self._read() as conn:
            return int(conn.execute(q).scalar_one())

    def take_keep(
        self,
        user: str,
        server_name: str,
        allocation_id: int,
        *,
        day: str,
        allowance: int | None,
        at: datetime,
        until: datetime,
    ) -> int | None:
        """Record one Keep of ``user``'s allocation ``allocation_id`` on ``day`` if ``allowance``
        (``None``: no limit) has room; returns the user's keeps that day with this one, or
        ``None`` when they already used ``allowance`` (nothing written). Each keep takes the next
        number of the user's day, unique in the table, so concurrent clicks never both take the
        last one (the loser counts again)."""
        for _ in range(_TRIES):
            used = self.keeps_used(user, day)
            if allowance is not None and used >= allowance:
                return None
            try:
                with self._write() as conn:
                    conn.execute(
                        keeps.insert().values(
                            user=user,
                            server_name=server_name,
                            allocation_id=allocation_id,
                            day=day,
                            seq=used + 1,
                            at=at,
                            until=until,
                        )
                    )
            except IntegrityError:
                continue  # another click took that number: count again
            return used + 1
        return None

    def latest_keeps(self, allocation_ids: Iterable[int] | None = None) -> dict[int, datetime]:
        """``{allocation id: its latest Keep (UTC)}`` (of ``allocation_ids`` when given)."""
        q = sa.select(keeps.c.allocation_id, sa.func.max(keeps.c.at)).group_by(
            keeps.c.allocation_id
        )
        if allocation_ids is not None:
            q = q.where(keeps.c.allocation_id.in_(list(allocation_ids)))
        with self._read() as conn:
            return {a: as_utc(t) for a, t in conn.execute(q)}

    def keeps_by_user(self, day: str) -> dict[str, int]:
        """``{user: keeps taken on day}`` for the users who took any (the admin page)."""
        q = (
            sa.select(keeps.c.user, sa.func.count())
            .where(keeps.c.day == day)
            .group_by(keeps.c.user)
            .order_by(keeps.c.user)
        )
        with self._read() as conn:
            return {u: int(n) for u, n in conn.execute(q)}

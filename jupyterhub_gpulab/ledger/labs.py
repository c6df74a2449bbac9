"""The lab a ledger belongs to, and the other labs' containers seen holding its GPUs.

One ledger is one lab. Its identity (:class:`~.models.LabIdentity`) is the ``lab`` row made by
migration 0003: a random uuid that every container the lab starts carries as a label, so that
two labs sharing one Docker engine (staging beside production, two departments on one server)
each touch only their own containers. The hub records what it finds on the engine
(:meth:`LabRecords.record_foreign`); the service's admin page reads it.
"""

from __future__ import annotations

import logging
import uuid as uuidlib
from collections.abc import Iterable, Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from .. import clock
from ..clock import as_utc
from . import db
from .models import Allocation, ForeignContainer, LabIdentity
from .schema import allocations, foreign_containers, lab

log = logging.getLogger(__name__)

_SELECT_LAB = sa.select(lab.c.uuid, lab.c.name).where(lab.c.id == 1)


class LabRecords:
    """Mixed into :class:`~.ledger.Ledger` (uses its ``_read`` and ``_write``)."""

    _identity: LabIdentity | None = None

    def identity(self) -> LabIdentity:
        """This ledger's lab (read once, then cached). A ledger whose ``lab`` row was deleted by
        hand gets a new id, logged: containers labelled with the old one are no longer ours."""
        if self._identity is None:
            with self._read() as conn:
                row = conn.execute(_SELECT_LAB).first()
            if row is None:
                row = self._make_identity()
            self._identity = LabIdentity(row.uuid, row.name)
        return self._identity

    def _make_identity(self):
        try:
            with self._write() as conn:
                conn.execute(
                    lab.insert().values(id=1, uuid=str(uuidlib.uuid4()), created_at=clock.utcnow())
                )
        except IntegrityError:
            pass  # another process made it first
        with self._read() as conn:
            row = conn.execute(_SELECT_LAB).one()
        log.warning("The ledger had no lab id; it is now %s", row.uuid)
        return row

    def name_lab(self, name: str | None) -> LabIdentity:
        """Record ``name`` (``c.GPULab.lab_name``; ``None`` or ``""``: no name) as the lab's
        name and return the identity. Writes only when it changed."""
        name = name or None
        current = self.identity()
        if current.name != name:
            with self._write() as conn:
                conn.execute(lab.update().where(lab.c.id == 1).values(name=name))
            self._identity = LabIdentity(current.uuid, name)
        return self._identity

    def allocations_by_id(self, ids: Iterable[int]) -> dict[int, Allocation]:
        """``{id: Allocation}`` for those of ``ids`` the ledger has (open or closed)."""
        wanted = sorted(set(ids))
        if not wanted:
            return {}
        with self._read() as conn:
            rows = conn.execute(sa.select(allocations).where(allocations.c.id.in_(wanted)))
            return {r.id: Allocation.from_row(r) for r in rows}

    def record_foreign(
        self, node: str, found: Sequence[ForeignContainer], seen_at: datetime | None = None
    ) -> None:
        """Replace what is recorded for ``node`` with ``found`` (the hub's latest look)."""
        seen_at = seen_at or clock.utcnow()
        with self._write() as conn:
            conn.execute(foreign_containers.delete().where(foreign_containers.c.node == node))
            if found:
                conn.execute(
                    foreign_containers.insert(),
                    [
                        {
                            "node": node,
                            "container_id": f.container_id,
                            "container_name": f.container_name[:255],
                            "lab_uuid": f.lab_uuid,
                            "lab_name": (f.lab_name or None) and f.lab_name[:64],
                            "user": f.user,
                            "devices": " ".join(f.devices),
                            "attached_by": f.attached_by[:64],
                            "seen_at": seen_at,
                        }
                        for f in found
                    ],
                )

    def foreign_containers(self, node: str | None = None) -> list[ForeignContainer]:
        """What the hub last recorded (on ``node`` if given), by container name."""
        q = sa.select(foreign_containers).order_by(
            foreign_containers.c.node, foreign_containers.c.container_name
        )
        if node is not None:
            q = q.where(foreign_containers.c.node == node)
        with self._read() as conn:
            return [
                ForeignContainer(
                    container_id=r.container_id,
                    container_name=r.container_name,
                    lab_uuid=r.lab_uuid,
                    lab_name=r.lab_name,
                    user=r.user,
                    devices=tuple(r.devices.split()),
                    attached_by=r.attached_by,
                    seen_at=as_utc(r.seen_at),
                )
                for r in conn.execute(q)
            ]


def peek_identity(url: str) -> LabIdentity | None:
    """The lab id of the ledger at ``url`` without creating or upgrading anything: ``None`` when
    there is no such database yet or its schema predates lab ids (for ``gpulab check-config``)."""
    u = sa.make_url(url)
    if u.get_backend_name() == "sqlite":
        from pathlib import Path

        if not u.database or u.database == ":memory:" or not Path(u.database).exists():
            return None
    engine = db.make_engine(url)
    try:
        if not sa.inspect(engine).has_table("lab"):
            return None
        with engine.connect().execution_options(**db.READ) as conn:
            row = conn.execute(_SELECT_LAB).first()
        return LabIdentity(row.uuid, row.name) if row else None
    except sa.exc.OperationalError:
        return None
    finally:
        engine.dispose()

"""The slice ledger: who holds which slice, claimed atomically, released exactly once.

All methods are synchronous (the spawner calls them in a thread). One :class:`Ledger` per process;
several processes (hub, service, a second hub replica on PostgreSQL) may share one database.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from .. import clock
from ..inventory.model import Inventory, SliceKind, SliceRequest
from . import db
from .models import (
    Allocation,
    Claim,
    NoFreeSlice,
    QuotaExceeded,
    ReconcileReport,
    SyncReport,
    slice_from_row,
)
from .schema import allocations, devices, refusals, slices

log = logging.getLogger(__name__)

# Statements on the claim / release path are built once: constructing SQLAlchemy statements
# costs more than running them on SQLite, and the benchmark holds this path to ~1 ms.
_INSERT_ALLOCATION = allocations.insert().returning(allocations.c.id)
_HOLD_SLICE = (
    slices.update()
    .where(slices.c.id == sa.bindparam("sid"), slices.c.held_by.is_(None))
    .values(held_by=sa.bindparam("aid"))
)
_CLOSE_ALLOCATION = (
    allocations.update()
    .where(allocations.c.id == sa.bindparam("aid"), allocations.c.ended_at.is_(None))
    .values(ended_at=sa.bindparam("now"), end_reason=sa.bindparam("reason"))
    .returning(allocations.c.slice_id)
)
_FREE_SLICE = (
    slices.update()
    .where(slices.c.id == sa.bindparam("sid"), slices.c.held_by == sa.bindparam("aid"))
    .values(held_by=None)
)

#: How many candidate slices one claim tries before re-reading (conflicts are rare: SQLite
#: serialises writers, PostgreSQL skips locked rows).
CANDIDATES = 4


class Ledger:
    """The allocation ledger over one database URL.

    ``url`` is a SQLAlchemy URL (``sqlite:////srv/gpulab/gpulab.sqlite``,
    ``postgresql+psycopg://…``). The schema is created on first use; an older schema raises
    :class:`~.db.SchemaOutOfDate` unless ``auto_upgrade``.
    """

    def __init__(self, url: str, *, auto_upgrade: bool = False, engine: sa.Engine | None = None):
        self.engine = engine or db.make_engine(url)
        self.dialect = self.engine.dialect.name
        db.ensure_schema(self.engine, auto_upgrade=auto_upgrade)
        self._checkpointer = (
            db.Checkpointer(self.engine).start() if db.Checkpointer.wanted(self.engine) else None
        )

    # -- connections ------------------------------------------------------------------------

    def _write(self):
        return self.engine.begin()

    def _read(self):
        return self.engine.connect().execution_options(**db.READ)

    def close(self) -> None:
        """Stop the background checkpointer and close pooled connections."""
        if self._checkpointer is not None:
            self._checkpointer.stop()
        self.engine.dispose()

    # -- inventory --------------------------------------------------------------------------

    def sync_inventory(self, inventory: Inventory, node: str = "local") -> SyncReport:
        """Make the slice table match ``inventory`` for ``node``.

        New slices are added, changed ones updated (their holders kept), slices no longer present
        are marked unavailable — never handed out again — and open allocations on them are
        reported in ``vanished_held`` for an admin to look at. Drain state survives.
        """
        now = clock.utcnow()
        dev_rows = [
            {
                "uuid": d.uuid,
                "node": node,
                "index": d.index,
                "name": d.name,
                "memory_bytes": d.memory_bytes,
                "compute_capability": (
                    f"{d.compute_capability[0]}.{d.compute_capability[1]}"
                    if d.compute_capability
                    else None
                ),
                "mig_enabled": d.mig_enabled,
                "vgpu_type": d.vgpu_type,
                "present": True,
                "updated_at": now,
            }
            for d in inventory.devices
        ]
        wanted = {s.id: s for s in inventory.slices}
        added, updated = [], []
        with self._write() as conn:
            known_devices = {
                r.uuid: r.drained
                for r in conn.execute(
                    sa.select(devices.c.uuid, devices.c.drained).where(devices.c.node == node)
                )
            }
            for row in dev_rows:
                if row["uuid"] in known_devices:
                    conn.execute(
                        devices.update().where(devices.c.uuid == row["uuid"]).values(**row)
                    )
                else:
                    conn.execute(devices.insert().values(drained=False, **row))
            gone_devices = set(known_devices) - {r["uuid"] for r in dev_rows}
            if gone_devices:
                conn.execute(
                    devices.update()
                    .where(devices.c.uuid.in_(gone_devices))
                    .values(present=False, updated_at=now)
                )
            drained = {u for u, d in known_devices.items() if d}
            existing = {
                r.id: r for r in conn.execute(sa.select(slices).where(slices.c.node == node))
            }
            for sid, s in wanted.items():
                values = {
                    "kind": s.kind.value,
                    "device_uuid": s.device_uuid,
                    "node": node,
                    "device_index": s.device_index,
                    "device_name": s.device_name,
                    "memory_bytes": s.memory_bytes,
                    "visible_id": s.visible_id,
                    "share": s.share,
                    "mig_profile": s.mig_profile,
                    "seat": s.seat,
                    "seats": s.seats,
                    "rank": s.rank,
                    "available": s.device_uuid not in drained,
                }
                old = existing.get(sid)
                if old is None:
                    conn.execute(slices.insert().values(id=sid, held_by=None, **values))
                    added.append(sid)
                elif any(getattr(old, k) != v for k, v in values.items()):
                    conn.execute(slices.update().where(slices.c.id == sid).values(**values))
                    updated.append(sid)
            vanished = sorted(set(existing) - set(wanted))
            vanished_held: list[Allocation] = []
            if vanished:
                conn.execute(
                    slices.update().where(slices.c.id.in_(vanished)).values(available=False)
                )
                vanished_held = [
                    Allocation.from_row(r)
                    for r in conn.execute(
                        sa.select(allocations).where(
                            allocations.c.slice_id.in_(vanished), allocations.c.ended_at.is_(None)
                        )
                    )
                ]
        for a in vanished_held:
            log.warning(
                "Slice %s held by %s's server %r (allocation %d) is no longer in the inventory",
                a.slice_id,
                a.user,
                a.server_name,
                a.id,
            )
        return SyncReport(tuple(added), tuple(updated), tuple(vanished), tuple(vanished_held))

    def set_drained(self, device_uuid: str, drained: bool, reason: str | None = None) -> bool:
        """Drain (``True``) or return to service a device; a drained device's free slices are
        never handed out, held ones stay with their holders. Returns whether the device exists."""
        with self._write() as conn:
            res = conn.execute(
                devices.update()
                .where(devices.c.uuid == device_uuid)
                .values(
                    drained=drained,
                    drain_reason=reason if drained else None,
                    updated_at=clock.utcnow(),
                )
            )
            if res.rowcount == 0:
                return False
            present = conn.execute(
                sa.select(devices.c.present).where(devices.c.uuid == device_uuid)
            ).scalar_one()
            conn.execute(
                slices.update()
                .where(slices.c.device_uuid == device_uuid)
                .values(available=bool(present and not drained))
            )
            # slices marked vanished stay unavailable
            if present and not drained:
                pass
        return True

    def return_to_service(self, device_uuid: str, present_slices: Iterable[str]) -> bool:
        """Undrain a device, making available again only its slices in ``present_slices`` (the
        ids of the latest inventory read): unlike ``set_drained(uuid, False)``, slices that
        vanished from the inventory (a changed MIG layout) stay out of service. One transaction.
        Returns whether the device exists."""
        present_slices = set(present_slices)
        with self._write() as conn:
            res = conn.execute(
                devices.update()
                .where(devices.c.uuid == device_uuid)
                .values(drained=False, drain_reason=None, updated_at=clock.utcnow())
            )
            if res.rowcount == 0:
                return False
            present = conn.execute(
                sa.select(devices.c.present).where(devices.c.uuid == device_uuid)
            ).scalar_one()
            conn.execute(
                slices.update()
                .where(slices.c.device_uuid == device_uuid)
                .values(
                    available=sa.and_(sa.literal(bool(present)), slices.c.id.in_(present_slices))
                )
            )
        return True

    # -- claim / release --------------------------------------------------------------------

    def _free_query(self, request: SliceRequest, limit: int):
        q = sa.select(slices).where(
            slices.c.held_by.is_(None),
            slices.c.kind == request.kind.value,
            slices.c.available == sa.true(),
        )
        if request.kind is SliceKind.MIG:
            q = q.where(slices.c.mig_profile == request.mig_profile)
        else:
            q = q.where(slices.c.mig_profile.is_(None))
        if request.min_memory_bytes:
            q = q.where(slices.c.memory_bytes >= request.min_memory_bytes)
        if request.model:
            q = q.where(sa.func.lower(slices.c.device_name).contains(request.model.lower()))
        q = q.order_by(slices.c.rank, slices.c.id).limit(limit)
        if self.dialect == "postgresql":
            q = q.with_for_update(skip_locked=True)
        return q

    def _lock(self, conn, keys: Iterable[str]) -> None:
        """Serialise quota checks for the same user/group across PostgreSQL sessions.
        (SQLite already serialises every writer with BEGIN IMMEDIATE.)"""
        if self.dialect != "postgresql":
            return
        for key in sorted(set(keys)):
            conn.execute(
                sa.text("SELECT pg_advisory_xact_lock(:k)"),
                {"k": zlib.crc32(key.encode()) - 2**31},
            )

    def _count_open(self, conn, column, value) -> int:
        return conn.execute(
            sa.select(sa.func.count())
            .select_from(allocations)
            .where(column == value, allocations.c.ended_at.is_(None))
        ).scalar_one()

    def claim(
        self,
        request: SliceRequest,
        *,
        user: str,
        profile: str,
        server_name: str = "",
        node: str | None = None,
        user_limit: int | None = None,
        charge_groups: Sequence[tuple[str, int | None]] = (),
        only_slice: str | None = None,
    ) -> Claim:
        """Hold a free slice satisfying ``request`` for ``user``'s server, atomically.

        Placement: slices are tried in ``rank`` order — best fit for whole GPUs (smallest memory
        that satisfies), device order for MIG, and seats packed onto devices already shared.
        ``user_limit`` caps the user's open allocations (all named servers); ``charge_groups`` are
        ``(group, cap)`` pairs tried in order, the allocation counting against the first with room
        (``cap=None`` means no cap). Limits are checked in the same transaction as the claim.
        ``only_slice`` restricts the search to one slice id (re-adopting a running container).

        Raises :class:`QuotaExceeded` or :class:`NoFreeSlice` (with a user-facing message).
        """
        if request.kind is None:
            raise ValueError("a CPU-only request holds no slice; do not claim one")
        with self._write() as conn:
            self._lock(conn, [f"user:{user}"] + [f"group:{g}" for g, _ in charge_groups])
            if user_limit is not None:
                held = self._count_open(conn, allocations.c.user, user)
                if held >= user_limit:
                    raise QuotaExceeded(
                        f"You already hold {held} GPU slice{'s' if held != 1 else ''}, the most "
                        f"your groups allow at once ({user_limit}). Stop one of your servers to "
                        "start this one."
                    )
            charge_group = None
            if charge_groups:
                full = []
                for group, cap in charge_groups:
                    if cap is None:
                        charge_group = group
                        break
                    used = self._count_open(conn, allocations.c.charge_group, group)
                    if used < cap:
                        charge_group = group
                        break
                    full.append(f"{group} ({used} of {cap})")
                else:
                    raise QuotaExceeded(
                        "Your group's GPU slices are all in use: "
                        + ", ".join(full)
                        + ". Try again when a classmate stops a server, or pick a CPU profile."
                    )
            tried: set[str] = set()
            while True:
                q = self._free_query(request, CANDIDATES + len(tried))
                if only_slice is not None:
                    q = q.where(slices.c.id == only_slice)
                rows = [r for r in conn.execute(q) if r.id not in tried]
                if not rows:
                    break
                for row in rows:
                    tried.add(row.id)
                    got = self._try_hold(conn, row, user, server_name, profile, node, charge_group)
                    if got is not None:
                        return Claim(got, slice_from_row(row))
        free, total = self.capacity(request)
        raise NoFreeSlice(
            f"No free {request.describe()} slice ({free} of {total} free). "
            + (
                "Try again later or pick another profile."
                if total
                else "This lab has no slice of that kind; ask an admin or pick another profile."
            ),
            free=free,
            total=total,
        )

    def _try_hold(self, conn, row, user, server_name, profile, node, charge_group):
        now = clock.utcnow()
        values = {
            "slice_id": row.id,
            "user": user,
            "server_name": server_name,
            "profile": profile,
            "node": node or row.node,
            "charge_group": charge_group,
            "share": row.share,
            "started_at": now,
        }
        # SQLite: BEGIN IMMEDIATE made us the only writer and a failed statement leaves the
        # transaction usable, so no savepoint is needed. PostgreSQL aborts the transaction on a
        # unique violation, so the attempt runs inside a savepoint there.
        nested = conn.begin_nested() if self.dialect != "sqlite" else None
        try:
            alloc_id = conn.execute(_INSERT_ALLOCATION, values).scalar_one()
            if conn.execute(_HOLD_SLICE, {"sid": row.id, "aid": alloc_id}).rowcount != 1:
                raise _Taken()
        except (IntegrityError, _Taken):
            if nested is not None:
                nested.rollback()
            elif "alloc_id" in locals():
                conn.execute(allocations.delete().where(allocations.c.id == alloc_id))
            log.debug("Slice %s was taken concurrently; trying the next", row.id)
            return None
        if nested is not None:
            nested.commit()
        return Allocation(
            id=alloc_id,
            container_id=None,
            container_name=None,
            ended_at=None,
            end_reason=None,
            **values,
        )

    def release(self, allocation_id: int, reason: str) -> bool:
        """Close allocation ``allocation_id`` with ``reason`` and free its slice.

        Idempotent: returns ``True`` when this call closed it, ``False`` when it was already closed
        or does not exist.
        """
        with self._write() as conn:
            slice_id = conn.execute(
                _CLOSE_ALLOCATION,
                {"aid": allocation_id, "now": clock.utcnow(), "reason": reason[:64]},
            ).scalar_one_or_none()
            if slice_id is None:
                return False
            conn.execute(_FREE_SLICE, {"sid": slice_id, "aid": allocation_id})
        return True

    def set_container(
        self, allocation_id: int, container_id: str | None, container_name: str | None = None
    ) -> None:
        """Record the container holding an open allocation (the spawner calls this after create)."""
        with self._write() as conn:
            conn.execute(
                allocations.update()
                .where(allocations.c.id == allocation_id)
                .values(container_id=container_id, container_name=container_name)
            )

    # -- reconcile --------------------------------------------------------------------------

    def reconcile(
        self,
        live: Mapping[str, int | None],
        *,
        node: str | None = None,
        reason: str = "reconciled",
        started_before: datetime | None = None,
    ) -> ReconcileReport:
        """Compare open allocations with the containers that exist.

        ``live`` maps each existing container id to the allocation id its label names (or
        ``None``). Open allocations (on ``node`` if given) whose container is not in ``live`` — and
        that have a container recorded, or are labelled on no live container — are closed with
        ``reason``. Live containers naming no open allocation are returned as orphans for the
        caller to re-adopt or stop. ``started_before`` spares younger allocations (spawns still
        creating their container).
        """
        labelled = {aid for aid in live.values() if aid is not None}
        q = sa.select(allocations).where(allocations.c.ended_at.is_(None))
        if node is not None:
            q = q.where(allocations.c.node == node)
        with self._read() as conn:
            all_open = {
                r.id
                for r in conn.execute(
                    sa.select(allocations.c.id).where(allocations.c.ended_at.is_(None))
                )
            }
            if started_before is not None:
                q = q.where(allocations.c.started_at < started_before)
            open_rows = [Allocation.from_row(r) for r in conn.execute(q)]
        open_ids = all_open
        closed = []
        for a in open_rows:
            alive = (a.container_id is not None and a.container_id in live) or a.id in labelled
            if not alive and self.release(a.id, reason):
                closed.append(a)
        orphans = tuple(cid for cid, aid in live.items() if aid is None or aid not in open_ids)
        return ReconcileReport(tuple(closed), orphans)

    # -- queries ----------------------------------------------------------------------------

    def get(self, allocation_id: int) -> Allocation | None:
        with self._read() as conn:
            row = conn.execute(
                sa.select(allocations).where(allocations.c.id == allocation_id)
            ).first()
        return Allocation.from_row(row) if row else None

    def open_allocations(self, user: str | None = None) -> list[Allocation]:
        """Open allocations, oldest first; only ``user``'s when given."""
        q = sa.select(allocations).where(allocations.c.ended_at.is_(None))
        if user is not None:
            q = q.where(allocations.c.user == user)
        with self._read() as conn:
            return [Allocation.from_row(r) for r in conn.execute(q.order_by(allocations.c.id))]

    def allocations_between(self, start: datetime, end: datetime) -> list[Allocation]:
        """Allocations that overlap ``[start, end)`` (for usage accounting)."""
        q = sa.select(allocations).where(
            allocations.c.started_at < end,
            sa.or_(allocations.c.ended_at.is_(None), allocations.c.ended_at >= start),
        )
        with self._read() as conn:
            return [Allocation.from_row(r) for r in conn.execute(q.order_by(allocations.c.id))]

    def slices(self) -> list[dict]:
        """Every slice row as a dict (``id``, ``kind``, ``available``, ``held_by`` …)."""
        with self._read() as conn:
            return [
                dict(r._mapping)
                for r in conn.execute(
                    sa.select(slices).order_by(slices.c.node, slices.c.device_index, slices.c.rank)
                )
            ]

    def devices(self) -> list[dict]:
        """Every device row as a dict (``uuid``, ``name``, ``drained``, ``present`` …)."""
        with self._read() as conn:
            return [
                dict(r._mapping)
                for r in conn.execute(sa.select(devices).order_by(devices.c.node, devices.c.index))
            ]

    def capacity(self, request: SliceRequest) -> tuple[int, int]:
        """``(free, total)`` slices matching ``request`` that are in service (not drained or
        vanished). ``free`` excludes held slices."""
        base = (
            sa.select(sa.func.count())
            .select_from(slices)
            .where(slices.c.kind == request.kind.value, slices.c.available == sa.true())
        )
        if request.kind is SliceKind.MIG:
            base = base.where(slices.c.mig_profile == request.mig_profile)
        if request.min_memory_bytes:
            base = base.where(slices.c.memory_bytes >= request.min_memory_bytes)
        if request.model:
            base = base.where(sa.func.lower(slices.c.device_name).contains(request.model.lower()))
        with self._read() as conn:
            total = conn.execute(base).scalar_one()
            free = conn.execute(base.where(slices.c.held_by.is_(None))).scalar_one()
        return free, total

    def count_open(self, *, user: str | None = None, group: str | None = None) -> int:
        """Open allocations held by ``user`` or charged to ``group``."""
        with self._read() as conn:
            if user is not None:
                return self._count_open(conn, allocations.c.user, user)
            return self._count_open(conn, allocations.c.charge_group, group)

    def open_by_group(self) -> dict[str, int]:
        """``{group: open allocations charged to it}``."""
        q = (
            sa.select(allocations.c.charge_group, sa.func.count())
            .where(allocations.c.ended_at.is_(None), allocations.c.charge_group.is_not(None))
            .group_by(allocations.c.charge_group)
        )
        with self._read() as conn:
            return {g: n for g, n in conn.execute(q)}

    def double_allocations(self) -> list[tuple[str, int]]:
        """Slices with more than one open allocation — always empty unless the database's unique
        index was removed. Used by tests and benchmarks to check the invariant in the database."""
        q = (
            sa.select(allocations.c.slice_id, sa.func.count())
            .where(allocations.c.ended_at.is_(None))
            .group_by(allocations.c.slice_id)
            .having(sa.func.count() > 1)
        )
        with self._read() as conn:
            return [(s, n) for s, n in conn.execute(q)]

    # -- refusals ---------------------------------------------------------------------------

    def record_refusal(self, user: str, profile: str | None, reason: str, message: str) -> None:
        """Log a refused spawn for the admin page (kept 30 days)."""
        now = clock.utcnow()
        with self._write() as conn:
            conn.execute(
                refusals.insert().values(
                    at=now, user=user, profile=profile, reason=reason[:64], message=message
                )
            )
            conn.execute(refusals.delete().where(refusals.c.at < now - timedelta(days=30)))

    def refusals_since(self, since: datetime) -> dict[str, int]:
        """``{reason: count}`` of refusals since ``since``."""
        q = (
            sa.select(refusals.c.reason, sa.func.count())
            .where(refusals.c.at >= since)
            .group_by(refusals.c.reason)
        )
        with self._read() as conn:
            return {r: n for r, n in conn.execute(q)}


class _Taken(Exception):
    """Internal: the slice row was taken between our read and our write."""

"""The slice ledger: who holds which slice, claimed atomically, released exactly once.

All methods are synchronous (the spawner calls them in a thread). One :class:`Ledger` per process;
several processes (hub, service, a second hub replica on PostgreSQL) may share one database.

Long because the claim and the release, the two halves of the invariant, stay in one body; the
reads are in :mod:`.queries`, the queue in :mod:`.waitlist`, bookings in :mod:`.placement`.
"""

from __future__ import annotations

import itertools
import logging
import threading
import zlib
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime
from typing import Protocol

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from .. import clock
from ..inventory.model import SliceRequest
from ..units import counted
from . import db
from .claimreads import read_holder
from .events import LedgerEvents, announced_claim
from .inventory_sync import InventorySync
from .keeps import KeepRecords
from .labs import LabRecords
from .models import (
    Allocation,
    Claim,
    LedgerRefusal,
    QuotaExceeded,
    slice_from_row,
)
from .nodes import NodeRecords
from .placement import ADVISORY_LOCK, Reservations
from .preemptions import PreemptionRecords
from .queries import LedgerQueries, slice_filter
from .queueoffers import QueueOffers
from .readrefusal import PendingRefusals
from .schema import allocations, slices
from .waitlist import Waitlist

log = logging.getLogger(__name__)

# Statements on the claim / release path are built once: constructing SQLAlchemy statements
# costs more than running them on SQLite, and the benchmark holds this path to ~1 ms.
# The ``held_by`` mirror is the database's to keep (:mod:`.schema`, migration 0011): inserting an
# open allocation marks its slice held, or fails as the unique index does when another holds it;
# closing one frees its slice. A claim and a release are one statement each.
_INSERT_ALLOCATION = allocations.insert().returning(allocations.c.id)
_CLOSE_ALLOCATION = (
    allocations.update()
    .where(allocations.c.id == sa.bindparam("aid"), allocations.c.ended_at.is_(None))
    .values(ended_at=sa.bindparam("now"), end_reason=sa.bindparam("reason"))
    .returning(allocations.c.slice_id)
)
#: :data:`_CLOSE_ALLOCATION` only while the allocation is still a waitlist hold (no server took it).
_CLOSE_HOLD = _CLOSE_ALLOCATION.where(allocations.c.hold_until.is_not(None))

_SLICE = sa.select(slices).where(slices.c.id == sa.bindparam("sid"))

#: How many candidate slices one claim tries before re-reading (conflicts are rare: SQLite
#: serialises writers, PostgreSQL skips locked rows).
CANDIDATES = 4


class Ledger(
    LedgerEvents,
    InventorySync,
    LabRecords,
    NodeRecords,
    LedgerQueries,
    Reservations,
    Waitlist,
    QueueOffers,
    PreemptionRecords,
    KeepRecords,
):
    """The allocation ledger over one database URL.

    ``url`` is a SQLAlchemy URL (``sqlite:////srv/gpulab/gpulab.sqlite``,
    ``postgresql+psycopg://…``). The schema is created on first use; an older schema raises
    :class:`~.db.SchemaOutOfDate` unless ``auto_upgrade``.
    """

    def __init__(self, url: str, *, auto_upgrade: bool = False, engine: sa.Engine | None = None):
        self.engine = engine or db.make_engine(url)
        self.dialect = self.engine.dialect.name
        db.ensure_schema(self.engine, auto_upgrade=auto_upgrade)
        #: refusals decided on a read, waiting to be written (:mod:`.readrefusal`)
        self.pending_refusals = PendingRefusals()
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

    # -- claim / release --------------------------------------------------------------------

    def _free_query(self, request: SliceRequest, limit: int):
        """The first ``limit`` free slices satisfying ``request`` in placement order (built once
        per request and limit: :meth:`~.queries.LedgerQueries._statement`)."""

        def build():
            q = sa.select(slices).where(*self._free_clauses(), *slice_filter(request))
            q = q.order_by(slices.c.rank, slices.c.id).limit(limit)
            if self.dialect == "postgresql":
                q = q.with_for_update(skip_locked=True)
            return q

        return self._statement(("free", request, limit), build)

    def _lock(self, conn, keys: Iterable[str]) -> None:
        """Serialise quota checks for the same user/group across PostgreSQL sessions.
        (SQLite already serialises every writer with BEGIN IMMEDIATE.)"""
        if self.dialect != "postgresql":
            return
        for key in sorted(set(keys)):
            conn.execute(ADVISORY_LOCK, {"k": zlib.crc32(key.encode()) - 2**31})

    @announced_claim
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
        only_node: str | None = None,
        groups: Collection[str] = (),
        hold_until: datetime | None = None,
        queue_entry: int | None = None,
        refusal: Callable[[LedgerRefusal], Refusal] | None = None,
    ) -> Claim:
        """Hold a free slice satisfying ``request`` for ``user``'s server, atomically.

        Placement: slices are tried in ``rank`` order — best fit for whole GPUs (smallest memory
        that satisfies), device order for MIG, and seats packed onto devices already shared.
        ``user_limit`` caps the user's open allocations (all named servers); ``charge_groups`` are
        ``(group, cap)`` pairs tried in order, the allocation counting against the first with room
        (``cap=None`` means no cap). Limits are checked in the same transaction as the claim.
        ``only_slice`` restricts the search to one slice id (re-adopting a running container);
        ``only_node`` to one node's slices (a Swarm course server beside its course volumes).
        ``groups`` are the user's groups: reservations (:mod:`.placement`) keep their unclaimed
        seats from users outside the booking's groups, checked in this transaction too.

        The waitlist (:mod:`.waitlist`): a user holding an offer for ``profile`` gets the held
        slice; anyone else is refused (:class:`~.waitlist.QueueFirst`) while the free slices are
        no more than the users queued ahead, except a member taking a seat their session keeps. ``hold_until`` makes the claim an offer for waitlist
        entry ``queue_entry`` (a hold with no server, see
        :meth:`~.queueoffers.QueueOffers.offer_next`).

        ``refusal``: called with the :class:`LedgerRefusal` inside this transaction, returns what
        the user is told (a :class:`Refusal`: a spawner's ``SpawnRefused``), written to the
        refusal log on this connection: a refused spawn is one transaction, and the refusal
        raised carries it as ``refusal``. A refused claim wrote nothing else to commit.

        Raises :class:`QuotaExceeded` or :class:`NoFreeSlice` (with a user-facing message).
        """
        if request.kind is None:
            raise ValueError("a CPU-only request holds no slice; do not claim one")
        with self._write() as conn:
            try:
                return self._claim_in(
                    conn, request, user, profile, server_name, node, user_limit, charge_groups,
                    only_slice, only_node, groups, hold_until, queue_entry,
                )  # fmt: skip
            except LedgerRefusal as e:
                refused = e
                if refusal is not None:
                    refused.refusal = told = refusal(e)
                    self._insert_refusal(conn, user, profile, told.reason, told.message)
        raise refused

    def _claim_in(
        self, conn, request, user, profile, server_name, node, user_limit, charge_groups,
        only_slice, only_node, groups, hold_until, queue_entry,
    ) -> Claim:  # fmt: skip
        """:meth:`claim`'s work on its transaction ``conn``; raises its refusals. Its reads are
        two statements (:mod:`.claimreads`) before the search, whatever rules are live."""
        self._lock(conn, [f"user:{user}"] + [f"group:{g}" for g, _ in charge_groups])
        now = clock.utcnow()
        # the groups counted: those tried before the first without a cap
        capped = list(itertools.takewhile(lambda gc: gc[1] is not None, charge_groups))
        me = read_holder(conn, self._statement, user, profile, [g for g, _ in capped], now)
        if hold_until is None and only_slice is None and me.hold_id is not None:
            taken = self._take_hold(conn, me.hold_id, user, server_name, now)
            if taken is not None:
                row = conn.execute(_SLICE, {"sid": taken.slice_id})
                return Claim(taken, slice_from_row(row.one()))
        if user_limit is not None and me.held >= user_limit:
            raise QuotaExceeded(
                f"You already hold {counted(me.held, 'GPU slice')}, the most "
                f"your groups allow at once ({user_limit}). Stop one of your servers to "
                "start this one."
            )
        charge_group = None
        if charge_groups:
            full = []
            for i, (group, cap) in enumerate(charge_groups):
                if cap is None:
                    charge_group = group
                    break
                used = me.group_used[i]
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
        # PostgreSQL: lock one candidate at a time (FOR UPDATE SKIP LOCKED, LIMIT 1), so a
        # claim in flight hides only the row it is taking from concurrent claims, never the
        # whole pool. SQLite: BEGIN IMMEDIATE made us the only writer; read a few at once.
        batch = 1 if self.dialect == "postgresql" else CANDIDATES
        tried: set[str] = set()
        # Re-adopting a running container (only_slice) is not a new placement: no booking
        # keeps a user off the slice their server already runs on.
        guard = entry = None
        if only_slice is None:
            # the queue's gate is read with the bookings' counts, when anyone waits
            gate = request if queue_entry is None and me.waiting else None
            guard, counts = self._guard(
                conn, request, profile, groups, now, server_name, rows=me.booking_rows, gate=gate
            )
            # a member taking a seat kept for their session waits behind nobody: the users
            # queued for the profile could not take that seat anyway
            kept = guard is not None and guard.seat_kept
            entry = self._queue_gate(conn, user, profile, queue_entry, kept, counts)
        booking_id = guard.charged.id if guard is not None and guard.charged else None
        kept = False
        while not kept:
            q = self._free_query(request, batch)
            if tried:
                q = q.where(slices.c.id.not_in(tried))
            if only_slice is not None:
                q = q.where(slices.c.id == only_slice)
            if only_node is not None:
                q = q.where(slices.c.node == only_node)
            rows = list(conn.execute(q))
            if not rows:
                break
            for i, row in enumerate(rows):
                tried.add(row.id)
                found = slice_from_row(row)
                if guard is not None and not guard.allows(found):
                    kept = guard.blocks_everything()
                    if kept:
                        break
                    continue
                got = self._try_hold(
                    conn, row, user, server_name, profile, node, charge_group, booking_id,
                    hold_until,
                )  # fmt: skip
                if got is not None:
                    if entry is not None:
                        self._mark_offered(conn, entry, got.id, hold_until, got.started_at)
                    return Claim(got, found, spare=len(rows) - 1 - i)
        raise self._no_free_slice(conn, request, guard.notes() if guard is not None else [])

    def _try_hold(
        self, conn, row, user, server_name, profile, node, charge_group, booking_id=None,
        hold_until=None,
    ):  # fmt: skip
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
            "booking_id": booking_id,
            "hold_until": hold_until,
        }
        # SQLite: BEGIN IMMEDIATE made us the only writer and a failed statement leaves the
        # transaction usable (the failed INSERT is undone), so no savepoint is needed.
        # PostgreSQL aborts the transaction on a unique violation, so the attempt runs inside a
        # savepoint there. The slice held by another open allocation fails the INSERT itself:
        # the unique index of open slices, or the trigger that marks the slice held.
        nested = conn.begin_nested() if self.dialect != "sqlite" else None
        try:
            alloc_id = conn.execute(_INSERT_ALLOCATION, values).scalar_one()
        except IntegrityError:
            if nested is not None:
                nested.rollback()
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

    def release(self, allocation_id: int, reason: str, *, only_hold: bool = False) -> bool:
        """Close allocation ``allocation_id`` with ``reason`` and free its slice: the one release
        path, for servers' allocations and waitlist holds alike.

        Idempotent: returns ``True`` when this call closed it, ``False`` when it was already closed
        or does not exist. ``only_hold``: close it only while it is still a waitlist hold (an
        offer whose user's server took it in the meantime keeps it). Listeners hear of it after
        the commit (:mod:`.events`): the release metric and the dcgm job map see lapsed and
        declined offers too.
        """
        with self._write() as conn:
            # one statement: the database frees the slice (``_INSERT_ALLOCATION``'s comment)
            slice_id = conn.execute(
                _CLOSE_HOLD if only_hold else _CLOSE_ALLOCATION,
                {"aid": allocation_id, "now": clock.utcnow(), "reason": reason[:64]},
            ).scalar_one_or_none()
        if slice_id is None:
            return False
        self._announce("released", allocation_id, slice_id, reason)
        return True

    def amend_end_reason(
        self, allocation_id: int, reason: str, *, only_if: tuple[str, ...] = ("stopped",)
    ) -> bool:
        """Give a closed allocation a more precise end reason (``culled:gpu-idle`` after the
        culler's stop went through the hub and the spawner closed it as ``stopped``). Changes
        nothing unless the allocation is closed with a reason in ``only_if``; returns whether it
        changed."""
        with self._write() as conn:
            res = conn.execute(
                allocations.update()
                .where(
                    allocations.c.id == allocation_id,
                    allocations.c.ended_at.is_not(None),
                    allocations.c.end_reason.in_(only_if),
                )
                .values(end_reason=reason[:64])
            )
        return res.rowcount == 1

    def set_container(
        self, allocation_id: int, container_id: str | None, container_name: str | None = None
    ) -> None:
        """Record the container holding an open allocation (the spawner calls this after create)."""
        self.set_containers([(allocation_id, container_id, container_name)])

    def set_containers(self, rows: Sequence[tuple[int, str | None, str | None]]) -> None:
        """:meth:`set_container` for each ``(allocation id, container id, container name)`` of
        ``rows``, in one transaction: the starts of a storm that reach it before the ledger's
        writing thread does (:func:`~.aio.write_batched`)."""
        if not rows:
            return
        with self._write() as conn:
            conn.execute(
                allocations.update()
                .where(allocations.c.id == sa.bindparam("aid"))
                .values(container_id=sa.bindparam("cid"), container_name=sa.bindparam("cname")),
                [{"aid": a, "cid": c, "cname": n} for a, c, n in rows],
            )


class Refusal(Protocol):
    """What a claim's ``refusal`` callback returns: the refusal log's ``reason`` (a stable word,
    at most 64 characters kept) and the ``message`` the user is told."""

    reason: str
    message: str


_shared: dict[str, Ledger] = {}
_shared_lock = threading.Lock()


def shared_ledger(url: str, *, auto_upgrade: bool = False) -> Ledger:
    """The process's one :class:`Ledger` for ``url`` (one engine, pool and WAL checkpointer),
    built on first use: the hub's spawners and its home-page warnings share it."""
    with _shared_lock:
        ledger = _shared.get(url)
        if ledger is None:
            ledger = _shared[url] = Ledger(url, auto_upgrade=auto_upgrade)
        return ledger


def close_shared_ledgers() -> None:
    """Close every shared ledger (tests that build several labs in one process)."""
    with _shared_lock:
        for ledger in _shared.values():
            ledger.close()
        _shared.clear()

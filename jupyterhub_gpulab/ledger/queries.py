"""Read-only questions to the ledger, and the refusal log, for the spawner, service and CLI."""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable
from contextlib import nullcontext
from datetime import datetime, timedelta

import sqlalchemy as sa

from .. import clock
from ..inventory.model import SliceRequest, cc_key, driver_key
from .models import Allocation, CullWarning, NoFreeSlice, as_utc
from .schema import allocations, devices, idle_clocks, refusals, slices, warnings

#: Seconds between two prunings of the refusal log (rows older than 30 days) in one process.
PRUNE_REFUSALS_S = 3600


@functools.lru_cache(maxsize=256)
def slice_filter(request: SliceRequest) -> tuple[sa.ColumnElement[bool], ...]:
    """``WHERE`` clauses over :data:`~.schema.slices` for the slices that satisfy ``request``:
    :meth:`~..inventory.model.SliceRequest.matches` in SQL (drain, presence and holders are
    the caller's). ``model`` is matched with ``LIKE`` escaped, so ``_`` and ``%`` are literal.
    Raises ``ValueError`` for a request for no GPU. Built once per request (a lab has a few
    profiles; building the clauses cost more than running them on the claim path)."""
    if request.kind is None:
        raise ValueError("a request for no GPU matches no slice")
    where = [
        slices.c.kind == request.kind.value,
        # == None is IS NULL: a whole GPU or a seat has no MIG profile
        slices.c.mig_profile == request.wanted_mig_profile,
    ]
    if request.min_memory_bytes:
        where.append(slices.c.memory_bytes >= request.min_memory_bytes)
    if request.model:
        where.append(
            sa.func.lower(slices.c.device_name).contains(request.model.lower(), autoescape=True)
        )
    # the image's needs; a device whose figure is unknown (NULL) is not excluded
    if request.min_compute_capability is not None:
        key = cc_key(request.min_compute_capability)
        where.append(sa.or_(slices.c.cc_key.is_(None), slices.c.cc_key >= key))
    if request.min_driver is not None:
        key = driver_key(request.min_driver)
        where.append(sa.or_(slices.c.driver_key.is_(None), slices.c.driver_key >= key))
    if request.max_compute_capability is not None:
        # no later major than the image's newest architecture (cc_key: major * 10 + minor)
        below = cc_key((request.max_compute_capability[0] + 1, 0))
        where.append(sa.or_(slices.c.cc_key.is_(None), slices.c.cc_key < below))
    return tuple(where)


def free_up_to(free: tuple[sa.ColumnElement[bool], ...], request: SliceRequest, cap):
    """Free slices of ``request`` counted up to ``cap`` (an int or a SQL expression), as a scalar
    subquery: ``min(free, cap)``, reading at most ``cap`` index entries (the rules that count free
    slices only ever compare them with a small number: a booking's seats, the queue). ``free``:
    the ledger's :meth:`LedgerQueries._free_clauses`."""
    found = sa.select(slices.c.id).where(*slice_filter(request), *free).limit(cap).subquery()
    return sa.select(sa.func.count()).select_from(found).scalar_subquery()


def open_count(column: sa.Column, value) -> sa.ScalarSelect:
    """Open allocations whose ``column`` is ``value`` (a bound parameter), as a scalar subquery:
    the user limit's, the group caps' and the bookings' ``used`` count (each walks a partial
    index of open allocations)."""
    return (
        sa.select(sa.func.count())
        .select_from(allocations)
        .where(column == value, allocations.c.ended_at.is_(None))
        .scalar_subquery()
    )


class LedgerQueries:
    """Mixed into :class:`~.ledger.Ledger` (uses its ``_read``, ``_write``)."""

    #: when this process last pruned the refusal log (:meth:`_prune_refusals`)
    _refusals_pruned_at: datetime | None = None

    def _free_clauses(self) -> tuple[sa.ColumnElement[bool], ...]:
        """``WHERE`` clauses over :data:`~.schema.slices` for "free now": in service and held by
        no open allocation (the ``held_by`` mirror, walked through ``ix_slices_free``). The one
        home of the rule for the claim's search, the waitlist's gate and :meth:`capacity`
        (``benchmarks/ledger.py`` swaps it for the ``NOT EXISTS`` design it measures against)."""
        return (slices.c.available == sa.true(), slices.c.held_by.is_(None))

    def _statement(self, key: tuple, build: Callable[[], sa.Executable]) -> sa.Executable:
        """The statement ``build()`` makes for ``key``, built once per ledger: SQLAlchemy's
        statement construction costs more than SQLite's execution on the claim path (its
        compiled cache still needs the statement object built)."""
        cache = self.__dict__.setdefault("_statements", {})
        stmt = cache.get(key)
        if stmt is None:
            if len(cache) > 1024:  # requests come from profiles: a few dozen keys at most
                cache.clear()
            stmt = cache[key] = build()
        return stmt

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

    def allocations_between(
        self,
        start: datetime,
        end: datetime,
        user: str | None = None,
        *,
        ended_since: datetime | None = None,
        users: Collection[str] | None = None,
    ) -> list[Allocation]:
        """Allocations that overlap ``[start, end)`` (for usage accounting), oldest first; only
        ``user``'s when given, or ``users``' (a page of the usage API's); with ``ended_since``,
        only those still open or ended at or after it (what changed since an earlier read:
        :class:`~..fairuse.period.PeriodReader`)."""
        since = start if ended_since is None else max(start, ended_since)
        q = sa.select(allocations).where(
            allocations.c.started_at < end,
            sa.or_(allocations.c.ended_at.is_(None), allocations.c.ended_at >= since),
        )
        if user is not None:
            q = q.where(allocations.c.user == user)
        if users is not None:
            q = q.where(allocations.c.user.in_(sorted(set(users))))
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

    @staticmethod
    def _matching(request: SliceRequest):
        """``SELECT count(*)`` over the slices that satisfy ``request`` (any state)."""
        return sa.select(sa.func.count()).select_from(slices).where(*slice_filter(request))

    def capacity(self, request: SliceRequest, conn=None) -> tuple[int, int]:
        """``(free, total)`` slices matching ``request`` that are in service (not drained or
        vanished). ``free`` excludes held slices. ``conn``: read on that connection (a claim's
        transaction) instead of a new one."""
        base = self._matching(request)
        with self._on(conn) as conn:
            total = conn.execute(base.where(slices.c.available == sa.true())).scalar_one()
            free = self.free_count(request, conn)
        return free, total

    def free_count(self, request: SliceRequest, conn=None, *, node: str | None = None) -> int:
        """Slices matching ``request`` free now (in service, held by no open allocation), on
        ``node`` only when given. One ``count(*)`` over ``ix_slices_free``; ``conn`` as in
        :meth:`capacity`. The spawner's claim outlook reads it (:mod:`jupyterhub_gpulab.spawner.
        claimoutlook`)."""
        q = self._matching(request).where(*self._free_clauses())
        if node is not None:
            q = q.where(slices.c.node == node)
        with self._on(conn) as conn:
            return conn.execute(q).scalar_one()

    def out_of_service(self, request: SliceRequest, conn=None) -> int:
        """Slices matching ``request`` that exist but are drained (an admin took their device
        out of service); vanished slices are not counted. ``conn`` as in :meth:`capacity`."""
        q = self._matching(request).where(
            slices.c.present == sa.true(), slices.c.available == sa.false()
        )
        with self._on(conn) as conn:
            return conn.execute(q).scalar_one()

    def _on(self, conn):
        """A context giving ``conn`` itself (left open) or, for ``None``, a new read connection."""
        return nullcontext(conn) if conn is not None else self._read()

    def _no_free_slice(self, conn, request: SliceRequest, notes) -> NoFreeSlice:
        """The claim's refusal when no slice was free for it, its counts read on the claim's
        transaction ``conn``: the bookings that keep the free ones (``notes``, ``Reserved``),
        else free of total with advice (wait, maintenance, or no such slice in this lab)."""
        free, total = self.capacity(request, conn)
        if notes:
            return NoFreeSlice(
                f"No free {request.describe()} slice for you: "
                + "; ".join(n.describe() for n in notes)
                + " (for that course's roster and staff). Try again after that time, join the "
                "waitlist, or pick another profile.",
                free=free,
                total=total,
                reserved=notes,
            )
        if total:
            advice = (
                "Join the waitlist to be offered the next free slice, try again later, or pick "
                "another profile."
            )
        elif self.out_of_service(request, conn):
            advice = (
                "Those GPUs are out of service for maintenance; try later or pick another profile."
            )
        else:
            advice = "This lab has no slice of that kind; ask an admin or pick another profile."
        return NoFreeSlice(
            f"No free {request.describe()} slice ({free} of {total} free). " + advice,
            free=free,
            total=total,
        )

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
        """Log a spawn refused before any claim (a bad choice, a spent budget) for the admin
        page (kept 30 days). A refused claim is recorded inside the claim's own transaction
        (:meth:`~.ledger.Ledger.claim`'s ``refusal``), never by a second write."""
        with self._write() as conn:
            self._insert_refusal(conn, user, profile, reason, message)

    def _insert_refusal(
        self, conn, user: str, profile: str | None, reason: str, message: str
    ) -> None:
        """Write one refusal row on ``conn`` (the caller's transaction) and drop those older
        than 30 days when due (:meth:`_prune_refusals`): the refusal log's writes, with
        :meth:`~.readrefusal.PendingRefusals.flush`'s."""
        conn.execute(
            refusals.insert().values(
                at=clock.utcnow(), user=user, profile=profile, reason=reason[:64], message=message
            )
        )
        self._prune_refusals(conn)

    def _prune_refusals(self, conn) -> None:
        """Drop refusals older than 30 days on ``conn``, at most once per
        :data:`PRUNE_REFUSALS_S` per process: pruning at every refusal made each refused claim
        of a burst run a ``DELETE`` that found nothing."""
        now = clock.utcnow()
        last = self._refusals_pruned_at
        if last is not None and now - last < timedelta(seconds=PRUNE_REFUSALS_S):
            return
        conn.execute(refusals.delete().where(refusals.c.at < now - timedelta(days=30)))
        self._refusals_pruned_at = now

    def last_refusals(self, users: Iterable[str], since: datetime) -> dict[str, tuple[str, str]]:
        """``{user: (reason, message)}``: each of ``users``' latest refused spawn since
        ``since`` (users without one are left out)."""
        wanted = list(users)
        if not wanted:
            return {}
        q = (
            sa.select(refusals.c.user, refusals.c.reason, refusals.c.message)
            .where(refusals.c.at >= since, refusals.c.user.in_(wanted))
            .order_by(refusals.c.id)
        )
        with self._read() as conn:
            return {u: (r, m) for u, r, m in conn.execute(q)}  # the latest wins

    def refusals_since(self, since: datetime) -> dict[str, int]:
        """``{reason: count}`` of refusals since ``since``."""
        q = (
            sa.select(refusals.c.reason, sa.func.count())
            .where(refusals.c.at >= since)
            .group_by(refusals.c.reason)
        )
        with self._read() as conn:
            return {r: n for r, n in conn.execute(q)}

    # -- GPU-idle clocks ---------------------------------------------------------------------

    def idle_clocks(self) -> dict[int, datetime]:
        """``{allocation id: GPU idle since}`` as the culler last saw it (UTC)."""
        with self._read() as conn:
            return {a: as_utc(t) for a, t in conn.execute(sa.select(idle_clocks))}

    def set_idle_clocks(self, clocks: dict[int, datetime]) -> None:
        """Replace every GPU-idle clock with ``clocks`` (``{allocation id: idle since}``); an
        allocation left out (busy, unknown, closed) loses its clock."""
        with self._write() as conn:
            conn.execute(idle_clocks.delete())
            if clocks:
                conn.execute(
                    idle_clocks.insert(),
                    [{"allocation_id": a, "idle_since": t} for a, t in clocks.items()],
                )

    # -- cull warnings ----------------------------------------------------------------------

    def set_warning(
        self, user: str, server_name: str, rule: str, message: str, due_at: datetime
    ) -> None:
        """Record (or update) that ``user``'s server ``server_name`` will be stopped at ``due_at``
        by ``rule`` (``gpu-idle``, ``idle``, ``max-age``, ``budget``); ``message`` is shown to the
        user on the hub's home page and on their gpulab page."""
        now = clock.utcnow()
        with self._write() as conn:
            conn.execute(
                warnings.delete().where(
                    warnings.c.user == user,
                    warnings.c.server_name == server_name,
                    warnings.c.rule == rule,
                )
            )
            conn.execute(
                warnings.insert().values(
                    user=user,
                    server_name=server_name,
                    rule=rule[:32],
                    message=message,
                    due_at=due_at,
                    created_at=now,
                )
            )

    def clear_warnings(
        self, user: str, server_name: str | None = None, rule: str | None = None
    ) -> int:
        """Drop ``user``'s warnings (for one server / one rule when given); returns how many."""
        q = warnings.delete().where(warnings.c.user == user)
        if server_name is not None:
            q = q.where(warnings.c.server_name == server_name)
        if rule is not None:
            q = q.where(warnings.c.rule == rule)
        with self._write() as conn:
            return conn.execute(q).rowcount

    def warnings(self, user: str | None = None) -> list[CullWarning]:
        """Active warnings, soonest first; only ``user``'s when given."""
        q = sa.select(warnings).order_by(warnings.c.due_at)
        if user is not None:
            q = q.where(warnings.c.user == user)
        with self._read() as conn:
            return [CullWarning.from_row(r) for r in conn.execute(q)]

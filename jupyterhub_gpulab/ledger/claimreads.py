"""The claim's reads, folded into two statements whatever rules are live.

Through SQLAlchemy each statement costs the claim more Python (~60 µs here) than SQLite takes to
run it, so the claim asks the database everything it needs to judge its rules in two ``SELECT``s
of scalar subqueries, each built once per shape (:meth:`~.queries.LedgerQueries._statement`):

1. :func:`read_holder`, before any rule is judged: the user's offer held for the profile (the
   one :meth:`~.waitlist.Waitlist._take_hold` takes), their open allocations (the user limit),
   the open allocations charged to each capped group (the group caps), how many users wait for
   the profile, and, ``LEFT JOIN``-ed, the bookings that may be open now (:data:`OPEN_BOOKING`);
2. :func:`read_counts`, after the reservations lock when a booking protects: the free slices of
   each protecting booking's request, the open allocations charged to each open booking, and the
   waitlist gate's free slices with the users waiting (``LEFT JOIN``-ed). Left out when no
   booking is open and nobody waits.

One statement is one snapshot on PostgreSQL too (READ COMMITTED takes one per statement): the
bookings' ``free`` and ``used`` are read together, which is what :class:`.claimguard.BookingLimit`'s
rule needs (and stricter than reading ``free`` first). The rules themselves stay where they were:
limits in :meth:`~.ledger.Ledger.claim`, bookings in :mod:`.placement`/:mod:`.claimguard`, the
queue in :mod:`.waitlist`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa

from ..inventory.model import SliceRequest
from .queries import free_up_to, open_count
from .schema import allocations, bookings, waitlist
from .waitlist import WAITING, holds_query

#: ``(key, build) -> statement``: the ledger's statement cache
Statements = Callable[[tuple, Callable[[], sa.Executable]], sa.Executable]


#: Bookings that may be open at ``:now`` (not ended, starting before ``:soon``, a day later: leads
#: are shorter; :meth:`.bookings.Booking.is_open` decides), read by every claim
OPEN_BOOKING = sa.and_(
    bookings.c.ends_at > sa.bindparam("now"), bookings.c.starts_at <= sa.bindparam("soon")
)


@dataclass(frozen=True)
class Holder:
    """What :func:`read_holder` read for one claim."""

    #: the user's oldest offer held for the profile, or None
    hold_id: int | None
    #: the user's open allocations (holds included)
    held: int
    #: open allocations charged to each group asked, in order
    group_used: tuple[int, ...]
    #: users waiting for the profile
    waiting: int
    #: rows of the bookings that may be open now (``bookings`` columns)
    booking_rows: list = field(default_factory=list)


@dataclass(frozen=True)
class Counts:
    """What :func:`read_counts` read for one claim."""

    #: ``{request: free slices of it, counted up to the cap asked}``
    free: dict[SliceRequest, int]
    #: ``{booking id: open allocations charged to it}`` (zeros included)
    used: dict[int, int]
    #: the gate's free slices of the claim's request, counted up to the waiting users + 1
    gate_free: int | None = None
    #: the users waiting for the profile (``id``, ``user``, ``priority`` rows), unordered
    waiting: list = field(default_factory=list)


def _waiting_count() -> sa.ScalarSelect:
    return sa.select(sa.func.count()).select_from(waitlist).where(WAITING).scalar_subquery()


def holder_statement(groups: int) -> sa.Select:
    """:func:`read_holder`'s statement for ``groups`` capped groups (``:g0``, ``:g1`` …)."""
    hold = holds_query(sa.bindparam("user"), sa.bindparam("profile"))
    me = sa.select(
        hold.with_only_columns(allocations.c.id).limit(1).scalar_subquery().label("hold_id"),
        open_count(allocations.c.user, sa.bindparam("user")).label("held"),
        *(
            open_count(allocations.c.charge_group, sa.bindparam(f"g{i}")).label(f"g{i}")
            for i in range(groups)
        ),
        _waiting_count().label("waiting"),
    ).subquery("me")
    return sa.select(me, bookings).select_from(me.outerjoin(bookings, OPEN_BOOKING))


def read_holder(
    conn, statement: Statements, user: str, profile: str, groups: Sequence[str], now: datetime
) -> Holder:
    """The claim's first read (module docstring) on its transaction ``conn``."""
    stmt = statement(("holder", len(groups)), lambda: holder_statement(len(groups)))
    params = {"user": user, "profile": profile, "now": now, "soon": now + timedelta(days=1)}
    params.update({f"g{i}": g for i, g in enumerate(groups)})
    rows = conn.execute(stmt, params).all()
    first = rows[0]._mapping
    return Holder(
        hold_id=first["hold_id"],
        held=first["held"],
        group_used=tuple(first[f"g{i}"] for i in range(len(groups))),
        waiting=first["waiting"],
        booking_rows=[r for r in rows if r._mapping["id"] is not None],
    )


def counts_statement(
    free: tuple, requests: tuple[SliceRequest, ...], bookings_open: int, gate: SliceRequest | None
) -> sa.Select:
    """:func:`read_counts`' statement: free slices of each of ``requests`` up to ``:cap<i>``,
    open allocations charged to ``:b0`` … (``bookings_open`` of them), and with ``gate`` its
    free slices up to the users waiting for ``:profile`` + 1, joined to those users. ``free``:
    the ledger's free clauses."""
    cols = [
        free_up_to(free, req, sa.bindparam(f"cap{i}", type_=sa.Integer)).label(f"free{i}")
        for i, req in enumerate(requests)
    ]
    cols += [
        open_count(allocations.c.booking_id, sa.bindparam(f"b{i}")).label(f"used{i}")
        for i in range(bookings_open)
    ]
    if gate is None:
        return sa.select(*cols)
    cols.append(free_up_to(free, gate, _waiting_count() + 1).label("gate_free"))
    k = sa.select(*cols).subquery("k")
    users = sa.select(k, waitlist.c.id, waitlist.c.user, waitlist.c.priority)
    return users.select_from(k.outerjoin(waitlist, WAITING))


def read_counts(
    conn,
    statement: Statements,
    free: Callable[[], tuple],
    caps: dict[SliceRequest, int],
    booking_ids: Sequence[int],
    gate: SliceRequest | None,
    profile: str,
) -> Counts:
    """The claim's second read (module docstring): ``caps`` ``{request: cap}`` for the bookings'
    free counts, ``booking_ids`` the open bookings, ``gate`` the claim's request when the queue
    for ``profile`` is to be judged. ``free``: the ledger's ``_free_clauses``, called only when
    the statement is built (building clauses costs a claim more than running them)."""
    requests = tuple(caps)
    key = ("counts", requests, len(booking_ids), gate)
    stmt = statement(key, lambda: counts_statement(free(), requests, len(booking_ids), gate))
    params: dict = {"profile": profile}
    params.update({f"cap{i}": caps[req] for i, req in enumerate(requests)})
    params.update({f"b{i}": b for i, b in enumerate(booking_ids)})
    rows = conn.execute(stmt, params).all()
    first = rows[0]._mapping
    return Counts(
        free={req: first[f"free{i}"] for i, req in enumerate(requests)},
        used={b: first[f"used{i}"] for i, b in enumerate(booking_ids)},
        gate_free=first["gate_free"] if gate is not None else None,
        waiting=[r for r in rows if r._mapping["id"] is not None] if gate is not None else [],
    )

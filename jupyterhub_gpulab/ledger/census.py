"""Counts the service's ``/metrics`` reads from the ledger at each scrape: a few grouped
``SELECT``s in one read transaction, so a scrape costs the same whatever the lab's size in
Python work (rows per group, not per slice or allocation).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa

from .bookings import Booking
from .queries import slice_filter
from .schema import allocations, bookings, devices, foreign_containers, slices, warnings

#: The end reason prefix of allocations the culler closed (``culled:<rule>``).
CULLED = "culled:"


@dataclass(frozen=True)
class Census:
    """What :func:`census` read.

    - ``slices``: ``{(node, kind, mig_profile or "", holder's profile or "", present, available,
      held): count}``;
    - ``devices``: device rows (``uuid``, ``node``, ``index``, ``name``, ``memory_bytes``,
      ``present``, ``drained``), by node and index;
    - ``culls``: ``{(rule, charge group or ""): allocations closed as culled:<rule>}``;
    - ``warnings``: ``{rule: pending cull warnings}``;
    - ``without_container``: ``{node: open allocations older than the grace with no container}``;
    - ``foreign``: ``{node: running containers of others holding this lab's GPUs}``;
    - ``open_servers``: ``[(user, server name, node, started_at)]`` of every open allocation,
      ``started_at`` in seconds since the epoch;
    - ``reserved``: ``{(node, kind, mig_profile or "", booking's profile): free slices kept}``
      for the bookings protecting now (their unclaimed seats; counted among the free slices of
      ``slices``, which the metrics then move to the ``reserved`` state);
    - ``seats``: ``{(phase, state): seats}`` of the bookings protecting now, ``phase``
      ``lead`` (before the session starts) or ``session`` (started, within its grace),
      ``state`` ``claimed`` or ``unclaimed``.
    """

    slices: dict[tuple, int]
    devices: list[dict]
    culls: dict[tuple[str, str], int]
    warnings: dict[str, int]
    without_container: dict[str, int]
    foreign: dict[str, int]
    open_servers: list[tuple[str, str, str, float]]
    reserved: dict[tuple[str, str, str, str], int] = field(default_factory=dict)
    seats: dict[tuple[str, str], int] = field(default_factory=dict)


def census(ledger, now: datetime, *, container_grace_s: float = 120) -> Census:
    """Read the :class:`Census` (blocking: one read transaction). Allocations started less than
    ``container_grace_s`` seconds before ``now`` may still be creating their container."""
    held = slices.c.held_by.is_not(None)
    q_slices = (
        sa.select(
            slices.c.node,
            slices.c.kind,
            sa.func.coalesce(slices.c.mig_profile, ""),
            sa.func.coalesce(allocations.c.profile, ""),
            slices.c.present,
            slices.c.available,
            held,
            sa.func.count(),
        )
        .select_from(slices.outerjoin(allocations, allocations.c.id == slices.c.held_by))
        .group_by(
            slices.c.node,
            slices.c.kind,
            slices.c.mig_profile,
            allocations.c.profile,
            slices.c.present,
            slices.c.available,
            held,
        )
    )
    q_culls = (
        sa.select(
            allocations.c.end_reason,
            sa.func.coalesce(allocations.c.charge_group, ""),
            sa.func.count(),
        )
        .where(allocations.c.end_reason.like(CULLED + "%"))
        .group_by(allocations.c.end_reason, allocations.c.charge_group)
    )
    q_warnings = sa.select(warnings.c.rule, sa.func.count()).group_by(warnings.c.rule)
    cutoff = now.timestamp() - container_grace_s
    q_open = sa.select(
        allocations.c.user,
        allocations.c.server_name,
        allocations.c.node,
        allocations.c.container_id.is_(None),
        _epoch(allocations.c.started_at, ledger.dialect),
    ).where(allocations.c.ended_at.is_(None))
    q_foreign = sa.select(foreign_containers.c.node, sa.func.count()).group_by(
        foreign_containers.c.node
    )
    with ledger._read() as conn:
        slice_counts = {tuple(r[:-1]): r[-1] for r in conn.execute(q_slices)}
        cols = ("uuid", "node", "index", "name", "memory_bytes", "present", "drained")
        q_devices = sa.select(*(devices.c[k] for k in cols)).order_by(
            devices.c.node, devices.c["index"]
        )
        device_rows = [dict(zip(cols, r)) for r in conn.execute(q_devices)]
        culls: dict[tuple[str, str], int] = {}
        for reason, group, n in conn.execute(q_culls):
            key = (reason[len(CULLED) :], group)
            culls[key] = culls.get(key, 0) + n
        pending = {rule: n for rule, n in conn.execute(q_warnings)}
        without: dict[str, int] = {}
        servers = []
        for user, server, node, no_container, started in conn.execute(q_open):
            started = float(started)
            servers.append((user, server or "", node, started))
            if no_container and started < cutoff:
                without[node] = without.get(node, 0) + 1
        foreign = {node: n for node, n in conn.execute(q_foreign)}
        reserved, seats = _reservations(conn, now)
    return Census(
        slices={
            (node, kind, mig, profile, bool(present), bool(available), bool(h)): n
            for (node, kind, mig, profile, present, available, h), n in slice_counts.items()
        },
        devices=device_rows,
        culls=culls,
        warnings=pending,
        without_container=without,
        foreign=foreign,
        open_servers=servers,
        reserved=reserved,
        seats=seats,
    )


def _reservations(conn, now: datetime) -> tuple[dict, dict]:
    """``(reserved, seats)`` of :class:`Census`: the bookings protecting at ``now`` (the rule
    of :mod:`.placement`: ``count - used`` unclaimed seats kept free per booking), their free
    matching slices taken in ``(node, kind, MIG profile)`` order. Two queries while no booking
    protects (the usual case), two more per distinct slice request of those that do."""
    rows = conn.execute(
        sa.select(bookings).where(
            bookings.c.ends_at > now, bookings.c.starts_at <= now + timedelta(days=1)
        )
    )
    protecting = [b for b in map(Booking.from_row, rows) if b.protects(now)]
    seats = {(phase, st): 0 for phase in ("lead", "session") for st in ("claimed", "unclaimed")}
    if not protecting:
        return {}, seats
    used = dict(
        conn.execute(
            sa.select(allocations.c.booking_id, sa.func.count())
            .where(
                allocations.c.booking_id.in_([b.id for b in protecting]),
                allocations.c.ended_at.is_(None),
            )
            .group_by(allocations.c.booking_id)
        ).all()
    )
    by_request: dict = {}
    for b in protecting:
        claimed = min(used.get(b.id, 0), b.count)
        phase = "lead" if now < b.starts_at else "session"
        seats[(phase, "claimed")] += claimed
        seats[(phase, "unclaimed")] += b.count - claimed
        by_request.setdefault(b.request, []).append((b.profile, b.count - claimed))
    reserved: dict[tuple[str, str, str, str], int] = {}
    for request, wants in by_request.items():
        free = conn.execute(
            sa.select(slices.c.node, slices.c.kind, slices.c.mig_profile, sa.func.count())
            .where(
                *slice_filter(request),
                slices.c.held_by.is_(None),
                slices.c.available == sa.true(),
                slices.c.present == sa.true(),
            )
            .group_by(slices.c.node, slices.c.kind, slices.c.mig_profile)
            .order_by(slices.c.node, slices.c.kind, slices.c.mig_profile)
        ).all()
        pools = [[(node, kind, mig or ""), n] for node, kind, mig, n in free]
        for profile, unclaimed in wants:
            for pool in pools:
                take = min(unclaimed, pool[1])
                if take:
                    key = (*pool[0], profile)
                    reserved[key] = reserved.get(key, 0) + take
                    pool[1] -= take
                    unclaimed -= take
    return reserved, seats


def _epoch(column, dialect: str):
    """Seconds since the epoch of a stored UTC time, computed by the database (no datetime
    objects are built in Python for it)."""
    if dialect == "sqlite":
        return (sa.func.julianday(column) - 2440587.5) * 86400.0
    return sa.cast(sa.extract("epoch", column), sa.Float)


def gpu_seconds_by_group(
    ledger, start: datetime, end: datetime, now: datetime, *, by: str = "charge_group"
) -> dict[str, float]:
    """``{charge group or "": weighted GPU-seconds in [start, end)}``: the same figure as
    :func:`~jupyterhub_gpulab.fairuse.accounting.usage`'s ``by_group`` (a running allocation
    counts up to ``now``), read as numbers rather than allocation objects (a scrape reads every
    allocation of the week). ``by="user"``: per user instead."""
    return gpu_seconds_per_period(ledger, [(start, end)], now, by=by)[0]


def gpu_seconds_per_period(
    ledger, periods: list[tuple[datetime, datetime]], now: datetime, *, by: str = "charge_group"
) -> list[dict[str, float]]:
    """:func:`gpu_seconds_by_group` for each ``(start, end)`` of ``periods`` (the admin page's
    weeks); ``by``: ``"charge_group"`` or ``"user"``. The database sums each period (one
    aggregate query per period, one read transaction): a scrape's cost does not grow with the
    week's allocations in Python. A group whose allocations overlap the period for no time is
    listed at 0."""
    d = ledger.dialect
    key = {"charge_group": allocations.c.charge_group, "user": allocations.c.user}[by]
    greatest, least = (
        (sa.func.max, sa.func.min) if d == "sqlite" else (sa.func.greatest, sa.func.least)
    )
    out: list[dict[str, float]] = []
    with ledger._read() as conn:
        for start, end in periods:
            hi_t = min(end, now)
            lo, hi = start.timestamp(), hi_t.timestamp()
            started = _epoch(allocations.c.started_at, d)
            ended = sa.func.coalesce(_epoch(allocations.c.ended_at, d), hi)
            span = least(ended, hi) - greatest(started, lo)
            q = (
                sa.select(
                    sa.func.coalesce(key, ""),
                    sa.func.sum(sa.case((span > 0, span * allocations.c.share), else_=0.0)),
                )
                .where(
                    allocations.c.started_at < hi_t,
                    sa.or_(allocations.c.ended_at.is_(None), allocations.c.ended_at >= start),
                )
                .group_by(key)
            )
            found: dict[str, float] = {}
            for g, v in conn.execute(q):  # NULL and "" are one group
                found[g] = found.get(g, 0.0) + float(v or 0.0)
            out.append(found)
    return out


def usage_sums(
    ledger, start: datetime, end: datetime, now: datetime
) -> dict[tuple[str, str], float]:
    """``{(user, charge group or ""): weighted GPU-seconds in [start, end)}`` of the allocations
    :func:`~jupyterhub_gpulab.fairuse.accounting.usage` counts (those starting before ``end``
    and by ``now``, open or ended after ``start``; one with no time inside is listed at 0, as
    there), summed by the database in one grouped query: the admin page's GPU-hours without
    an object per allocation of the period. Seconds to the millisecond."""
    d = ledger.dialect
    greatest, least = (
        (sa.func.max, sa.func.min) if d == "sqlite" else (sa.func.greatest, sa.func.least)
    )
    lo, hi = start.timestamp(), min(end, now).timestamp()
    started = _epoch(allocations.c.started_at, d)
    ended = sa.func.coalesce(_epoch(allocations.c.ended_at, d), hi)
    span = least(ended, hi) - greatest(started, lo)
    group = sa.func.coalesce(allocations.c.charge_group, "")
    q = (
        sa.select(
            allocations.c.user,
            group,
            sa.func.sum(sa.case((span > 0, span * allocations.c.share), else_=0.0)),
        )
        .where(
            allocations.c.started_at < end,
            allocations.c.started_at <= now,
            sa.or_(allocations.c.ended_at.is_(None), allocations.c.ended_at > start),
        )
        .group_by(allocations.c.user, group)
    )
    found: dict[tuple[str, str], float] = {}
    with ledger._read() as conn:
        for user, g, v in conn.execute(q):
            found[(user, g)] = found.get((user, g), 0.0) + float(v or 0.0)
    # to the millisecond SQLite's julianday() keeps: no time reads as 0, not a few µs
    return {k: round(v, 3) for k, v in found.items()}

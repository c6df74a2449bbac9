"""Reservations: slices kept for a course session's roster and staff, enforced in the claim.

A **booking** reserves ``count`` slices satisfying a profile's slice request for the members of
``groups`` (a course's roster and staff group) from ``lead_s`` before ``starts_at`` until
``ends_at``. The rule, read by :meth:`Reservations._guard` inside the claim's transaction and
judged by :class:`.claimguard.ClaimGuard`:

- While a booking *protects* (``starts_at - lead_s <= now < starts_at + grace_s``) its
  ``count - used`` unclaimed seats (``used``: open allocations charged to it) must stay free: a
  claim may take a slice that the booking's request matches only if, afterwards, at least the
  unclaimed seats of the protecting bookings with the same request remain free. A member's claim
  of the booking's profile is *charged* to it (``allocations.booking_id``) and may take one of
  its seats; it never takes another booking's.
- From ``starts_at + grace_s`` the unclaimed seats return to everyone (nobody is protected); a
  member's claim is still charged to the booking until ``ends_at`` while it has room, so the form
  can say how many of the booking are in use.

Why it holds across threads, processes and hub replicas: SQLite runs every claim as the only
writer (``BEGIN IMMEDIATE``); on PostgreSQL every claim made while a booking protects takes one
transaction-scoped advisory lock (``gpulab:reservations``) before it counts free slices, so two
claims never both count the same last free seat. Outside booking windows nothing is locked.

Bookings are checked when made (:meth:`Reservations.book`, judged by :mod:`.bookingfit`): at
every instant of the new booking's window, the bookings then open whose slices overlap the new
one's must fit the inventory's slices that any of them can use (Hall's condition for that set),
with a MIG GPU of the layout schedule counted in the layout it will hold then; else
:class:`BookingConflict` names them. Two bookings of different requests that share slices are
checked together; the claim's guard counts per request, which is exact when bookings of one
inventory pool use one request.
"""

from __future__ import annotations

import zlib
from collections.abc import Collection
from datetime import datetime, timedelta

import sqlalchemy as sa

from .. import clock
from ..clock import as_utc
from ..inventory.model import SliceRequest
from .bookingfit import ScheduledHost, check_fits, planned_inventory
from .bookings import Booking, Reserved, _Row, booking_values
from .claimguard import BookingLimit, ClaimGuard, overlaps
from .claimreads import OPEN_BOOKING, Counts, read_counts
from .models import slice_from_row
from .queries import slice_filter
from .schema import bookings, devices, slices

#: The bookings that may be open now, for a read outside a claim (the form's notes)
_OPEN_BOOKINGS = sa.select(bookings).where(OPEN_BOOKING)

#: The PostgreSQL advisory lock every claim takes while any booking protects seats.
_LOCK_KEY = zlib.crc32(b"gpulab:reservations") - 2**31
#: Taking a transaction-scoped advisory lock (``k``), built once (also :meth:`.Ledger._lock`).
ADVISORY_LOCK = sa.text("SELECT pg_advisory_xact_lock(:k)")


class Reservations:
    """Mixed into :class:`~.ledger.Ledger` (uses ``_read``, ``_write``, ``dialect``,
    ``_statement``, ``_free_clauses``)."""

    #: The GPUs whose MIG layout follows ``c.GPULab.mig_schedule``: a booking is judged against
    #: the layout they will hold at its time (:mod:`.bookingfit`). Set by the gpulab service, the
    #: one process that books and shows the calendar, from its lab
    #: (:meth:`.bookingfit.ScheduledHost.of`); ``None``: none (the hub only claims).
    layout_plan: ScheduledHost | None = None

    # -- booking ----------------------------------------------------------------------------

    def book(
        self,
        *,
        holder: str,
        groups: Collection[str],
        profile: str,
        request: SliceRequest,
        count: int,
        starts_at: datetime,
        ends_at: datetime,
        lead_s: int = 0,
        grace_s: int = 0,
        ref: str | None = None,
        server_name: str | None = None,
    ) -> Booking:
        """Reserve ``count`` slices satisfying ``request`` (profile slug ``profile``) for the
        members of ``groups`` over ``[starts_at - lead_s, ends_at)``; unclaimed seats return to
        everyone at ``starts_at + grace_s``. ``ref`` (a course session's own id) makes booking
        idempotent: an existing booking with the same ``ref`` is replaced. ``server_name``: the
        seats are for members' servers of that name (a course's server: a member's other servers
        count as anyone's), any server when ``None``.

        Raises ``ValueError`` for a malformed booking (count < 1, end before start, negative
        lead/grace, no group) and :class:`BookingConflict` when the inventory cannot hold it
        together with the bookings it overlaps (named in the message)."""
        values = booking_values(
            holder=holder, groups=groups, profile=profile, request=request, count=count,
            starts_at=starts_at, ends_at=ends_at, lead_s=lead_s, grace_s=grace_s, ref=ref,
            server_name=server_name,
        )  # fmt: skip
        with self._write() as conn:
            self._lock_reservations(conn)
            old = self._existing(conn, ref) if ref is not None else {}
            return self._put_booking(conn, values, old.get(ref))

    def replace_bookings(self, prefix: str, specs: list[dict]) -> list[Booking]:
        """Make the bookings whose ``ref`` starts with ``prefix`` and that have not ended be
        ``specs`` (keyword arguments of :meth:`book`, each ``ref`` starting with ``prefix``), in
        one transaction: all fit, or :class:`BookingConflict` (or ``ValueError``) names the
        first that does not and nothing changes. An unchanged booking keeps its row; a changed
        one keeps its id, so the allocations charged to it stay charged. A course books its
        sessions this way (``prefix="course:ml101/"``); ``specs=[]`` cancels them."""
        rows = [booking_values(**spec) for spec in specs]
        if any(not (v["ref"] or "").startswith(prefix) for v in rows):
            raise ValueError(f"every booking's ref must start with {prefix!r}")
        with self._write() as conn:
            self._lock_reservations(conn)
            old = self._existing(conn, prefix, like=True)
            wanted = {v["ref"] for v in rows}
            gone = [b.id for r, b in old.items() if r not in wanted]
            if gone:
                conn.execute(bookings.delete().where(bookings.c.id.in_(gone)))
            return [self._put_booking(conn, v, old.get(v["ref"])) for v in rows]

    @staticmethod
    def _existing(conn, ref: str, *, like: bool = False) -> dict[str, Booking]:
        """``{ref: booking}`` of the bookings with ``ref`` (or a ref starting with it) that
        have not ended."""
        match = bookings.c.ref.startswith(ref, autoescape=True) if like else bookings.c.ref == ref
        q = sa.select(bookings).where(match, bookings.c.ends_at > clock.utcnow())
        return {b.ref: b for b in (Booking.from_row(r) for r in conn.execute(q))}

    def _put_booking(self, conn, values: dict, old: Booking | None) -> Booking:
        """Insert booking ``values`` in place of ``old`` (kept as it is when nothing changed,
        else replaced under the same id) after checking that it fits with the others."""
        new = Booking.from_row(_Row(dict(values, id=old.id if old else 0)))
        if old is not None:
            if old == new:
                return old
            conn.execute(bookings.delete().where(bookings.c.id == old.id))
        self._check_fits(conn, new)
        values = dict(values, created_at=clock.utcnow())
        if old is not None:
            values["id"] = old.id
            conn.execute(bookings.insert().values(values))
        else:
            values["id"] = conn.execute(
                bookings.insert().values(values).returning(bookings.c.id)
            ).scalar_one()
        return Booking.from_row(_Row(values))

    def cancel_booking(self, booking_id: int | None = None, *, ref: str | None = None) -> int:
        """Delete a booking by id or by ``ref``; allocations charged to it keep running.
        Returns how many were deleted."""
        q = bookings.delete()
        q = q.where(bookings.c.id == booking_id) if ref is None else q.where(bookings.c.ref == ref)
        with self._write() as conn:
            return conn.execute(q).rowcount

    def bookings(self, start: datetime | None = None, end: datetime | None = None) -> list[Booking]:
        """Bookings whose window overlaps ``[start, end)`` (all when not given), by start."""
        q = sa.select(bookings).order_by(bookings.c.starts_at, bookings.c.id)
        if start is not None:
            q = q.where(bookings.c.ends_at > start)
        with self._read() as conn:
            found = [Booking.from_row(r) for r in conn.execute(q)]
        return [b for b in found if end is None or b.window_start < end]

    def _lock_reservations(self, conn) -> None:
        if self.dialect == "postgresql":
            conn.execute(ADVISORY_LOCK, {"k": _LOCK_KEY})

    def _check_fits(self, conn, new: Booking) -> None:
        """Read what :func:`.bookingfit.check_fits` judges ``new`` on, in its transaction."""
        host = self.layout_plan
        lead = host.longest_lead if host else timedelta(0)
        rows = conn.execute(sa.select(slices).where(slices.c.available == sa.true()))
        q = sa.select(bookings).where(
            bookings.c.ends_at > new.window_start - lead - timedelta(days=1),
            bookings.c.starts_at < new.ends_at + lead + timedelta(days=1),
        )
        check_fits(
            new,
            [Booking.from_row(r) for r in conn.execute(q)],
            [slice_from_row(r) for r in rows],
            [dict(r._mapping) for r in conn.execute(sa.select(devices))] if host else [],
            host,
        )

    # -- the claim's guard ------------------------------------------------------------------

    def _guard(
        self,
        conn,
        request: SliceRequest,
        profile: str,
        groups: Collection[str],
        now: datetime,
        server_name: str | None = None,
        *,
        rows=None,
        gate: SliceRequest | None = None,
    ) -> tuple[ClaimGuard | None, Counts | None]:
        """The bookings' limits on one claim of ``server_name``, read inside its transaction
        (``None``: no booking is open now), and the counts they were judged on. Takes the
        reservations lock on PostgreSQL while any booking protects, before counting.

        ``rows``: the bookings that may be open, as the claim's first read brought them (read
        here when ``None``); ``gate``: the claim's request when the waitlist's gate is to be
        read in the same statement as the bookings' counts (:func:`.claimreads.read_counts`;
        the counts come back even when no booking is open)."""  # fmt: skip
        if rows is None:
            rows = conn.execute(_OPEN_BOOKINGS, {"now": now, "soon": now + timedelta(days=1)})
        open_now = [b for b in map(Booking.from_row, rows) if b.is_open(now)]
        if not open_now and gate is None:
            return None, None
        protecting = [b for b in open_now if overlaps(b.request, request) and b.protects(now)]
        if protecting:
            self._lock_reservations(conn)
        by_request: dict[SliceRequest, list[Booking]] = {}
        for b in protecting:  # only bookings whose slices this claim could take
            by_request.setdefault(b.request, []).append(b)
        caps = {req: sum(b.count for b in bs) + 1 for req, bs in by_request.items()}
        counts = read_counts(
            conn, self._statement, self._free_clauses, caps, [b.id for b in open_now], gate,
            profile,
        )  # fmt: skip
        if not open_now:
            return None, counts
        used = counts.used
        charged = next(
            (
                b
                for b in open_now
                if b.profile == profile
                and b.admits(groups, server_name)
                and used.get(b.id, 0) < b.count
            ),
            None,
        )
        limits = [
            BookingLimit(req, counts.free[req], {b.id: b.count for b in bs}, used, bs,
                   lambda req=req: self._available_count(req))
            for req, bs in by_request.items()
        ]  # fmt: skip
        return ClaimGuard(request, charged, limits, now), counts

    def _available_count(self, request: SliceRequest) -> int:
        """Slices of ``request`` in service, held or not (the notes' "of N"; built once per
        request, as the claim's other statements)."""

        def build():
            return (
                sa.select(sa.func.count())
                .select_from(slices)
                .where(*slice_filter(request), slices.c.available == sa.true())
            )

        with self._read() as conn:
            return conn.execute(self._statement(("available", request), build)).scalar_one()

    def reserved_for_others(
        self,
        request: SliceRequest,
        groups: Collection[str],
        profile: str = "",
        server_name: str | None = None,
    ) -> list[Reserved]:
        """The seats of ``request``'s slices kept now for bookings the user (in ``groups``,
        starting ``server_name``) may not take, for the form: ``[Reserved(holder="DL101",
        unclaimed=3, total=8, …)]``."""  # fmt: skip
        now = clock.utcnow()
        with self._read() as conn:
            guard, _ = self._guard(conn, request, profile, groups, now, server_name)
        return [] if guard is None else guard.notes()

    def capacity_calendar(
        self, profiles: dict[str, SliceRequest], start: datetime, hours: int
    ) -> list[dict]:
        """Reserved vs available slices per profile per hour from ``start`` (aware, truncated to
        the hour) for ``hours`` hours: ``[{"profile", "hour" (ISO), "total", "reserved",
        "available", "holders": [...]}]``. ``reserved`` counts the seats of bookings open at any
        point of that hour whose request is the profile's or shares its slices."""
        start = as_utc(start).replace(minute=0, second=0, microsecond=0)
        end = start + timedelta(hours=hours)
        host = self.layout_plan
        lead = host.longest_lead if host else timedelta(0)
        found = self.bookings(start, end)
        with self._read() as conn:
            rows = [
                slice_from_row(r)
                for r in conn.execute(sa.select(slices).where(slices.c.available == sa.true()))
            ]
            devs = [dict(r._mapping) for r in conn.execute(sa.select(devices))] if host else []
        # the bookings that move class time within the calendar, leads included
        moving = self.bookings(start - lead, end + lead) if host else []
        inventory = planned_inventory(rows, devs, host, moving, start, end)
        out = []
        for slug, req in profiles.items():
            if req.kind is None:
                continue
            for h in range(hours):
                t0 = start + timedelta(hours=h)
                t1 = t0 + timedelta(hours=1)
                # the hour's fewest slices: a scheduled GPU changing layout within it counts so
                t, mine = min(
                    ((t, inventory.slice_ids(req, t)) for t in [t0, *inventory.changes(t0, t1)]),
                    key=lambda pair: len(pair[1]),
                )
                live = [
                    b
                    for b in found
                    if b.window_start < t1
                    and b.ends_at > t0
                    and inventory.slice_ids(b.request, t) & mine
                ]
                reserved = min(len(mine), sum(b.count for b in live))
                out.append(
                    {
                        "profile": slug,
                        "hour": t0.isoformat(),
                        "total": len(mine),
                        "reserved": reserved,
                        "available": len(mine) - reserved,
                        "holders": sorted({b.holder for b in live}),
                    }
                )
        return out

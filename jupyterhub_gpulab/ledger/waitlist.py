"""The waitlist: a refused user queues for a profile instead of "try again later".

Order is fair: higher ``priority`` first (the user's policy priority), then, with
``c.GPULab.fairshare_half_life`` set, less recent GPU use first (:mod:`.fairshare`), then first
come (the entry's id). An *offer* is a real claim made for the first in line with ``hold_until`` set: the
slice is held by an allocation (so the unique open-allocation index, quotas and reservations all
apply, and nobody else can take it) with no server yet. When that user's spawner claims the
profile, :meth:`Waitlist._take_hold` turns the hold into their server's allocation in the same
transaction; when the offer runs out, :meth:`~.queueoffers.QueueOffers.expire_offers` releases it
(``offer-lapsed``) and the next in line gets the next offer. Everything is in the database, so
the queue survives restarts.

Walk-ins do not jump the queue: a claim by someone not being served is refused while the free
slices of that profile are no more than the users waiting for it (:meth:`Waitlist._queue_gate`).

Entry states: ``waiting``; ``offered`` (``allocation_id`` held until ``offer_until``);
``served`` (their server took the slice); ``lapsed`` (the offer ran out); ``left``; ``refused``
(policy or budget said no when the slice was offered; ``message`` says why).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from .. import clock
from ..clock import as_utc
from ..inventory.model import SliceRequest
from .bookings import request_from, request_values
from .fairshare import decayed_gpu_hours, lookback_start, serving_order
from .models import Allocation, LedgerRefusal
from .notices import OFFER_RULE
from .queries import slice_filter
from .schema import allocations, slices, waitlist, warnings

#: States of an entry still in the queue.
ACTIVE = ("waiting", "offered")
#: The rule of the notice that the queue passed a user over (``refused``: why), shown there for
#: :data:`SKIP_TTL` or until they queue again.
SKIP_RULE = "waitlist-skipped"
SKIP_TTL = timedelta(days=1)
__all__ = ["ACTIVE", "OFFER_RULE", "SKIP_RULE", "SKIP_TTL", "QueueEntry", "QueueFirst", "Waitlist"]


@dataclass(frozen=True)
class QueueEntry:
    """One user queued for one profile (see the module docstring for ``state``)."""

    id: int
    user: str
    server_name: str
    profile: str
    request: SliceRequest
    priority: int
    state: str
    allocation_id: int | None
    offer_until: datetime | None
    message: str | None
    joined_at: datetime

    @classmethod
    def from_row(cls, row) -> QueueEntry:
        m = row._mapping
        return cls(
            id=m["id"],
            user=m["user"],
            server_name=m["server_name"],
            profile=m["profile"],
            request=request_from(m),
            priority=m["priority"],
            state=m["state"],
            allocation_id=m["allocation_id"],
            offer_until=as_utc(m["offer_until"]),
            message=m["message"],
            joined_at=as_utc(m["joined_at"]),
        )


class QueueFirst(LedgerRefusal):
    """Users are waiting for every free slice of this profile: join the waitlist."""

    reason = "waitlist"


class Waitlist:
    """Mixed into :class:`~.ledger.Ledger` (uses ``_read``, ``_write``, ``claim``, ``release``,
    ``set_warning``, ``clear_warnings``); the offers are :class:`~.queueoffers.QueueOffers`.

    ``fairshare_half_life``: seconds, the half-life of the usage that orders users of one
    priority (:mod:`.fairshare`); 0 (default) orders them first come. Set from
    ``c.GPULab.fairshare_half_life`` by the hub's runtime and the service."""

    fairshare_half_life: float = 0.0

    def join_waitlist(
        self,
        user: str,
        profile: str,
        request: SliceRequest,
        *,
        priority: int = 0,
        server_name: str = "",
    ) -> QueueEntry:
        """Queue ``user`` for ``profile`` (its slice ``request``); joining twice returns the
        entry already in the queue. Raises ``ValueError`` for a CPU-only request."""
        now = clock.utcnow()
        with self._write() as conn:
            row = conn.execute(
                sa.select(waitlist).where(
                    waitlist.c.user == user,
                    waitlist.c.profile == profile,
                    waitlist.c.state.in_(ACTIVE),
                )
            ).first()
            if row is not None:
                return QueueEntry.from_row(row)
            values = dict(
                user=user,
                server_name=server_name,
                profile=profile,
                priority=int(priority),
                state="waiting",
                joined_at=now,
                updated_at=now,
                **request_values(request),
            )
            eid = conn.execute(
                waitlist.insert().values(values).returning(waitlist.c.id)
            ).scalar_one()
            row = conn.execute(sa.select(waitlist).where(waitlist.c.id == eid)).one()
        self.clear_warnings(user, rule=SKIP_RULE)  # queued again: the skip is old news
        return QueueEntry.from_row(row)

    def leave_waitlist(self, user: str, profile: str | None = None) -> int:
        """Take ``user`` out of the queue (for one profile when given), releasing a held offer.
        Returns how many entries left."""
        q = sa.select(waitlist).where(waitlist.c.user == user, waitlist.c.state.in_(ACTIVE))
        if profile is not None:
            q = q.where(waitlist.c.profile == profile)
        with self._read() as conn:
            entries = [QueueEntry.from_row(r) for r in conn.execute(q)]
        for e in entries:
            self._end_entry(e, "left", None)
            if e.allocation_id is not None:
                self._release_hold(e.allocation_id, "offer-declined")
        if entries:
            self.clear_warnings(user, rule=OFFER_RULE)
        return len(entries)

    def waitlist(self, profile: str | None = None) -> list[QueueEntry]:
        """Entries still queued (waiting or offered), in serving order."""
        q = sa.select(waitlist).where(waitlist.c.state.in_(ACTIVE))
        if profile is not None:
            q = q.where(waitlist.c.profile == profile)
        with self._read() as conn:
            entries = [QueueEntry.from_row(r) for r in conn.execute(q)]
            return serving_order(entries, self._usage(conn, entries))

    def entries_of(self, user: str) -> list[QueueEntry]:
        """``user``'s entries, newest first (the last 20, any state)."""
        q = sa.select(waitlist).where(waitlist.c.user == user).order_by(waitlist.c.id.desc())
        with self._read() as conn:
            return [QueueEntry.from_row(r) for r in conn.execute(q.limit(20))]

    def queue_position(self, user: str, profile: str) -> tuple[int, float | None] | None:
        """``(position, estimate_s)`` of ``user`` in ``profile``'s queue (1 = next; offered
        entries count as 0 ahead), or ``None`` when not queued. ``estimate_s``: position × the
        mean length of this profile's allocations closed in the last 7 days ÷ the slices of its
        request (``None`` without history)."""
        queue = self.waitlist(profile)
        mine = next((e for e in queue if e.user == user), None)
        if mine is None:
            return None
        if mine.state == "offered":
            return 0, 0.0
        ahead = queue[: queue.index(mine)]
        position = 1 + sum(1 for e in ahead if e.state == "waiting")
        since = clock.utcnow() - timedelta(days=7)
        with self._read() as conn:
            spans = conn.execute(
                sa.select(allocations.c.started_at, allocations.c.ended_at).where(
                    allocations.c.profile == profile,
                    allocations.c.ended_at.is_not(None),
                    allocations.c.started_at >= since,
                )
            ).all()
            total = conn.execute(
                sa.select(sa.func.count())
                .select_from(slices)
                .where(*slice_filter(mine.request), slices.c.available == sa.true())
            ).scalar_one()
        if not spans or not total:
            return position, None
        mean = sum((as_utc(e) - as_utc(s)).total_seconds() for s, e in spans) / len(spans)
        return position, position * mean / total

    def holds_of(self, user: str) -> dict[str, Allocation]:
        """``{profile: hold}``: the slices held for ``user`` (offers, :class:`Allocation` with
        ``hold_until`` set and no server yet), one per profile: the one their next claim of that
        profile takes (:meth:`_take_hold`), whatever else the claim would check. A hold still
        counts among the user's open allocations, so toward their slice limit for any other
        profile. Read by the spawn form."""
        with self._read() as conn:
            rows = [Allocation.from_row(r) for r in conn.execute(holds_query(user))]
        held: dict[str, Allocation] = {}
        for a in rows:
            held.setdefault(a.profile, a)
        return held

    # -- inside the claim -------------------------------------------------------------------

    def _take_hold(self, conn, hold_id: int, user: str, server_name: str, now: datetime):
        """Make ``user``'s held offer ``hold_id`` (the claim's first read found it:
        :func:`holds_query`) their server's allocation and return it (``None`` when the offer
        lapsed in the meantime). Runs in the claim's transaction."""
        row = conn.execute(
            _TAKE_HOLD, {"aid": hold_id, "server_name": server_name, "now": now}
        ).first()
        if row is None:
            return None  # the offer lapsed between our read and our write
        conn.execute(_SERVED, {"aid": hold_id, "now": now})
        conn.execute(_DROP_OFFER_NOTICE, {"user": user})
        return Allocation.from_row(row)

    def _queue_gate(self, conn, user: str, profile: str, queue_entry, kept, counts) -> int | None:
        """Inside a claim: the waitlist entry this claim serves (``queue_entry``, or the user's
        own entry when first in line, or whenever ``kept``: a seat reserved for them), after
        refusing with :class:`QueueFirst` a claim that would take a slice someone ahead is
        waiting for. ``counts``: the claim's :class:`~.claimreads.Counts` (the users waiting
        and the free slices of the claim's request, counted up to their number + 1, read in one
        statement), ``None`` when nobody was waiting."""
        if queue_entry is not None:
            return queue_entry
        if counts is None or not counts.waiting:
            return None
        mine = next((w.id for w in counts.waiting if w.user == user), None)
        if kept:  # no order needed: nobody queued could take that seat
            return mine
        waiting = serving_order(counts.waiting, self._usage(conn, counts.waiting))
        if waiting[0].user == user:
            return mine
        ahead = next((i for i, w in enumerate(waiting) if w.user == user), len(waiting))
        # free counted up to len(waiting) + 1 > ahead: "free <= ahead" is read exactly
        if counts.gate_free <= ahead:
            raise QueueFirst(
                f"{ahead} {'person is' if ahead == 1 else 'people are'} waiting for profile "
                f"{profile!r} ahead of you. Join the waitlist: the next free slice is held for "
                "the first in line, and you will see your position and an estimate."
            )
        return waiting[ahead].id if ahead < len(waiting) else None

    @staticmethod
    def _mark_offered(conn, entry_id: int, allocation_id: int, hold_until, now) -> None:
        conn.execute(
            _MARK_ENTRY,
            {
                "eid": entry_id,
                "state": "offered" if hold_until is not None else "served",
                "aid": allocation_id,
                "until": hold_until,
                "now": now,
            },
        )

    # -- helpers ----------------------------------------------------------------------------

    def _usage(self, conn, entries) -> dict[str, float] | None:
        """The queued users' decayed GPU-hours now (:func:`.fairshare.decayed_gpu_hours`), or
        ``None`` when fair share is off or nobody is queued."""
        users = sorted({e.user for e in entries})
        if not self.fairshare_half_life or not users:
            return None
        now = clock.utcnow()
        since = lookback_start(now, self.fairshare_half_life)
        rows = conn.execute(_USAGE_SPANS, {"users": users, "now": now, "since": since})
        spans = [_Used(r.user, r.share, as_utc(r.started_at), as_utc(r.ended_at)) for r in rows]
        return decayed_gpu_hours(spans, now, self.fairshare_half_life)

    def _end_entry(self, e: QueueEntry, state: str, message: str | None) -> bool:
        with self._write() as conn:
            return (
                conn.execute(
                    waitlist.update()
                    .where(waitlist.c.id == e.id, waitlist.c.state == e.state)
                    .values(state=state, message=message, updated_at=clock.utcnow())
                ).rowcount
                == 1
            )

    def _release_hold(self, allocation_id: int, reason: str) -> bool:
        """Close ``allocation_id`` and free its slice only while it is still a hold, through the
        ledger's one release path (:meth:`~.ledger.Ledger.release`, which announces it)."""
        return self.release(allocation_id, reason, only_hold=True)


def holds_query(user, profile=None) -> sa.Select:
    """``user``'s open holds (for ``profile``), oldest first: the one home of "this user holds an
    offer", for the claim's first read (:func:`.claimreads.read_holder`, whose hold
    :meth:`Waitlist._take_hold` takes) and :meth:`Waitlist.holds_of` (the form)."""
    q = sa.select(allocations).where(
        allocations.c.user == user,
        allocations.c.ended_at.is_(None),
        allocations.c.hold_until.is_not(None),
    )
    if profile is not None:
        q = q.where(allocations.c.profile == profile)
    return q.order_by(allocations.c.id)


#: who waits for profile ``:profile`` (the claim reads them with its counts,
#: :func:`.claimreads.read_counts`, and orders them by :func:`.fairshare.serving_order`)
WAITING = sa.and_(waitlist.c.state == "waiting", waitlist.c.profile == sa.bindparam("profile"))

# The claim's writes to the queue and the fair-share read of its gate, built once for the same
# reason (and so that a claim leaves no cyclic garbage of statement objects for the GC).
#: a hold (``aid``) becomes the server's allocation, while it is still an open hold; the
#: allocation as it is now comes back
_TAKE_HOLD = (
    allocations.update()
    .where(
        allocations.c.id == sa.bindparam("aid"),
        allocations.c.hold_until.is_not(None),
        allocations.c.ended_at.is_(None),
    )
    .values(
        hold_until=None, server_name=sa.bindparam("server_name"), started_at=sa.bindparam("now")
    )
    .returning(*allocations.c)
)
#: the entry offered hold ``aid`` is served
_SERVED = (
    waitlist.update()
    .where(waitlist.c.allocation_id == sa.bindparam("aid"), waitlist.c.state == "offered")
    .values(state="served", updated_at=sa.bindparam("now"))
)
#: the user's "a slice is held for you" notice goes once they took it
_DROP_OFFER_NOTICE = warnings.delete().where(
    warnings.c.user == sa.bindparam("user"), warnings.c.rule == OFFER_RULE
)
#: entry ``eid`` offered (or served by) allocation ``aid``
_MARK_ENTRY = (
    waitlist.update()
    .where(waitlist.c.id == sa.bindparam("eid"))
    .values(
        state=sa.bindparam("state"),
        allocation_id=sa.bindparam("aid"),
        offer_until=sa.bindparam("until"),
        updated_at=sa.bindparam("now"),
    )
)
#: the queued users' (``users``, expanding) spans of use since ``since``, holds left out
_USAGE_SPANS = sa.select(
    allocations.c.user, allocations.c.share, allocations.c.started_at, allocations.c.ended_at
).where(
    allocations.c.user.in_(sa.bindparam("users", expanding=True)),
    allocations.c.hold_until.is_(None),
    allocations.c.started_at < sa.bindparam("now"),
    sa.or_(allocations.c.ended_at.is_(None), allocations.c.ended_at >= sa.bindparam("since")),
)


@dataclass(frozen=True)
class _Used:
    """One allocation's span as :func:`.fairshare.decayed_gpu_hours` reads it."""

    user: str
    share: float
    started_at: datetime
    ended_at: datetime | None

"""Plain records of reservations (see :mod:`.placement` for the rule): a :class:`Booking`, the
:class:`Reserved` note a form shows, the :class:`BookingConflict` refusal, and the slice-request
columns that bookings and the waitlist store."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..clock import as_utc
from ..inventory.model import SliceKind, SliceRequest
from .models import LedgerRefusal


def request_values(request: SliceRequest) -> dict:
    """A :class:`SliceRequest` as the ``kind``/``mig_profile``/``min_memory_bytes``/``model``
    columns that bookings and the waitlist store."""
    if request.kind is None:
        raise ValueError("a CPU-only profile holds no slice; nothing to reserve or queue for")
    return {
        "kind": request.kind.value,
        "mig_profile": request.wanted_mig_profile,
        "min_memory_bytes": int(request.min_memory_bytes or 0),
        "model": request.model,
    }


def request_from(m) -> SliceRequest:
    """The :class:`SliceRequest` stored in a booking or waitlist row's mapping."""
    return SliceRequest(
        kind=SliceKind(m["kind"]),
        min_memory_bytes=m["min_memory_bytes"] or 0,
        model=m["model"],
        mig_profile=m["mig_profile"],
    )


def booking_values(
    *,
    holder,
    groups,
    profile,
    request,
    count,
    starts_at,
    ends_at,
    lead_s=0,
    grace_s=0,
    ref=None,
    server_name=None,
) -> dict:
    """A booking's row (see :meth:`.placement.Reservations.book`); ``ValueError`` when malformed."""
    starts_at, ends_at = as_utc(starts_at), as_utc(ends_at)
    if count < 1:
        raise ValueError(f"a booking reserves at least 1 slice, not {count}")
    if ends_at <= starts_at:
        raise ValueError("a booking must end after it starts")
    if lead_s < 0 or grace_s < 0:
        raise ValueError("lead and grace are seconds >= 0")
    groups = sorted(set(groups))
    if not groups:
        raise ValueError("a booking needs at least one group (the roster, the staff)")
    return dict(
        holder=holder[:64],
        ref=ref,
        server_name=server_name,
        groups=groups,
        profile=profile,
        count=int(count),
        starts_at=starts_at,
        ends_at=ends_at,
        lead_s=int(lead_s),
        grace_s=int(grace_s),
        **request_values(request),
    )


@dataclass(frozen=True)
class Booking:
    """A reservation (see the module docstring). Times are aware UTC; ``lead_s``/``grace_s`` in
    seconds."""

    id: int
    holder: str
    ref: str | None
    groups: tuple[str, ...]
    profile: str
    request: SliceRequest
    count: int
    starts_at: datetime
    ends_at: datetime
    lead_s: int
    grace_s: int
    #: the seats are for members' servers of this name (a course's server), any when None
    server_name: str | None = None

    @property
    def window_start(self) -> datetime:
        """When the seats start being kept (``starts_at - lead``)."""
        return self.starts_at - timedelta(seconds=self.lead_s)

    @property
    def release_at(self) -> datetime:
        """When unclaimed seats return to everyone (``starts_at + grace``, at most the end)."""
        return min(self.ends_at, self.starts_at + timedelta(seconds=self.grace_s))

    def protects(self, now: datetime) -> bool:
        return self.window_start <= now < self.release_at

    def is_open(self, now: datetime) -> bool:
        return self.window_start <= now < self.ends_at

    def admits(self, groups: Collection[str], server_name: str | None = None) -> bool:
        """Whether a user in ``groups`` is one of the booking's roster or staff (starting the
        server the booking is for, when it names one)."""
        if self.server_name is not None and server_name != self.server_name:
            return False
        return any(g in self.groups for g in groups)

    def describe(self) -> str:
        """``"DL101 (4 × shared GPU seat, 2026-12-01 14:00–16:00 UTC)"``, for conflicts and logs."""
        return (
            f"{self.holder} ({self.count} × {self.request.describe()}, "
            f"{self.starts_at:%Y-%m-%d %H:%M}–{self.ends_at:%H:%M} UTC)"
        )

    @classmethod
    def from_row(cls, row) -> Booking:
        m = row._mapping
        return cls(
            id=m["id"],
            holder=m["holder"],
            ref=m["ref"],
            groups=tuple(m["groups"] or ()),
            profile=m["profile"],
            request=request_from(m),
            count=m["count"],
            starts_at=as_utc(m["starts_at"]),
            ends_at=as_utc(m["ends_at"]),
            lead_s=m["lead_s"],
            grace_s=m["grace_s"],
            server_name=m.get("server_name"),
        )


class BookingConflict(LedgerRefusal):
    """A booking the inventory cannot hold together with the bookings in ``conflicts``."""

    reason = "booking-conflict"

    def __init__(self, message: str, conflicts: Iterable[Booking] = ()):
        super().__init__(message)
        self.conflicts = tuple(conflicts)


@dataclass(frozen=True)
class Reserved:
    """What the form shows: ``unclaimed`` of ``total`` matching slices are reserved for
    ``holder`` until ``until`` (when they return to everyone)."""

    holder: str
    profile: str
    unclaimed: int
    count: int
    total: int
    until: datetime
    booking_id: int = 0

    def describe(self) -> str:
        return f"{self.unclaimed} of {self.total} reserved for {self.holder} until {self.until:%H:%M} UTC"


class _Row:
    """Adapts a dict to the ``row._mapping`` shape :meth:`Booking.from_row` reads."""

    def __init__(self, mapping: dict):
        self._mapping = mapping

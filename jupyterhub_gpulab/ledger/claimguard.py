"""The claim's guard: one claim's view of the bookings that protect seats now, and the
reservation rule (:mod:`.placement`'s docstring) judged on it. Pure: built by
:meth:`.placement.Reservations._guard` from what it read inside the claim's transaction; the
only read left here is the notes' ``total``, a callable it is handed.
"""

from __future__ import annotations

from ..inventory.model import Slice, SliceRequest
from .bookings import Booking, Reserved


class BookingLimit:
    """The protecting bookings of one slice request, as one claim's transaction read them.

    ``free``: free slices of ``request`` (in service, held by nobody), counted only up to
    ``sum(counts) + 1``, the most the rule ever needs (so the count costs O(bookings' seats), not
    O(slices)); ``counts``/``used``: per booking id. The rule (:mod:`.placement`'s docstring):
    after the claim, the unclaimed seats of these bookings must still be free:
    ``free - 1 >= Σ unclaimed`` for an uncharged claim, and ``free - 1 >= Σ unclaimed of the other
    bookings`` for one charged to ``a`` (it takes one of ``a``'s own seats). ``free`` and ``used``
    are read in one statement (:func:`.claimreads.read_counts`), so on PostgreSQL too they are
    one snapshot: no release commits between them; a claim, the only thing that lowers
    ``free``, holds the reservations lock. ``total`` (available slices of the request, for the notes) is counted
    only when a note is wanted: a refusal or the form."""

    def __init__(self, request, free, counts, used, bookings, total):
        self.request, self.free, self.counts, self.used = request, free, counts, used
        self._bookings, self._total = bookings, total

    def _unclaimed(self, booking_id: int) -> int:
        return max(0, self.counts[booking_id] - self.used.get(booking_id, 0))

    def allows(self, charged_id: int | None) -> bool:
        kept = sum(self._unclaimed(b) for b in self.counts if b != charged_id)
        return self.free - 1 >= kept

    @property
    def notes(self) -> list[Reserved]:
        total = self._total() if callable(self._total) else self._total
        self._total = total
        return [
            Reserved(b.holder, b.profile, self._unclaimed(b.id), b.count, total, b.release_at,
                     b.id)
            for b in self._bookings
        ]  # fmt: skip


class ClaimGuard:
    """One claim's view of the bookings (built inside its transaction)."""

    def __init__(self, request, charged, limits, now=None):
        self.request = request
        #: the booking a member's claim is charged to, or None
        self.charged: Booking | None = charged
        self.limits: list[BookingLimit] = limits
        #: the claim takes a seat its member's booking keeps now (inside lead..grace)
        self.seat_kept = charged is not None and now is not None and charged.protects(now)

    @property
    def _charged_id(self):
        return self.charged.id if self.charged is not None else None

    def allows(self, s: Slice) -> bool:
        """Whether the claim may take slice ``s`` (a candidate the search found)."""
        return all(lim.allows(self._charged_id) for lim in self.limits if lim.request.matches(s))

    def blocks_everything(self) -> bool:
        """True when no slice of the claim's own request may be taken."""
        return any(
            lim.request == self.request and not lim.allows(self._charged_id) for lim in self.limits
        )

    def notes(self) -> list[Reserved]:
        """The seats kept from this claim by bookings of its own kind of slice (a booking of
        shared seats says nothing to someone asking for a whole GPU)."""
        return [
            n
            for lim in self.limits
            if lim.request == self.request or overlaps(lim.request, self.request)
            for n in lim.notes
            if n.unclaimed > 0 and (self.charged is None or n.booking_id != self.charged.id)
        ]


def overlaps(a: SliceRequest, b: SliceRequest) -> bool:
    """Whether bookings of ``a`` and claims of ``b`` can take the same slices (same kind,
    same wanted MIG profile)."""
    return a.kind == b.kind and a.wanted_mig_profile == b.wanted_mig_profile

"""The waitlist's offers: a freed slice held for the first in line, and a hold that runs out
passed on to the next (the queue itself, its order and the claim's side of it are
:mod:`.waitlist`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import sqlalchemy as sa

from .. import clock
from ..inventory.model import SliceRequest
from .models import NoFreeSlice, QuotaExceeded
from .notices import NOTICE_PREFIXES, OFFER_RULE, OFFER_TAKE
from .schema import waitlist, warnings
from .waitlist import SKIP_RULE, SKIP_TTL, QueueEntry


class QueueOffers:
    """Mixed into :class:`~.ledger.Ledger` beside :class:`~.waitlist.Waitlist` (uses its
    ``waitlist``, ``_end_entry`` and ``_release_hold``, and the ledger's ``claim``,
    ``set_warning``, ``clear_warnings``)."""

    def expire_offers(self) -> list[QueueEntry]:
        """Release the holds of offers that ran out (``offer-lapsed``) and mark them lapsed, so
        the next :meth:`offer_next` passes the slice on. Returns the lapsed entries."""
        now = clock.utcnow()
        with self._read() as conn:
            due = [
                QueueEntry.from_row(r)
                for r in conn.execute(
                    sa.select(waitlist).where(
                        waitlist.c.state == "offered", waitlist.c.offer_until <= now
                    )
                )
            ]
        lapsed = []
        for e in due:
            if self._end_entry(e, "lapsed", "The slice held for you was not claimed in time."):
                if e.allocation_id is not None:
                    self._release_hold(e.allocation_id, "offer-lapsed")
                self.clear_warnings(e.user, rule=OFFER_RULE)
                lapsed.append(e)
        with self._write() as conn:
            conn.execute(
                warnings.delete().where(
                    warnings.c.rule == SKIP_RULE, warnings.c.created_at < now - SKIP_TTL
                )
            )
        return lapsed

    def offer_next(
        self,
        entitle: Callable[[QueueEntry], dict | str],
        hold_s: float,
        narrow: Callable[[QueueEntry], SliceRequest] | None = None,
    ) -> list[QueueEntry]:
        """Offer free slices to the queue, first in line first, per profile.

        ``entitle(entry)`` re-checks policy and budget now: it returns the claim's limits
        (``user_limit``, ``charge_groups``, ``groups``) or a refusal message, which ends the
        entry as ``refused``. A user at their slice limit, or kept off a reserved slice, stays
        queued and the next is tried; no free slice ends the profile's turn. An offer holds the slice for ``hold_s`` seconds and
        leaves a warning (rule ``waitlist-offer``) that the hub's home page shows, in place of a notice
        that the same server was stopped (``culled:…``, ``stopped:…``). Returns the
        entries offered. ``narrow(entry)``, when given, is the request to claim for the entry
        (its profile's, narrowed to the GPUs the profile's image can use: the queue stores only
        the slice's kind, profile, memory and model)."""
        offered = []
        by_profile: dict[str, list[QueueEntry]] = {}
        for e in self.waitlist():
            by_profile.setdefault(e.profile, []).append(e)
        for queue in by_profile.values():
            for e in queue:
                if e.state != "waiting":
                    continue
                limits = entitle(e)
                if isinstance(limits, str):  # told on their pages: they are not waiting now
                    if self._end_entry(e, "refused", limits):
                        self.set_warning(e.user, e.server_name, SKIP_RULE, limits, clock.utcnow())
                    continue
                until = clock.utcnow() + timedelta(seconds=hold_s)
                try:
                    claim = self.claim(
                        narrow(e) if narrow else e.request,
                        user=e.user,
                        profile=e.profile,
                        server_name=e.server_name,
                        hold_until=until,
                        queue_entry=e.id,
                        **limits,
                    )
                except QuotaExceeded as err:
                    self._note(e, err.message)
                    continue
                except NoFreeSlice as err:
                    if err.reserved:  # kept for a course this user is not in; others may be
                        self._note(e, err.message)
                        continue
                    break
                message = (
                    f"Your turn: a GPU slice ({claim.slice.device_name}) is held for you for "
                    f"profile {e.profile!r} until {until:%H:%M} UTC. {OFFER_TAKE}"
                )
                self.set_warning(e.user, e.server_name, OFFER_RULE, message, until)
                self._drop_stop_notices(e.user, e.server_name)
                offered.append(e)
        return offered

    # -- helpers ----------------------------------------------------------------------------

    def _drop_stop_notices(self, user: str, server_name: str) -> None:
        """Drop the notices that ``user``'s server ``server_name`` was stopped (culled, node
        lost): they are about an earlier server, and the offer for it is newer news."""
        with self._write() as conn:
            conn.execute(
                warnings.delete().where(
                    warnings.c.user == user,
                    warnings.c.server_name == server_name,
                    sa.or_(*(warnings.c.rule.startswith(p) for p in NOTICE_PREFIXES)),
                )
            )

    def _note(self, e: QueueEntry, message: str) -> None:
        with self._write() as conn:
            conn.execute(
                waitlist.update()
                .where(waitlist.c.id == e.id)
                .values(message=message, updated_at=clock.utcnow())
            )

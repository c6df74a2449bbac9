"""A refused claim decided without a write, and its record written later with others'.

Under a burst of spawns for a profile whose slices are all held, every refused claim took the
SQLite write lock (``BEGIN IMMEDIATE``) and wrote one refusal row: a trip to the ledger's one
writing thread (:func:`~.aio.write`), queued behind the other claims and the winners' writes, then
a trip back to the hub's loop. With the loop busy serving the burst, those two trips were most of
a refusal's time in the spawner (issue 21 item 6).

:func:`refused_without_write` runs the claim's own rules (:meth:`~.ledger.Ledger._claim_in`, the
same code, so the user is told the same thing in the same order: offer, user limit, group caps,
bookings, queue, free slices) on a read transaction whose connection cannot write
(``PRAGMA query_only``). When those rules refuse, that is the refusal: a claim's reads see one
snapshot, and a slice freed after it is a release ordered after the refusal, as it would be had
the refusal held the write lock. When the rules would hold a slice (or take an offer) the
write fails at once and the caller claims as before: the claim's write transaction stays the one
thing that hands out a slice, so no slice is ever held twice.

Its record joins :class:`PendingRefusals`: the rows of every refusal decided this way that wait
for the writing thread are inserted in one transaction (:meth:`PendingRefusals.flush`), off the
refused user's path; the admin page, the API and the course report (in the service's process)
read them from the ledger a few milliseconds later.

SQLite only: on PostgreSQL claims take row locks, not one lock for the whole database, and a
read there is a network round trip; :func:`refused_without_write` answers ``None``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sqlalchemy.exc import OperationalError

from .. import clock
from .models import LedgerRefusal
from .schema import refusals

log = logging.getLogger(__name__)


def refused_without_write(
    ledger,
    request,
    *,
    user: str,
    profile: str,
    server_name: str = "",
    node: str | None = None,
    user_limit: int | None = None,
    charge_groups=(),
    only_node: str | None = None,
    groups=(),
    refusal: Callable[[LedgerRefusal], object],
) -> LedgerRefusal | None:
    """The :class:`LedgerRefusal` a :meth:`~.ledger.Ledger.claim` with these arguments would
    raise now, decided on a read-only transaction, its ``refusal`` set to ``refusal(e)`` (what
    the user is told) and its record queued (``ledger.pending_refusals``); ``None`` when the
    claim may succeed (it would write: claim for real) or the ledger is not SQLite.

    Listeners hear ``claim_refused`` as for a claim's refusal (the claim latency metric)."""
    if ledger.dialect != "sqlite":
        return None
    t0 = time.perf_counter()
    with ledger._read() as conn:
        raw = conn.connection.dbapi_connection
        raw.execute("PRAGMA query_only = ON").close()
        try:
            ledger._claim_in(
                conn, request, user, profile, server_name, node, user_limit, charge_groups,
                None, only_node, groups, None, None,
            )  # fmt: skip
        except LedgerRefusal as e:
            refused = e
        except OperationalError:
            return None  # the rules would hold a slice or take an offer: a write
        else:
            return None
        finally:
            raw.execute("PRAGMA query_only = OFF").close()
    refused.refusal = told = refusal(refused)
    ledger.pending_refusals.add(user, profile, told.reason, told.message)
    ledger._announce("claim_refused", request, time.perf_counter() - t0)
    return refused


#: Refusal rows kept in memory at most while the ledger cannot be written (a locked or full
#: database): past it the oldest are dropped, with a warning saying how many.
MAX_WAITING = 10_000


class PendingRefusals:
    """Refusal rows decided without a write, waiting for one transaction that inserts them all.

    A flush that fails puts its rows back (the next flush writes them), so a database that
    cannot be written for a while loses no refusal, up to :data:`MAX_WAITING` rows."""

    def __init__(self) -> None:
        self._rows: list[dict] = []
        self._asked = False
        self._lock = threading.Lock()
        #: rows dropped since the process started, the oldest first, past MAX_WAITING
        self.dropped = 0

    def add(self, user: str, profile: str | None, reason: str, message: str) -> None:
        """Queue one row (timed now); :meth:`ask` says whether it needs a flush of its own."""
        row = {
            "at": clock.utcnow(), "user": user, "profile": profile, "reason": reason[:64],
            "message": message,
        }  # fmt: skip
        with self._lock:
            self._rows.append(row)
            self._bound()

    def ask(self) -> bool:
        """``True`` once for rows waiting that no flush has been asked for yet: the caller
        then runs a :meth:`flush` (later rows ride in it); ``False`` when one is on its way."""
        with self._lock:
            if self._asked or not self._rows:
                return False
            self._asked = True
            return True

    def __len__(self) -> int:
        return len(self._rows)

    def flush(self, ledger) -> int:
        """Insert every waiting row in one write transaction (blocks: the ledger's writing
        thread); returns how many. Rows queued meanwhile wait for the next flush. Raises what the
        write raised, the rows put back first (a later flush writes them, oldest first)."""
        with self._lock:
            rows, self._rows, self._asked = self._rows, [], False
        if not rows:
            return 0
        try:
            with ledger._write() as conn:
                conn.execute(refusals.insert(), rows)
                ledger._prune_refusals(conn)
        except BaseException:
            with self._lock:
                self._rows[:0] = rows
                self._bound()
            raise
        return len(rows)

    def _bound(self) -> None:
        over = len(self._rows) - MAX_WAITING
        if over > 0:
            del self._rows[:over]
            self.dropped += over
            log.warning(
                "Dropped the %d oldest refused spawns' records (%d in all): the ledger could "
                "not be written while more than %d waited",
                over, self.dropped, MAX_WAITING,
            )  # fmt: skip

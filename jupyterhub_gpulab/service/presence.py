"""Who is at the keyboard: the last interaction each server's JupyterLab extension reports.

The hub's ``last_activity`` cannot tell a user at the keyboard from a tab left open (an open tab
polls the server, and the hub counts that as activity). The JupyterLab extension in the lab
image notes real interaction in the page (a keystroke, a click, a scroll; not an open tab, not a
running kernel) and, at most about once a minute and only when there was some since its last
report, its server extension reports the time of the latest one to the service
(``POST users/<user>/server[s/<name>]/interaction``, :mod:`.web.presenceapi`). :class:`Presence`
holds the latest per ``(user, server name)``; the culler's pass hands them to
:func:`~..fairuse.cullplan.plan`, and the GPU-idle spare (:mod:`~..fairuse.spare`) reads them in
place of ``last_activity`` for the servers that report.

The store is in memory, bounded (:data:`MAX_SERVERS`, the least recently reported server dropped
first; :data:`MAX_PER_USER` per user, so one user's reports for made-up server names push out only
their own, never another user's): a
restarted service forgets it, and until the next report (a minute of use) those servers are
judged by ``last_activity``, as servers without the extension always are. A report's time is
checked against the service's clock (:func:`check`): one more than :data:`MAX_AHEAD_S` ahead or
more than :data:`MAX_AGE_S` old is refused, and a report older than the one held moves nothing.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

__all__ = ["MAX_AGE_S", "MAX_AHEAD_S", "MAX_PER_USER", "MAX_SERVERS", "Presence", "check"]

#: The most servers whose last interaction is held (a report for one more drops the oldest).
MAX_SERVERS = 20_000
#: The most servers of one user whose last interaction is held (a report for one more drops
#: that user's least recently reported): above any sensible ``named_server_limit_per_user``; the
#: endpoint takes any well-formed server name, so without it one user could flood the store.
MAX_PER_USER = 32
#: How far ahead of the service's clock a report may be, seconds (the single-user server's
#: clock may run a little ahead of the service's).
MAX_AHEAD_S = 120
#: How old a report may be, seconds: the extension reports within a minute or two of the
#: interaction; one older than a day is no news about who is at the keyboard.
MAX_AGE_S = 24 * 3600


def check(at: datetime, now: datetime) -> str | None:
    """Why a reported interaction time ``at`` (timezone-aware) is refused at ``now``, or
    ``None``: it is accepted."""
    if at.tzinfo is None:
        return "The time must carry its time zone (e.g. 2026-12-07T10:15:00Z)."
    if at - now > timedelta(seconds=MAX_AHEAD_S):
        return f"The time is more than {MAX_AHEAD_S} s ahead of the service's clock."
    if now - at > timedelta(seconds=MAX_AGE_S):
        return f"The time is more than {MAX_AGE_S // 3600} h old."
    return None


class Presence:
    """The last reported interaction per ``(user, server name)``; thread-safe (the API's
    handlers and the culler's pass in the ledger's threads)."""

    def __init__(self, limit: int = MAX_SERVERS, per_user: int = MAX_PER_USER):
        self.limit = limit
        self.per_user = per_user
        self._at: dict[tuple[str, str], datetime] = {}
        #: each user's server names, least recently reported first
        self._names: dict[str, dict[str, None]] = {}
        self._lock = threading.Lock()

    def _drop(self, key: tuple[str, str]) -> None:
        del self._at[key]
        names = self._names[key[0]]
        del names[key[1]]
        if not names:
            del self._names[key[0]]

    def report(self, user: str, name: str, at: datetime) -> datetime:
        """Hold ``at`` as ``user``'s server ``name``'s last interaction unless a later one is
        held (reports may arrive out of order); the time held after it. ``at`` must have
        passed :func:`check`."""
        key = (user, name)
        with self._lock:
            held = self._at.get(key)
            if held is not None and held >= at:
                return held
            if held is not None:
                self._drop(key)  # re-inserted last: the dicts' order is the reports'
            self._at[key] = at
            names = self._names.setdefault(user, {})
            names[name] = None
            if len(names) > self.per_user:
                self._drop((user, next(iter(names))))  # this user's least recently reported
            while len(self._at) > self.limit:
                self._drop(next(iter(self._at)))  # the least recently reported
            return at

    def last(self, user: str, name: str) -> datetime | None:
        """``user``'s server ``name``'s last reported interaction (``None``: none held)."""
        with self._lock:
            return self._at.get((user, name))

    def snapshot(self) -> dict[tuple[str, str], datetime]:
        """Every held report, ``{(user, server name): time}``."""
        with self._lock:
            return dict(self._at)

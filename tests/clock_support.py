"""The one clock tests move: gpulab's ``jupyterhub_gpulab.clock.utcnow`` (as
jupyterhub-idle-culler's ``utcnow()``), frozen at a start and moved in seconds.

The ``at`` fixture (``conftest.py``) installs a :class:`MovingClock` in the test process. A
module sets where it starts by overriding the ``clock_start`` fixture (default: now, to the
second), and shares it with a hub subprocess by overriding ``clock_file`` (default: none):
``hub_fakes.py`` makes the hub read the time from that file, and real time while there is none.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

#: Units for :meth:`MovingClock.move`, in seconds.
MINUTE = 60
HOUR = 60 * MINUTE
DAY = 24 * HOUR


class MovingClock:
    """``clock()`` is ``now``; ``move(seconds)`` moves it; setting ``now`` jumps. With ``path``,
    every change is also written there (ISO 8601) for a hub process to read."""

    def __init__(self, start: datetime, path: Path | None = None):
        self.path = path
        self.now = start

    @property
    def now(self) -> datetime:
        return self._now

    @now.setter
    def now(self, value: datetime) -> None:
        self._now = value
        if self.path is not None:
            self.path.write_text(value.isoformat())

    def __call__(self) -> datetime:
        return self._now

    def move(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    def release(self) -> None:
        """A hub reading ``path`` goes back to real time."""
        if self.path is not None:
            self.path.unlink(missing_ok=True)


def week_start(now: datetime) -> datetime:
    """This week's Monday 00:00 UTC (gpulab's default ``quota_timezone``), where ``now`` lies."""
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return midnight - timedelta(days=now.weekday())


def quota_timezone_clear_of_the_week_turn(now: datetime, margin: float = HOUR) -> str:
    """A ``c.GPULab.quota_timezone`` whose week turned at least ``margin`` seconds before ``now``
    and turns at least ``margin`` after it: ``UTC``, or, within ``margin`` of Monday 00:00 UTC,
    UTC-12 (whose week turns 12 hours later). For a hub test that needs minutes of use in *this*
    week behind it: early on a Monday no such minutes exist in UTC, and a service in its own
    process cannot be given another clock."""
    into = (now - week_start(now)).total_seconds()
    return "UTC" if margin <= into <= 7 * DAY - margin else "Etc/GMT+12"


def clear_of_midnight(margin: float = 3 * MINUTE) -> str:
    """Today's ISO date (UTC, the culling hub's ``quota_timezone``), once at least ``margin``
    seconds of it remain: within ``margin`` of midnight this waits for the next day. For a hub
    test that counts what a user did "today" (Keeps) while a service in its own process, on the
    real clock, decides which day that is; a test begun at 23:59 would count on two days."""
    now = datetime.now(timezone.utc)
    left = now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1) - now
    if left.total_seconds() < margin:
        time.sleep(left.total_seconds() + 1)
    return datetime.now(timezone.utc).date().isoformat()

"""The one clock gpulab reads, so tests can move time (as jupyterhub-idle-culler does)."""

from __future__ import annotations

from datetime import date, datetime, time, timezone, tzinfo


def utcnow() -> datetime:
    """Timezone-aware current UTC time. Tests monkeypatch this single function."""
    return datetime.now(timezone.utc)


def as_utc(dt: datetime | None) -> datetime | None:
    """``dt`` as an aware UTC datetime (``None`` stays ``None``).

    A naive ``dt`` is read as UTC: SQLite hands back naive datetimes and gpulab writes UTC only;
    an aware one is converted (PostgreSQL answers in the session's time zone, the hub in ``Z``).
    """
    if dt is None:
        return None
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)


def midnight_utc(day: date, tz: tzinfo) -> datetime:
    """The start of ``day`` in time zone ``tz``, as an aware UTC datetime (budget periods, the
    term, the usage page's dates)."""
    return datetime.combine(day, time(0), tzinfo=tz).astimezone(timezone.utc)

"""A course's class sessions as time windows: weekly rules, one-off dates and iCal, all expanded by
``recurring-ical-events`` over one ``icalendar`` calendar (no date arithmetic of our own).

:func:`sessions_between` is the function other parts of gpulab (pre-start, reservations) call::

    sessions_between(course, start, end, tz) -> [(session_start, session_end), ...]

with timezone-aware UTC datetimes, sorted, de-duplicated. Weekly rules and one-off dates are
wall-clock times in ``tz`` (``c.GPULab.quota_timezone``), so a 10:00 class stays at 10:00 across a
daylight-saving change.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone, tzinfo

import icalendar
import recurring_ical_events

from .model import DAYS, Course

__all__ = ["check_ical", "next_session", "sessions_between", "to_calendar"]

_BYDAY = {d: d[:2].upper() for d in DAYS}


def check_ical(text: str) -> str | None:
    """``None`` when ``text`` is an iCalendar with at least one event, else what is wrong."""
    try:
        cal = icalendar.Calendar.from_ical(text)
    except Exception as e:  # icalendar raises ValueError and friends
        return f"not an iCalendar file ({str(e)[:120]})"
    if not cal.walk("VEVENT"):
        return "the calendar holds no event (VEVENT)"
    for ev in cal.walk("VEVENT"):
        if ev.get("DTSTART") is None:
            return "an event has no DTSTART"
    return None


def to_calendar(course: Course, tz: tzinfo) -> icalendar.Calendar:
    """One calendar holding every session rule of ``course``."""
    cal = icalendar.Calendar()
    cal.add("prodid", "-//jupyterhub-gpulab//courses//EN")
    cal.add("version", "2.0")
    for i, rule in enumerate(course.weekly):
        ev = icalendar.Event()
        ev.add("uid", f"{course.slug}-weekly-{i}")
        ev.add("summary", course.title)
        first = datetime.combine(rule.first, rule.start, tz)
        ev.add("dtstart", first)
        ev.add("dtend", datetime.combine(rule.first, rule.end, tz))
        until = datetime.combine(rule.last, rule.end, tz).astimezone(timezone.utc)
        ev.add("rrule", {"freq": "weekly", "byday": [_BYDAY[d] for d in rule.days], "until": until})
        cal.add_component(ev)
    for i, one in enumerate(course.dates):
        ev = icalendar.Event()
        ev.add("uid", f"{course.slug}-date-{i}")
        ev.add("summary", course.title)
        ev.add("dtstart", one.start.replace(tzinfo=tz))
        ev.add("dtend", one.end.replace(tzinfo=tz))
        cal.add_component(ev)
    if course.ical:
        for ev in icalendar.Calendar.from_ical(course.ical).walk("VEVENT"):
            cal.add_component(ev)
    return cal


def _aware(value, tz: tzinfo) -> datetime:
    if not isinstance(value, datetime):  # an all-day event: midnight local
        value = datetime(value.year, value.month, value.day)
    if value.tzinfo is None:
        value = value.replace(tzinfo=tz)
    return value.astimezone(timezone.utc)


def sessions_between(
    course: Course, start: datetime, end: datetime, tz: tzinfo = timezone.utc
) -> list[tuple[datetime, datetime]]:
    """The course's sessions overlapping ``[start, end)`` (aware datetimes), as sorted
    ``(start, end)`` pairs in UTC. A session without an end lasts one hour."""
    if not (course.weekly or course.dates or course.ical):
        return []
    cal = to_calendar(course, tz)
    found = set()
    for ev in recurring_ical_events.of(cal).between(start, end):
        s = _aware(ev["DTSTART"].dt, tz)
        e = _aware(ev["DTEND"].dt, tz) if ev.get("DTEND") is not None else s + timedelta(hours=1)
        found.add((s, e))
    return sorted(found)


def next_session(
    course: Course, now: datetime, tz: tzinfo = timezone.utc, *, horizon_days: int = 400
) -> tuple[datetime, datetime] | None:
    """The session running at ``now`` or the next one within ``horizon_days``, else ``None``."""
    for s, e in sessions_between(course, now, now + timedelta(days=horizon_days), tz):
        if e > now:
            return s, e
    return None

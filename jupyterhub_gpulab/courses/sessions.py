"""A course's class sessions as time windows: weekly rules, one-off dates and iCal, all expanded by
``recurring-ical-events`` over one ``icalendar`` calendar (no date arithmetic of our own).

:func:`sessions_between` is the function other parts of gpulab (pre-start, reservations) call::

    sessions_between(course, start, end, tz) -> [(session_start, session_end), ...]

with timezone-aware UTC datetimes, sorted, de-duplicated. Weekly rules and one-off dates are
wall-clock times in ``tz`` (``c.GPULab.quota_timezone``), so a 10:00 class stays at 10:00 across a
daylight-saving change.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone, tzinfo

import icalendar
import recurring_ical_events

from .model import DAYS, Course

__all__ = ["check_ical", "next_session", "sessions_between", "to_calendar"]

_BYDAY = {d: d[:2].upper() for d in DAYS}
log = logging.getLogger("gpulab.courses")

#: The most sessions one expansion yields: a course's rules are expanded on request (the course
#: and user pages, the schedule's passes), so a rule that fires every second must stop somewhere.
#: Two classes a day for 400 days is 800.
MAX_SESSIONS = 1000
#: Recurrence frequencies a class cannot have (an iCal RRULE with them is refused).
_TOO_OFTEN = {"SECONDLY", "MINUTELY", "HOURLY"}
#: How far ahead the pages look for a course's next session (days).
HORIZON_DAYS = 400


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
        rules = ev.get("RRULE") or []
        for r in rules if isinstance(rules, list) else [rules]:
            freq = {str(f).upper() for f in r.get("FREQ", [])}
            if freq & _TOO_OFTEN:
                return (
                    f"an event repeats {'/'.join(sorted(freq)).lower()}: class sessions repeat "
                    "daily at most (FREQ=DAILY, WEEKLY, MONTHLY or YEARLY)"
                )
    now = datetime.now(timezone.utc)
    try:
        many = len(
            _expand(cal, now, now + timedelta(days=HORIZON_DAYS), timezone.utc, MAX_SESSIONS + 1)
        )
    except Exception as e:  # a rule the expander cannot read
        return f"its events cannot be expanded ({str(e)[:120]})"
    if many > MAX_SESSIONS:
        return (
            f"it holds more than {MAX_SESSIONS} sessions in the next {HORIZON_DAYS} days; "
            "a course may have at most that many"
        )
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
    ``(start, end)`` pairs in UTC. A session without an end lasts one hour. At most
    :data:`MAX_SESSIONS` (the first ones; a warning is logged when a record holds more: one
    saved before :func:`check_ical` refused such rules)."""
    if not (course.weekly or course.dates or course.ical):
        return []
    found = _expand(to_calendar(course, tz), start, end, tz, MAX_SESSIONS + 1)
    if len(found) > MAX_SESSIONS:
        log.warning(
            "Course %s: more than %d sessions from %s; the rest are ignored",
            course.slug,
            MAX_SESSIONS,
            start,
        )
    return sorted(found)[:MAX_SESSIONS]


def _expand(
    cal, start: datetime, end: datetime, tz: tzinfo, most: int
) -> set[tuple[datetime, datetime]]:
    """The first ``most`` sessions of ``cal`` overlapping ``[start, end)``, expanded lazily in
    start order (``after()`` includes sessions in progress at ``start``)."""
    found: set[tuple[datetime, datetime]] = set()
    for ev in recurring_ical_events.of(cal).after(start):
        s = _aware(ev["DTSTART"].dt, tz)
        if s >= end or len(found) >= most:
            break
        e = _aware(ev["DTEND"].dt, tz) if ev.get("DTEND") is not None else s + timedelta(hours=1)
        if e > start:
            found.add((s, e))
    return found


def next_session(
    course: Course, now: datetime, tz: tzinfo = timezone.utc, *, horizon_days: int = HORIZON_DAYS
) -> tuple[datetime, datetime] | None:
    """The session running at ``now`` or the next one within ``horizon_days``, else ``None``."""
    for s, e in sessions_between(course, now, now + timedelta(days=horizon_days), tz):
        if e > now:
            return s, e
    return None

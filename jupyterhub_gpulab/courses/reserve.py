"""A course's reservations: one ledger booking per class session, so that at session time its
roster and staff find their seats (the rule itself is the claim's, :mod:`..ledger.placement`).

A course with ``reserve = N`` books, for every session of the coming ``horizon_days``, ``N``
slices of its profile (:attr:`~.model.Course.profile`) for the course servers (the named server
``<slug>``) of its roster and staff (a member's other servers count as anyone's), from ``reserve_lead_minutes`` (default ``lead_minutes``: when pre-start begins) before
the session until it ends; what
nobody claimed ``grace_minutes`` after the start returns to everyone. Each booking's ``ref`` is
``course:<slug>/<session start, UTC ISO>``, so booking again is idempotent.

    specs = booking_specs(course, profile, now, tz, horizon_days=120)
    book_course(ledger, course, profile, now=now, tz=tz)    # all sessions, or BookingConflict
    problems = sync_course(ledger, course, profile, now=now, tz=tz)   # what fits; the rest named

Blocking (the ledger): call through :func:`jupyterhub_gpulab.ledger.aio.call`.
"""

from __future__ import annotations

from datetime import datetime, timedelta, tzinfo

from ..ledger import Booking, BookingConflict
from .model import Course, CourseError
from .sessions import sessions_between

__all__ = [
    "HORIZON_DAYS",
    "book_course",
    "booking_specs",
    "fit_problems",
    "prefix_of",
    "sync_course",
]

#: How far ahead sessions are booked by default (days): about a term.
HORIZON_DAYS = 120


def prefix_of(slug: str) -> str:
    """The ``ref`` prefix of course ``slug``'s bookings."""
    return f"course:{slug}/"


def fit_problems(course: Course, profile) -> list[str]:
    """What makes ``course`` unworkable with ``profile`` (the lab's Profile of
    :attr:`Course.profile`, ``None`` when it is not the lab's): seats of a profile without a
    GPU slice, and a pre-start lead the culler would undo (a server started ``lead_minutes``
    before the session sits idle until it starts, so the lead must be shorter than the
    profile's ``gpu_idle_timeout`` and ``idle_timeout``, else the culler stops pre-started
    servers before the students arrive)."""
    if profile is None:
        return []
    problems = []
    if course.reserve > 0 and not profile.slice.wants_gpu:
        problems.append(
            f"course {course.slug!r}: 'reserve' keeps GPU slices, but profile "
            f"{course.profile!r} holds none; pick a GPU profile first or set reserve to 0"
        )
    lead_s = course.lead_minutes * 60 if course.prestart else 0
    for name in ("gpu_idle_timeout", "idle_timeout"):
        limit = getattr(profile, name, None)
        if limit and lead_s >= limit and (name == "idle_timeout" or profile.slice.wants_gpu):
            problems.append(
                f"course {course.slug!r}: 'lead_minutes' {course.lead_minutes} is not shorter "
                f"than profile {profile.slug!r}'s {name} ({limit // 60} min): the culler would "
                "stop pre-started servers before the session; shorten the lead"
            )
    return problems


def booking_specs(
    course: Course, profile, now: datetime, tz: tzinfo, *, horizon_days: int = HORIZON_DAYS
) -> list[dict]:
    """The bookings ``course`` wants for its sessions ending after ``now`` and starting within
    ``horizon_days`` (keyword arguments of :meth:`~..ledger.Ledger.book`); ``profile``: the
    :class:`~..lab.profile.Profile` of :attr:`Course.profile` (``None`` when it is not the
    lab's). Raises :class:`CourseError` when seats are asked of a profile without a GPU slice."""
    if course.reserve <= 0:
        return []
    if profile is None or not profile.slice.wants_gpu:
        raise CourseError(
            fit_problems(course, profile)
            or f"course {course.slug!r}: profile {course.profile!r} is not one of the lab's"
        )
    lead = timedelta(minutes=course.seats_lead_minutes)
    found = sessions_between(
        course, now - timedelta(days=1), now + timedelta(days=horizon_days), tz
    )
    specs, before = [], None  # the previous session's end
    for start, end in found:
        # back to back: a session's lead begins no earlier than the previous one's end, so one
        # roster's seats are kept once, not twice (two 1-hour classes at 10:00 and 11:00 with a
        # 60-min lead were refused as needing 2 × reserve at 10:45)
        lead_s = int(lead.total_seconds())
        if before is not None and start - lead < before <= start:
            lead_s = int((start - before).total_seconds())
        before = end if before is None else max(before, end)
        if end <= now:
            continue
        specs.append(
            dict(
                holder=course.slug,
                groups=[course.roster_group, course.staff_group],
                profile=profile.slug,
                request=profile.slice,
                count=course.reserve,
                starts_at=start,
                ends_at=end,
                lead_s=lead_s,
                grace_s=course.grace_minutes * 60,
                ref=prefix_of(course.slug) + start.isoformat(),
                server_name=course.server_name,
            )
        )
    return specs


def book_course(
    ledger, course: Course, profile, *, now: datetime, tz: tzinfo, **kw
) -> list[Booking]:
    """Book every session of ``course`` (replacing its earlier bookings), all or none: raises
    :class:`~..ledger.BookingConflict` naming the first session the lab cannot hold together
    with the other bookings, and then nothing changes."""
    specs = booking_specs(course, profile, now, tz, **kw)
    return ledger.replace_bookings(prefix_of(course.slug), specs)


def sync_course(ledger, course: Course, profile, *, now: datetime, tz: tzinfo, **kw) -> list[str]:
    """Book what fits of ``course``'s sessions (a course from the config, or sessions entering
    the horizon), cancel bookings of sessions it no longer has; the conflicts, one message per
    session that could not be booked (``[]`` when everything is booked)."""
    try:
        specs = booking_specs(course, profile, now, tz, **kw)
    except CourseError as e:
        ledger.replace_bookings(prefix_of(course.slug), [])
        return list(e.errors)
    try:
        ledger.replace_bookings(prefix_of(course.slug), specs)
        return []
    except BookingConflict:
        pass
    problems = []
    wanted = {s["ref"] for s in specs}
    for b in ledger.bookings(now):
        if (b.ref or "").startswith(prefix_of(course.slug)) and b.ref not in wanted:
            ledger.cancel_booking(b.id)
    for spec in specs:
        try:
            ledger.book(**spec)
        except BookingConflict as e:
            ledger.cancel_booking(ref=spec["ref"])
            problems.append(e.message)
    return problems

"""``gpulab check-config``'s check of the MIG layout schedule (``c.GPULab.mig_schedule``) against
the sessions booked: the ledger's bookings (when the ledger exists) and the bookings the declared
courses (``c.GPULabCourses.courses``) make for their coming sessions. A schedule that leaves a
booked session without its slices is an error naming both
(:func:`~..inventory.layoutplan.conflicts`)."""

from __future__ import annotations

from sqlalchemy.exc import SQLAlchemyError
from traitlets.config import Config

from .. import clock
from ..inventory.layoutplan import conflicts
from ..lab.config import GPULab, Lab
from ..ledger import Booking

__all__ = ["schedule_errors"]


def schedule_errors(config: Config, gl: GPULab, lab: Lab) -> list[str]:
    """The conflicts of ``lab.schedule`` with every booked session, as check-config errors."""
    if not lab.schedule.entries:
        return []
    now = clock.utcnow()
    found = {b.ref or f"booking {b.id}": b for b in _course_bookings(config, lab, now)}
    for b in _ledger_bookings(gl):
        found.setdefault(b.ref or f"booking {b.id}", b)  # the ledger's own, where a course has none
    booked = sorted(found.values(), key=lambda b: b.starts_at)
    return [f"c.GPULab.{m}" for m in conflicts(lab.schedule, booked, now)]


def _course_bookings(config: Config, lab: Lab, now) -> list[Booking]:
    """The bookings the declared courses make (their own problems are the courses' check's)."""
    from ..courses.config import GPULabCourses
    from ..courses.model import CourseError
    from ..courses.reserve import booking_specs

    try:
        courses = GPULabCourses(config=config).declared({p.slug for p in lab.profiles})
    except (CourseError, ValueError):
        return []
    out = []
    for c in courses:
        try:
            specs = booking_specs(c, lab.profile(c.profile), now, lab.tz)
        except CourseError:
            continue
        for s in specs:
            out.append(
                Booking(
                    id=0,
                    holder=s["holder"],
                    ref=s["ref"],
                    groups=tuple(s["groups"]),
                    profile=s["profile"],
                    request=s["request"],
                    count=s["count"],
                    starts_at=s["starts_at"],
                    ends_at=s["ends_at"],
                    lead_s=s["lead_s"],
                    grace_s=s["grace_s"],
                    server_name=s["server_name"],
                )  # fmt: skip
            )
    return out


def _ledger_bookings(gl: GPULab) -> list[Booking]:
    """The ledger's bookings, when it exists with the current schema (else none)."""
    from ..ledger import Ledger, SchemaOutOfDate, peek_identity

    try:
        if peek_identity(gl.db_url) is None:
            return []
        ledger = Ledger(gl.db_url)
    except (SchemaOutOfDate, OSError, SQLAlchemyError):
        return []
    try:
        return ledger.bookings()
    finally:
        ledger.close()

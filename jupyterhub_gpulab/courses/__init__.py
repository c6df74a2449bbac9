"""Courses: a class's roster, staff, profile(s), content and sessions, and the service's
pre-start, distribute and collect for them.

For other parts of gpulab (reservations, issue 12), the plain functions are::

    from jupyterhub_gpulab.courses import sessions_between, CourseStore
    sessions_between(course, start, end, tz) -> [(start, end), ...]   # aware UTC datetimes
    course.roster_group, course.staff_group, course.profiles          # groups, profile slugs
    CourseStore(ledger.engine).all() -> [StoredCourse(course=Course, ...)]

Modules: :mod:`.model` (record), :mod:`.parse` (validation), :mod:`.sessions` (weekly / dates / iCal),
:mod:`.store` (ledger tables, audit), :mod:`.roster` (hub groups, CSV), :mod:`.content`
(nbgitpuller), :mod:`.hubhook` (in the hub: pre-spawn hook, roles), :mod:`.prestart` and
:mod:`.manager` (in the service).
"""

from .model import Course, CourseError
from .parse import parse_course, parse_courses
from .sessions import next_session, sessions_between
from .store import CourseStore

__all__ = [
    "Course",
    "CourseError",
    "CourseStore",
    "next_session",
    "parse_course",
    "parse_courses",
    "sessions_between",
]

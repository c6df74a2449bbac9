"""A course record: pure data, no I/O.

A course is declared in ``c.GPULab.courses`` (a list of dicts) or created by an admin in the
service; both go through :func:`~.parse.parse_course`, which raises :class:`CourseError`
listing every problem (each naming the field and the accepted form). Example::

    {"slug": "ml101", "title": "Machine learning 101", "term": "2026-fall",
     "roster_group": "ml101", "staff_group": "ml101-staff", "profiles": ["cpu"],
     "content": [{"repo": "https://git.example.edu/ml101/notebooks.git", "branch": "main"}],
     "sessions": {"weekly": [{"days": ["mon", "wed"], "start": "10:00", "end": "11:30",
                              "from": "2026-09-07", "until": "2026-12-18"}],
                  "dates": [{"start": "2026-10-02T14:00", "end": "2026-10-02T16:00"}],
                  "ical": "BEGIN:VCALENDAR…"},
     "lead_minutes": 15, "prestart": True,
     "reserve": 12, "reserve_lead_minutes": 60, "grace_minutes": 10,
     "assignments": [{"name": "hw1", "due": "2026-10-09T23:59"}],
     "gpu_hours": 400, "collect_max_bytes": 20_000_000}

Every roster member's course server is started ``lead_minutes`` before each session (unless
``prestart`` is false). ``reserve`` slices of the course's profile are kept for its roster and
staff from ``reserve_lead_minutes`` (default: ``lead_minutes``; never less) before each session
until it ends; what nobody claimed ``grace_minutes`` after
the start returns to everyone (:mod:`.reserve`). Each assignment with a ``due`` time is collected
by the service once at that time (:mod:`.schedule`); ``gpu_hours`` caps the GPU-hours all course
servers may use together over the term (:mod:`.budget`).

Times are wall-clock times in the lab's time zone (``c.GPULab.quota_timezone``). Each student's
course server is the named server :attr:`Course.server_name` (the slug, valid under JupyterHub 6's
naming rules), and its content lands in ``~/<dir>`` of the student's home.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import ConfigError
from .records import (
    DAYS,
    Assignment,
    ContentSource,
    OneOff,
    WeeklyRule,
    shared_folder_problem,
)

__all__ = [
    "Assignment",
    "ContentSource",
    "Course",
    "CourseError",
    "OneOff",
    "WeeklyRule",
    "shared_folder_problem",
    "DAYS",
]

#: Default bound on one student's collected assignment (bytes).
COLLECT_MAX_BYTES = 50 * 1024**2


class CourseError(ConfigError):
    """A course record is invalid: ``errors`` lists every problem, each naming its field."""


@dataclass(frozen=True)
class Course:
    slug: str
    title: str
    term: str = ""
    roster_group: str = ""
    staff_group: str = ""
    profiles: tuple[str, ...] = ()
    content: tuple[ContentSource, ...] = ()
    shared_folder: str = ""
    #: admin-only: also mount each student's personal home at ~/home in their course server
    mount_home: bool = False
    weekly: tuple[WeeklyRule, ...] = ()
    dates: tuple[OneOff, ...] = ()
    ical: str = ""
    lead_minutes: int = 15
    gpu_hours: float | None = None
    collect_max_bytes: int = COLLECT_MAX_BYTES
    prestart: bool = True
    reserve: int = 0
    reserve_lead_minutes: int | None = None
    grace_minutes: int = 10
    assignments: tuple[Assignment, ...] = ()
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def server_name(self) -> str:
        """Each student's course server (a JupyterHub named server)."""
        return self.slug

    @property
    def seats_lead_minutes(self) -> int:
        """Minutes before a session from which its reserved seats are kept."""
        return self.lead_minutes if self.reserve_lead_minutes is None else self.reserve_lead_minutes

    @property
    def profile(self) -> str:
        """The profile slug pre-start and a start without options use."""
        return self.profiles[0] if self.profiles else ""

    def to_dict(self) -> dict[str, Any]:
        """The record as :func:`~.parse.parse_course` reads it (JSON-ready)."""
        d = asdict(self)
        d.pop("extra")
        d["profiles"] = list(self.profiles)
        d["content"] = [asdict(c) for c in self.content]
        d["assignments"] = [
            {"name": a.name, "due": _minutes(a.due) if a.due else None} for a in self.assignments
        ]
        d["sessions"] = {
            "weekly": [
                {
                    "days": list(r.days),
                    "start": r.start.strftime("%H:%M"),
                    "end": r.end.strftime("%H:%M"),
                    "from": r.first.isoformat(),
                    "until": r.last.isoformat(),
                }
                for r in self.weekly
            ],
            "dates": [
                {
                    "start": _minutes(o.start),
                    "end": _minutes(o.end),
                }
                for o in self.dates
            ],
            "ical": self.ical,
        }
        for k in ("weekly", "dates", "ical"):
            d.pop(k)
        return d


def _minutes(t) -> str:
    """``2026-10-02T14:00`` (seconds only when the time has them, so a record round-trips)."""
    return t.isoformat(timespec="seconds" if t.second or t.microsecond else "minutes")

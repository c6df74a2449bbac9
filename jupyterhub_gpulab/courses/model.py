"""A course record and its validation: pure data, no I/O.

A course is declared in ``c.GPULab.courses`` (a list of dicts) or created by an admin in the
service; both go through :func:`parse_course`, which raises :class:`CourseError` listing every
problem (each naming the field and the accepted form). Example::

    {"slug": "ml101", "title": "Machine learning 101", "term": "2026-fall",
     "roster_group": "ml101", "staff_group": "ml101-staff", "profiles": ["cpu"],
     "content": [{"repo": "https://git.example.edu/ml101/notebooks.git", "branch": "main"}],
     "sessions": {"weekly": [{"days": ["mon", "wed"], "start": "10:00", "end": "11:30",
                              "from": "2026-09-07", "until": "2026-12-18"}],
                  "dates": [{"start": "2026-10-02T14:00", "end": "2026-10-02T16:00"}],
                  "ical": "BEGIN:VCALENDAR…"},
     "lead_minutes": 15, "gpu_hours": 400, "collect_max_bytes": 20_000_000}

Times are wall-clock times in the lab's time zone (``c.GPULab.quota_timezone``). Each student's
course server is the named server :attr:`Course.server_name` (the slug, valid under JupyterHub 6's
naming rules), and its content lands in ``~/<dir>`` of the student's home.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, time
from typing import Any
from urllib.parse import urlparse

from ..errors import ConfigError

__all__ = [
    "ContentSource",
    "Course",
    "CourseError",
    "OneOff",
    "WeeklyRule",
    "parse_course",
    "parse_courses",
    "DAYS",
]

#: Slugs: lower-case letters, digits and ``-``, 2–40 characters, starting with a letter; a valid
#: JupyterHub server name, Docker name part and group name.
SLUG = re.compile(r"^[a-z][a-z0-9-]{1,39}$")
#: Group names: JupyterHub accepts most text; we keep to what fits a URL path and a scope filter.
GROUP = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$")
#: A content folder in the student's home: one path component.
DIR = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
#: Branch names (git check-ref-format, simplified).
BRANCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$")
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
KEYS = {
    "slug",
    "title",
    "term",
    "roster_group",
    "staff_group",
    "profiles",
    "content",
    "shared_folder",
    "sessions",
    "lead_minutes",
    "gpu_hours",
    "collect_max_bytes",
}
#: Default bound on one student's collected assignment (bytes).
COLLECT_MAX_BYTES = 50 * 1024**2


class CourseError(ConfigError):
    """A course record is invalid: ``errors`` lists every problem, each naming its field."""


@dataclass(frozen=True)
class ContentSource:
    """A git repository pulled into ``~/<dir>`` with nbgitpuller at every start."""

    repo: str
    branch: str = "main"
    dir: str = ""


@dataclass(frozen=True)
class WeeklyRule:
    """Sessions on ``days`` from ``start`` to ``end`` (lab-local wall-clock), every week from
    ``first`` to ``last`` (dates, inclusive)."""

    days: tuple[str, ...]
    start: time
    end: time
    first: date
    last: date


@dataclass(frozen=True)
class OneOff:
    """One session, ``[start, end)`` in lab-local wall-clock time (naive datetimes)."""

    start: datetime
    end: datetime


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
    weekly: tuple[WeeklyRule, ...] = ()
    dates: tuple[OneOff, ...] = ()
    ical: str = ""
    lead_minutes: int = 15
    gpu_hours: float | None = None
    collect_max_bytes: int = COLLECT_MAX_BYTES
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def server_name(self) -> str:
        """Each student's course server (a JupyterHub named server)."""
        return self.slug

    @property
    def profile(self) -> str:
        """The profile slug pre-start and a start without options use."""
        return self.profiles[0] if self.profiles else ""

    def to_dict(self) -> dict[str, Any]:
        """The record as :func:`parse_course` reads it (JSON-ready)."""
        d = asdict(self)
        d.pop("extra")
        d["profiles"] = list(self.profiles)
        d["content"] = [asdict(c) for c in self.content]
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
                    "start": o.start.isoformat(timespec="minutes"),
                    "end": o.end.isoformat("T", "minutes"),
                }
                for o in self.dates
            ],
            "ical": self.ical,
        }
        for k in ("weekly", "dates", "ical"):
            d.pop(k)
        return d


def _text(raw: dict, key: str, errors: list[str], where: str, *, default: str = "") -> str:
    v = raw.get(key, default)
    if v is None:
        return default
    if not isinstance(v, str):
        errors.append(f"{where}: {key!r} must be a string, not {type(v).__name__}")
        return default
    return v.strip()


def _parse_time(v: object, what: str, errors: list[str]) -> time | None:
    try:
        return time.fromisoformat(str(v)) if isinstance(v, str) else None
    except ValueError:
        pass
    errors.append(f"{what} must be a time such as '10:00', not {v!r}")
    return None


def _parse_date(v: object, what: str, errors: list[str]) -> date | None:
    try:
        if isinstance(v, str):
            return date.fromisoformat(v)
    except ValueError:
        pass
    errors.append(f"{what} must be a date such as '2026-09-07', not {v!r}")
    return None


def _parse_local(v: object, what: str, errors: list[str]) -> datetime | None:
    try:
        if isinstance(v, str):
            dt = datetime.fromisoformat(v)
            if dt.tzinfo is None:
                return dt
            errors.append(f"{what}: give the lab's local time without an offset, not {v!r}")
            return None
    except ValueError:
        pass
    errors.append(f"{what} must be a local date and time such as '2026-10-02T14:00', not {v!r}")
    return None


def _weekly(raw: object, where: str, errors: list[str]) -> WeeklyRule | None:
    if not isinstance(raw, dict):
        errors.append(f"{where} must be a dict with days, start, end, from, until")
        return None
    unknown = set(raw) - {"days", "start", "end", "from", "until"}
    if unknown:
        errors.append(f"{where}: unknown keys {sorted(unknown)}")
    days = raw.get("days")
    if isinstance(days, str):
        days = [days]
    ok_days = (
        isinstance(days, list)
        and days
        and all(isinstance(d, str) and d.lower()[:3] in DAYS for d in days)
    )
    if not ok_days:
        errors.append(f"{where}: 'days' must list days such as ['mon', 'wed'], not {days!r}")
    n = len(errors)
    start = _parse_time(raw.get("start"), f"{where}.start", errors)
    end = _parse_time(raw.get("end"), f"{where}.end", errors)
    first = _parse_date(raw.get("from"), f"{where}.from", errors)
    last = _parse_date(raw.get("until"), f"{where}.until", errors)
    if len(errors) > n or not ok_days:
        return None
    if end <= start:
        errors.append(f"{where}: end {end:%H:%M} must be after start {start:%H:%M}")
        return None
    if last < first:
        errors.append(f"{where}: 'until' {last} is before 'from' {first}")
        return None
    wanted = {DAYS.index(d.lower()[:3]) for d in days}
    span = (last - first).days + 1
    if not any(((first.weekday() + i) % 7) in wanted for i in range(min(span, 7))):
        errors.append(
            f"{where} never fires: no {', '.join(sorted({d.lower()[:3] for d in days}))} "
            f"between {first} and {last}"
        )
        return None
    ordered = tuple(d for d in DAYS if DAYS.index(d) in wanted)
    return WeeklyRule(days=ordered, start=start, end=end, first=first, last=last)


def _one_off(raw: object, where: str, errors: list[str]) -> OneOff | None:
    if not isinstance(raw, dict):
        errors.append(f"{where} must be a dict with start and end")
        return None
    n = len(errors)
    start = _parse_local(raw.get("start"), f"{where}.start", errors)
    end = _parse_local(raw.get("end"), f"{where}.end", errors)
    if len(errors) > n:
        return None
    if end <= start:
        errors.append(f"{where}: end {end} must be after start {start}")
        return None
    return OneOff(start=start, end=end)


def _content(raw: object, where: str, errors: list[str]) -> ContentSource | None:
    if isinstance(raw, str):
        raw = {"repo": raw}
    if not isinstance(raw, dict):
        errors.append(f"{where} must be a dict with repo, branch, dir")
        return None
    unknown = set(raw) - {"repo", "branch", "dir"}
    if unknown:
        errors.append(f"{where}: unknown keys {sorted(unknown)}")
    repo = raw.get("repo")
    u = urlparse(repo) if isinstance(repo, str) else None
    if u is None or u.scheme not in ("https", "http", "git", "ssh") or not u.netloc:
        errors.append(
            f"{where}: 'repo' must be a git URL (https://, git:// or ssh://), not {repo!r}"
        )
        return None
    if u.password:
        errors.append(f"{where}: 'repo' must not carry a password; use a deploy key or token")
        return None
    branch = raw.get("branch") or "main"
    if not isinstance(branch, str) or not BRANCH.match(branch) or ".." in branch:
        errors.append(f"{where}: 'branch' {branch!r} is not a branch name")
        return None
    default_dir = u.path.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git") or "course"
    d = raw.get("dir") or default_dir
    if not isinstance(d, str) or not DIR.match(d) or d in (".", ".."):
        errors.append(f"{where}: 'dir' {d!r} must be one folder name (letters, digits, . _ -)")
        return None
    return ContentSource(repo=repo, branch=branch, dir=d)


def parse_course(raw: object, *, profiles: set[str] | None = None, where: str = "") -> Course:
    """A :class:`Course` from a dict (module docstring). ``profiles``: the lab's profile slugs,
    to check the course's against. Raises :class:`CourseError` listing every problem."""
    errors: list[str] = []
    if not isinstance(raw, dict):
        raise CourseError(f"{where or 'course'} must be a dict, not {type(raw).__name__}")
    slug = raw.get("slug")
    where = where or f"course {slug!r}"
    if not isinstance(slug, str) or not SLUG.match(slug):
        errors.append(
            f"{where}: 'slug' must be 2-40 lower-case letters, digits or '-', starting with a "
            f"letter (e.g. 'ml101'), not {slug!r}"
        )
        slug = "invalid"
    unknown = sorted(set(raw) - KEYS)
    if unknown:
        errors.append(f"{where}: unknown keys {unknown}; a course may hold {sorted(KEYS)}")
    title = _text(raw, "title", errors, where) or slug
    term = _text(raw, "term", errors, where)
    roster = _text(raw, "roster_group", errors, where) or slug
    staff = _text(raw, "staff_group", errors, where) or f"{slug}-staff"
    for key, g in (("roster_group", roster), ("staff_group", staff)):
        if not GROUP.match(g):
            errors.append(f"{where}: {key} {g!r} is not a group name (letters, digits, . _ @ -)")
    if roster == staff:
        errors.append(f"{where}: the roster group and the staff group must differ ({roster!r})")
    profs = raw.get("profiles") or []
    if isinstance(profs, str):
        profs = [profs]
    if not isinstance(profs, list) or not all(isinstance(p, str) for p in profs):
        errors.append(f"{where}: 'profiles' must be a list of profile slugs")
        profs = []
    if profiles is not None:
        for p in profs:
            if p not in profiles:
                errors.append(f"{where}: profile {p!r} is not one of the lab's: {sorted(profiles)}")
    content_raw = raw.get("content") or []
    if not isinstance(content_raw, list):
        errors.append(f"{where}: 'content' must be a list of repositories")
        content_raw = []
    content = [_content(c, f"{where}: content[{i}]", errors) for i, c in enumerate(content_raw)]
    dirs = [c.dir for c in content if c]
    if len(dirs) != len(set(dirs)):
        errors.append(f"{where}: two content sources use the same folder: {dirs}")
    sessions = raw.get("sessions") or {}
    if not isinstance(sessions, dict) or set(sessions) - {"weekly", "dates", "ical"}:
        errors.append(f"{where}: 'sessions' must be a dict of weekly, dates, ical")
        sessions = {}
    weekly = [
        _weekly(r, f"{where}: sessions.weekly[{i}]", errors)
        for i, r in enumerate(sessions.get("weekly") or [])
    ]
    dates = [
        _one_off(r, f"{where}: sessions.dates[{i}]", errors)
        for i, r in enumerate(sessions.get("dates") or [])
    ]
    ical = sessions.get("ical") or ""
    if ical:
        from .sessions import check_ical

        problem = check_ical(ical) if isinstance(ical, str) else "it must be a string"
        if problem:
            errors.append(f"{where}: sessions.ical: {problem}")
    lead = raw.get("lead_minutes", 15)
    if not isinstance(lead, int) or isinstance(lead, bool) or not 0 <= lead <= 24 * 60:
        errors.append(f"{where}: 'lead_minutes' must be whole minutes from 0 to 1440, not {lead!r}")
    budget = raw.get("gpu_hours")
    if budget is not None and (
        not isinstance(budget, (int, float)) or isinstance(budget, bool) or budget < 0
    ):
        errors.append(f"{where}: 'gpu_hours' must be a number of GPU-hours >= 0, not {budget!r}")
    cmax = raw.get("collect_max_bytes", COLLECT_MAX_BYTES)
    if not isinstance(cmax, int) or isinstance(cmax, bool) or cmax <= 0:
        errors.append(f"{where}: 'collect_max_bytes' must be a positive number of bytes")
    shared = _text(raw, "shared_folder", errors, where)
    if shared and not shared.startswith("/"):
        errors.append(f"{where}: 'shared_folder' must be an absolute host path, not {shared!r}")
    if errors:
        raise CourseError(errors)
    return Course(
        slug=slug,
        title=title,
        term=term,
        roster_group=roster,
        staff_group=staff,
        profiles=tuple(profs),
        content=tuple(content),
        shared_folder=shared,
        weekly=tuple(weekly),
        dates=tuple(dates),
        ical=ical,
        lead_minutes=lead,
        gpu_hours=float(budget) if budget is not None else None,
        collect_max_bytes=cmax,
    )


def parse_courses(raw: object, *, profiles: set[str] | None = None) -> list[Course]:
    """Every course of ``c.GPULab.courses``; :class:`CourseError` lists all problems, including
    two courses with one slug."""
    if not isinstance(raw, list):
        raise CourseError("c.GPULab.courses must be a list of dicts")
    errors: list[str] = []
    courses: list[Course] = []
    for i, r in enumerate(raw):
        try:
            courses.append(parse_course(r, profiles=profiles, where=f"courses[{i}]"))
        except CourseError as e:
            errors.extend(e.errors)
    seen: set[str] = set()
    for c in courses:
        if c.slug in seen:
            errors.append(f"courses: two courses have the slug {c.slug!r}")
        seen.add(c.slug)
    if errors:
        raise CourseError(errors)
    return courses

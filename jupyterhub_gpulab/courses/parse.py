"""Reading a course record: :func:`parse_course` checks a dict (declared in ``c.GPULab.courses``
or sent by staff or an admin to the service) field by field into a :class:`~.model.Course`, and
raises :class:`~.model.CourseError` listing every problem, each naming the field and the accepted
form. The record's shape is described in :mod:`.model`. Pure logic, no I/O.
"""

from __future__ import annotations

import math
import re

from .model import COLLECT_MAX_BYTES, Course, CourseError
from .records import (
    YEARS,
    parse_assignment,
    parse_content,
    parse_one_off,
    parse_weekly,
    shared_folder_problem,
)
from .sessions import check_ical

__all__ = ["KEYS", "parse_course", "parse_courses", "split_courses"]

#: Slugs: lower-case letters, digits and ``-``, 2–40 characters, starting with a letter; a valid
#: JupyterHub server name, Docker name part and group name.
SLUG = re.compile(r"^[a-z][a-z0-9-]{1,39}$")
#: Group names: JupyterHub accepts most text; we keep to what fits a URL path and a scope filter.
GROUP = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$")
KEYS = {
    "slug",
    "title",
    "term",
    "roster_group",
    "staff_group",
    "profiles",
    "content",
    "shared_folder",
    "mount_home",
    "sessions",
    "lead_minutes",
    "gpu_hours",
    "collect_max_bytes",
    "prestart",
    "reserve",
    "reserve_lead_minutes",
    "grace_minutes",
    "assignments",
}
#: The largest ``collect_max_bytes`` a course may set (bytes): the service reads each submission
#: into its memory.
COLLECT_MAX_BYTES_LIMIT = 1024**3
#: The largest course GPU-hour budget (a year of 100 GPUs, around the clock).
MAX_GPU_HOURS = 1_000_000


#: The longest text field of a course (title, term, groups, shared folder), in characters.
MAX_TEXT = 255


def _text(raw: dict, key: str, errors: list[str], where: str, *, default: str = "") -> str:
    v = raw.get(key, default)
    if v is None:
        return default
    if not isinstance(v, str):
        errors.append(f"{where}: {key!r} must be a string, not {type(v).__name__}")
        return default
    if len(v.strip()) > MAX_TEXT:
        errors.append(f"{where}: {key!r} has {len(v.strip())} characters; at most {MAX_TEXT}")
        return default
    return v.strip()


def parse_course(
    raw: object,
    *,
    profiles: set[str] | None = None,
    shared_root: str | None = None,
    where: str = "",
    years: tuple[int, int] | None = YEARS,
) -> Course:
    """A :class:`Course` from a dict (module docstring). ``profiles``: the lab's profile slugs,
    to check the course's against; ``shared_root``: the folder a ``shared_folder`` must lie
    under (:func:`shared_folder_problem`; ``None``: not checked, for records already stored);
    ``years``: the years every date lies in (:data:`~.records.YEARS`; ``None``: not checked,
    for records already stored). Raises :class:`CourseError` listing every problem."""
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
    content = [
        parse_content(c, f"{where}: content[{i}]", errors) for i, c in enumerate(content_raw)
    ]
    dirs = [c.dir for c in content if c]
    if len(dirs) != len(set(dirs)):
        errors.append(f"{where}: two content sources use the same folder: {dirs}")
    sessions = raw.get("sessions") or {}
    if not isinstance(sessions, dict) or set(sessions) - {"weekly", "dates", "ical"}:
        errors.append(f"{where}: 'sessions' must be a dict of weekly, dates, ical")
        sessions = {}
    weekly = [
        parse_weekly(r, f"{where}: sessions.weekly[{i}]", errors, years)
        for i, r in enumerate(sessions.get("weekly") or [])
    ]
    dates = [
        parse_one_off(r, f"{where}: sessions.dates[{i}]", errors, years)
        for i, r in enumerate(sessions.get("dates") or [])
    ]
    ical = sessions.get("ical") or ""
    if ical:
        problem = check_ical(ical) if isinstance(ical, str) else "it must be a string"
        if problem:
            errors.append(f"{where}: sessions.ical: {problem}")
    lead = raw.get("lead_minutes", 15)
    if not isinstance(lead, int) or isinstance(lead, bool) or not 0 <= lead <= 24 * 60:
        errors.append(f"{where}: 'lead_minutes' must be whole minutes from 0 to 1440, not {lead!r}")
    budget = raw.get("gpu_hours")
    if budget is not None and (
        not isinstance(budget, (int, float))
        or isinstance(budget, bool)
        or not math.isfinite(budget)  # NaN passed "< 0" and was written out as bare NaN
        or not 0 <= budget <= MAX_GPU_HOURS
    ):
        errors.append(
            f"{where}: 'gpu_hours' must be a number of GPU-hours from 0 to {MAX_GPU_HOURS:,}, "
            f"not {budget!r}"
        )
    cmax = raw.get("collect_max_bytes", COLLECT_MAX_BYTES)
    if (
        not isinstance(cmax, int)
        or isinstance(cmax, bool)
        or not 0 < cmax <= COLLECT_MAX_BYTES_LIMIT
    ):
        errors.append(
            f"{where}: 'collect_max_bytes' must be a number of bytes from 1 to "
            f"{COLLECT_MAX_BYTES_LIMIT:,} (a collect holds each submission in memory)"
        )
    reserve = raw.get("reserve", 0)
    if not isinstance(reserve, int) or isinstance(reserve, bool) or not 0 <= reserve <= 10_000:
        errors.append(f"{where}: 'reserve' must be a whole number of slices >= 0, not {reserve!r}")
    prestart, mount_home = raw.get("prestart", True), raw.get("mount_home", False)
    for key, flag in (("prestart", prestart), ("mount_home", mount_home)):
        if not isinstance(flag, bool):
            errors.append(f"{where}: '{key}' must be true or false, not {flag!r}")
    seats_lead = raw.get("reserve_lead_minutes")
    if seats_lead is not None and (
        not isinstance(seats_lead, int)
        or isinstance(seats_lead, bool)
        or not 0 <= seats_lead <= 24 * 60
    ):
        errors.append(
            f"{where}: 'reserve_lead_minutes' must be whole minutes from 0 to 1440, not {seats_lead!r}"
        )
    elif seats_lead is not None and isinstance(lead, int) and seats_lead < lead:
        errors.append(
            f"{where}: 'reserve_lead_minutes' ({seats_lead}) must not be shorter than "
            f"'lead_minutes' ({lead}): servers pre-started before the seats are kept would not "
            "count as the course's"
        )
    grace = raw.get("grace_minutes", 10)
    if not isinstance(grace, int) or isinstance(grace, bool) or not 0 <= grace <= 24 * 60:
        errors.append(
            f"{where}: 'grace_minutes' must be whole minutes from 0 to 1440, not {grace!r}"
        )
    if isinstance(reserve, int) and reserve > 0 and not profs:
        errors.append(f"{where}: 'reserve' needs a profile whose slices to reserve ('profiles')")
    tasks_raw = raw.get("assignments") or []
    if not isinstance(tasks_raw, list):
        errors.append(f"{where}: 'assignments' must be a list of {{name, due}}")
        tasks_raw = []
    tasks = [
        parse_assignment(a, f"{where}: assignments[{i}]", errors, years)
        for i, a in enumerate(tasks_raw)
    ]
    names = [a.name for a in tasks if a]
    if len(names) != len(set(names)):
        errors.append(f"{where}: two assignments have the same name: {names}")
    shared = _text(raw, "shared_folder", errors, where)
    if shared and not shared.startswith("/"):
        errors.append(f"{where}: 'shared_folder' must be an absolute host path, not {shared!r}")
    elif shared and shared_root is not None:
        problem = shared_folder_problem(shared, shared_root)
        if problem:
            errors.append(f"{where}: {problem}")
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
        mount_home=mount_home,
        weekly=tuple(weekly),
        dates=tuple(dates),
        ical=ical,
        lead_minutes=lead,
        gpu_hours=float(budget) if budget is not None else None,
        collect_max_bytes=cmax,
        prestart=prestart,
        reserve=reserve,
        reserve_lead_minutes=seats_lead,
        grace_minutes=grace,
        assignments=tuple(tasks),
    )


def parse_courses(
    raw: object, *, profiles: set[str] | None = None, shared_root: str | None = None
) -> list[Course]:
    """Every course of ``c.GPULabCourses.courses`` (``profiles``, ``shared_root``: as for
    :func:`parse_course`); :class:`CourseError` lists all problems, including two courses with
    one slug."""
    courses, problems = split_courses(raw, profiles=profiles, shared_root=shared_root)
    if problems:
        raise CourseError([m for ms in problems.values() for m in ms])
    return courses


def split_courses(
    raw: object, *, profiles: set[str] | None = None, shared_root: str | None = None
) -> tuple[list[Course], dict[str, list[str]]]:
    """The valid courses of ``c.GPULabCourses.courses`` and the problems of the others, so one
    broken course never stops the lab: ``(courses, {key: [message, ...]})`` where ``key`` is
    the broken record's slug when it has a valid one, else ``courses[<index>]``. Two courses
    with one slug are a problem of that slug, and neither is among ``courses``.
    ``raw`` not a list: every course is a problem (key ``courses``)."""
    if not isinstance(raw, list):
        return [], {"courses": ["c.GPULabCourses.courses must be a list of dicts"]}
    problems: dict[str, list[str]] = {}
    courses: list[Course] = []
    for i, r in enumerate(raw):
        slug = r.get("slug") if isinstance(r, dict) else None
        key = slug if isinstance(slug, str) and SLUG.match(slug) else f"courses[{i}]"
        try:
            c = parse_course(r, profiles=profiles, shared_root=shared_root, where=f"courses[{i}]")
        except CourseError as e:
            problems.setdefault(key, []).extend(e.errors)
            continue
        if any(k.slug == c.slug for k in courses):
            problems.setdefault(c.slug, []).append(f"courses: two courses have the slug {c.slug!r}")
            continue
        courses.append(c)
    broken = set(problems)
    return [c for c in courses if c.slug not in broken], problems

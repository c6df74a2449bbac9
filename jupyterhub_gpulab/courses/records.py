"""The parts of a course record and their parsers: content sources, weekly session rules, one-off
sessions and assignments (pure data, no I/O). :mod:`.model` assembles them into a
:class:`~.model.Course`; each parser appends to ``errors`` a message naming the field and the
accepted form, and returns ``None`` for what it cannot read."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import date, datetime, time
from urllib.parse import urlparse

__all__ = [
    "Assignment",
    "parse_assignment",
    "parse_content",
    "parse_one_off",
    "parse_weekly",
    "ContentSource",
    "DAYS",
    "NAME",
    "OneOff",
    "REPO_SCHEMES",
    "shared_folder_problem",
    "WeeklyRule",
    "YEARS",
]

#: A content folder in the student's home, or an assignment's folder: one path component.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
#: Branch names (git check-ref-format, simplified).
BRANCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$")
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
#: Transports a content repository may use (README: https, git and ssh; never plain http, whose
#: requests anyone on the path can read or answer, nor file:// or ext::).
REPO_SCHEMES = ("https", "git", "ssh")
#: ``user@host:port`` of a repository URL: no spaces, quotes or shell characters.
REPO_NETLOC = re.compile(r"^[A-Za-z0-9._~%@:\[\]-]+$")


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
class Assignment:
    """An assignment: the folder ``~/assignments/<name>`` staff collect, at ``due`` (lab-local
    wall-clock, naive) by the service once, and on demand whenever staff press Collect."""

    name: str
    due: datetime | None = None


#: The years a course date may lie in: a date far outside them is a typo, and near the ends of
#: Python's calendar (0001, 9999) converting it between the lab's zone and UTC overflows.
YEARS = (2000, 2099)


def _in_years(d, v: object, what: str, errors: list[str], years: tuple[int, int] | None):
    """``d`` when its year is within ``years`` (``None``: not checked, for records already
    stored), else ``None`` with an error naming them."""
    if years is None or years[0] <= d.year <= years[1]:
        return d
    errors.append(f"{what} must lie in the years {years[0]} to {years[1]}, not {v!r}")
    return None


def _parse_time(v: object, what: str, errors: list[str]) -> time | None:
    try:
        return time.fromisoformat(str(v)) if isinstance(v, str) else None
    except ValueError:
        pass
    errors.append(f"{what} must be a time such as '10:00', not {v!r}")
    return None


def _parse_date(v: object, what: str, errors: list[str], years=YEARS) -> date | None:
    try:
        if isinstance(v, str):
            return _in_years(date.fromisoformat(v), v, what, errors, years)
    except ValueError:
        pass
    errors.append(f"{what} must be a date such as '2026-09-07', not {v!r}")
    return None


def _parse_local(v: object, what: str, errors: list[str], years=YEARS) -> datetime | None:
    try:
        if isinstance(v, str):
            dt = datetime.fromisoformat(v)
            if dt.tzinfo is None:
                return _in_years(dt, v, what, errors, years)
            errors.append(f"{what}: give the lab's local time without an offset, not {v!r}")
            return None
    except ValueError:
        pass
    errors.append(f"{what} must be a local date and time such as '2026-10-02T14:00', not {v!r}")
    return None


def parse_weekly(raw: object, where: str, errors: list[str], years=YEARS) -> WeeklyRule | None:
    """A weekly rule; ``years``: the years its dates may lie in (:data:`YEARS`; ``None``: any)."""
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
    first = _parse_date(raw.get("from"), f"{where}.from", errors, years)
    last = _parse_date(raw.get("until"), f"{where}.until", errors, years)
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


def parse_one_off(raw: object, where: str, errors: list[str], years=YEARS) -> OneOff | None:
    if not isinstance(raw, dict):
        errors.append(f"{where} must be a dict with start and end")
        return None
    n = len(errors)
    start = _parse_local(raw.get("start"), f"{where}.start", errors, years)
    end = _parse_local(raw.get("end"), f"{where}.end", errors, years)
    if len(errors) > n:
        return None
    if end <= start:
        errors.append(f"{where}: end {end} must be after start {start}")
        return None
    return OneOff(start=start, end=end)


def parse_content(raw: object, where: str, errors: list[str]) -> ContentSource | None:
    if isinstance(raw, str):
        raw = {"repo": raw}
    if not isinstance(raw, dict):
        errors.append(f"{where} must be a dict with repo, branch, dir")
        return None
    unknown = set(raw) - {"repo", "branch", "dir"}
    if unknown:
        errors.append(f"{where}: unknown keys {sorted(unknown)}")
    repo = raw.get("repo")
    try:
        u = urlparse(repo) if isinstance(repo, str) else None
        host = u.hostname if u is not None else None
        _ = u.port if u is not None else None  # raises for a port that is no port
    except ValueError:  # a malformed port or IPv6 literal
        u = host = None
    if u is None or u.scheme not in REPO_SCHEMES or not u.netloc or not host:
        errors.append(
            f"{where}: 'repo' must be a git URL (https://, git:// or ssh://), not {repo!r}"
        )
        return None
    if (
        not REPO_NETLOC.match(u.netloc)
        or host.startswith("-")
        or (u.username or "").startswith("-")
    ):
        # ssh://-oProxyCommand=… would make ssh run a command (CVE-2017-1000117)
        errors.append(
            f"{where}: 'repo' {repo!r} names no host: a host (and user) must not start with '-' "
            "nor hold spaces"
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
    if not isinstance(d, str) or not NAME.match(d) or d in (".", ".."):
        errors.append(f"{where}: 'dir' {d!r} must be one folder name (letters, digits, . _ -)")
        return None
    return ContentSource(repo=repo, branch=branch, dir=d)


def parse_assignment(raw: object, where: str, errors: list[str], years=YEARS) -> Assignment | None:
    if isinstance(raw, str):
        raw = {"name": raw}
    if not isinstance(raw, dict):
        errors.append(f"{where} must be a dict with name and due")
        return None
    unknown = set(raw) - {"name", "due"}
    if unknown:
        errors.append(f"{where}: unknown keys {sorted(unknown)}")
    name = raw.get("name")
    if not isinstance(name, str) or not NAME.match(name) or name in (".", ".."):
        errors.append(
            f"{where}: 'name' {name!r} must be one folder name under ~/assignments "
            "(letters, digits, . _ -)"
        )
        return None
    due = None
    if raw.get("due") not in (None, ""):
        due = _parse_local(raw.get("due"), f"{where}.due", errors, years)
        if due is None:
            return None
    return Assignment(name=name, due=due)


def shared_folder_problem(path: str, root: str) -> str | None:
    """Why host path ``path`` may not be a course's ``shared_folder`` under the admin's
    ``root`` (``c.GPULabCourses.shared_folder_root``), or ``None`` when it may: it must be
    absolute, have no ``..`` component, and lie under ``root`` once both are resolved (symbolic
    links followed, so a link inside the root pointing out of it is refused). ``root`` empty:
    no shared folder is allowed at all."""
    if not path.startswith("/"):
        return f"'shared_folder' must be an absolute host path, not {path!r}"
    if ".." in path.split("/"):
        return f"'shared_folder' must not contain '..' ({path!r})"
    if not root:
        return (
            "'shared_folder' is not allowed: no c.GPULabCourses.shared_folder_root is set "
            f"(an admin sets it to the host folder course folders live under), not {path!r}"
        )
    real, base = os.path.realpath(path), os.path.realpath(root)
    if real == base or os.path.commonpath([real, base]) != base:
        return (
            f"'shared_folder' must be a folder under {root} (c.GPULabCourses.shared_folder_root), "
            f"not {path!r}"
            + (f" (it resolves to {real})" if real != os.path.normpath(path) else "")
        )
    return None

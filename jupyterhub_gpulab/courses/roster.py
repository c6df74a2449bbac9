"""A course's roster: the members of its JupyterHub group, read and changed through the hub API.

:func:`roster_of` reads a roster: the members of the course's roster group, whoever fills it.
Who may change them is :func:`jupyterhub_gpulab.auth.groupsowner.groups_owner`'s answer: with an
authenticator that manages groups (campus SSO, LTI) the identity provider or LMS fills them, and
the course pages and API say so and edit nothing (:func:`set_members` is for hub-owned groups).
:func:`csv_preview` compares an uploaded CSV of usernames with the roster: added, removed, unknown;
:class:`PendingPreviews` keeps a page's preview until its Apply.
"""

from __future__ import annotations

import asyncio
import csv
import io
import secrets
import time
from dataclasses import dataclass

from tornado.escape import url_escape

from ..hubapi.client import HubClient, HubError
from .model import Course

__all__ = [
    "PendingPreviews",
    "RosterPreview",
    "csv_preview",
    "parse_csv",
    "roster_of",
    "create_groups",
    "set_members",
    "known_users",
]

#: The most usernames one CSV may carry.
MAX_CSV_USERS = 5000


def _group(name: str) -> str:
    return "groups/" + url_escape(name, plus=False)


async def group_members(hub: HubClient, group: str) -> set[str]:
    """Members of hub group ``group`` (empty when the group does not exist yet)."""
    try:
        _, model = await hub.call("GET", _group(group))
    except HubError as e:
        if e.status == 404:
            return set()
        raise
    return set(model.get("users") or ()) if isinstance(model, dict) else set()


async def roster_of(hub: HubClient, course: Course) -> set[str]:
    """The course's students: members of its roster group."""
    return await group_members(hub, course.roster_group)


async def staff_of(hub: HubClient, course: Course) -> set[str]:
    return await group_members(hub, course.staff_group)


async def known_users(hub: HubClient, names: set[str], *, at_once: int = 16) -> set[str]:
    """Which of ``names`` the hub knows: one request per name, ``at_once`` in flight (a
    5,000-name CSV takes seconds, not minutes)."""
    gate = asyncio.Semaphore(at_once)

    async def known(n: str) -> str | None:
        async with gate:
            try:
                await hub.call("GET", "users/" + url_escape(n, plus=False))
                return n
            except HubError as e:
                if e.status != 404:
                    raise
                return None

    return {n for n in await asyncio.gather(*(known(n) for n in sorted(names))) if n}


async def set_members(hub: HubClient, group: str, add: set[str], remove: set[str]) -> None:
    """Add and remove members of ``group`` (created when missing)."""
    try:
        await hub.call("POST", _group(group))
    except HubError as e:
        if e.status != 409:
            raise
    if add:
        await hub.call("POST", _group(group) + "/users", {"users": sorted(add)})
    if remove:
        await hub.call("DELETE", _group(group) + "/users", {"users": sorted(remove)})


async def create_groups(hub: HubClient, course, owner) -> None:
    """A new course's roster and staff groups, empty, in the hub; nothing when ``owner`` (the
    :class:`~jupyterhub_gpulab.auth.groupsowner.GroupsOwner`) says the identity provider or the
    LMS owns the groups (it creates them at logins)."""
    if owner.may_edit:
        await set_members(hub, course.roster_group, set(), set())
        await set_members(hub, course.staff_group, set(), set())


def parse_csv(text: str) -> list[str]:
    """Usernames from a CSV: the ``username`` column if a header names one, else the first
    column; blank lines and ``#`` comments skipped. Raises ``ValueError`` saying what is wrong."""
    rows = [
        r for r in csv.reader(io.StringIO(text)) if r and r[0].strip() and not r[0].startswith("#")
    ]
    if not rows:
        raise ValueError("The CSV holds no usernames (one per line, or a 'username' column).")
    col = 0
    header = [h.strip().lower() for h in rows[0]]
    if "username" in header:
        col = header.index("username")
        rows = rows[1:]
    names = []
    for i, r in enumerate(rows, 1):
        name = r[col].strip() if col < len(r) else ""
        if not name or len(name) > 255 or not name.isprintable():
            raise ValueError(f"Row {i} holds no valid username: {r[:3]!r}")
        names.append(name)
    if len(names) > MAX_CSV_USERS:
        raise ValueError(f"The CSV names {len(names)} users; at most {MAX_CSV_USERS} at once.")
    return names


@dataclass(frozen=True)
class RosterPreview:
    added: list[str]
    removed: list[str]
    unknown: list[str]
    kept: list[str]

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("added", "removed", "unknown", "kept")}


def csv_preview(names: list[str], current: set[str], known: set[str]) -> RosterPreview:
    """What applying the CSV ``names`` to roster ``current`` would do; ``known``: which of
    ``names`` the hub knows."""
    wanted = set(names)
    return RosterPreview(
        added=sorted((wanted & known) - current),
        removed=sorted(current - wanted),
        unknown=sorted(wanted - known),
        kept=sorted(wanted & current),
    )


class PendingPreviews:
    """The course page's CSV previews waiting for their Apply, each under a random id that only
    the staff member who uploaded it holds (in a cookie, and in the Apply button). The names stay
    here, not in the browser: a cookie holds 4 KB, a roster up to :data:`MAX_CSV_USERS` names.
    A preview lasts ``ttl_s`` seconds (default one hour); at most ``most`` are kept (the oldest
    go first). One service process holds them: a service restart drops them (upload again)."""

    def __init__(self, ttl_s: float = 3600.0, most: int = 200):
        self.ttl_s, self.most = ttl_s, most
        self._items: dict[str, tuple[float, str, str, list[str], dict]] = {}

    def put(self, slug: str, who: str, names: list[str], preview: dict) -> str:
        """Keep ``names`` (the CSV's usernames, in order) and ``preview`` (its
        :meth:`RosterPreview.as_dict`) for ``who`` on course ``slug``; returns the id."""
        self._expire()
        while len(self._items) >= self.most:
            self._items.pop(next(iter(self._items)))
        pid = secrets.token_urlsafe(16)
        self._items[pid] = (time.monotonic() + self.ttl_s, slug, who, list(names), preview)
        return pid

    def get(self, pid: str, slug: str, who: str) -> tuple[list[str], dict] | None:
        """``(names, preview)`` kept under ``pid`` for ``who`` on ``slug``; ``None`` if it
        expired, was applied, or belongs to someone else."""
        self._expire()
        item = self._items.get(pid or "")
        if item is None or item[1:3] != (slug, who):
            return None
        return item[3], item[4]

    def drop(self, pid: str) -> None:
        self._items.pop(pid or "", None)

    def _expire(self) -> None:
        now = time.monotonic()
        for pid in [p for p, item in self._items.items() if item[0] < now]:
            del self._items[pid]

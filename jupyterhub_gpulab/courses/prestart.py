"""Pre-start: start every roster member's course server through the hub API, in batches, with
retries and back-off, and keep a live record of how each one went.

    run = PrestartRun(course, users)
    await run.start_all(hub, batch=20, retries=3, backoff_s=5, ready_timeout_s=300)
    run.summary()  ->  "41 of 60 ready, 3 refused: no free slice"

``hub`` is a :class:`~jupyterhub_gpulab.hubapi.client.HubClient` whose token may only start
the roster's servers (the course's pre-start service token, :mod:`.hubhook`). The hub's
refusal of one server (a gpulab ``SpawnRefused``: quota, no free slice) is recorded with its
message and retried while retries are left; one server's failure never stops the others. A run
during which the hub stopped answering (killed, restarting) is :attr:`PrestartRun.interrupted`:
nothing is known of those servers, so the run is not recorded as done and the next pass resumes
it (:mod:`.schedule`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from tornado.escape import url_escape

from .. import clock
from ..hubapi.client import HubClient, HubError, HubUnreachable
from ..units import plural
from .model import Course

log = logging.getLogger("gpulab.courses")

__all__ = ["PrestartRun", "ServerProgress"]

#: Seconds between looks at a starting server.
POLL_S = 1.0


@dataclass
class ServerProgress:
    user: str
    state: str = "waiting"  # waiting, starting, ready, refused, failed; stopped, not-running
    reason: str = ""  # what the hub told (in the student's words)
    status: int | None = None  # the hub's HTTP status of a refusal
    attempts: int = 0
    ready_at: datetime | None = None


@dataclass
class PrestartRun:
    """One start-all (a session's pre-start, or a staff member's button)."""

    course: Course
    users: list[str]
    session_start: datetime | None = None
    started_at: datetime = field(default_factory=clock.utcnow)
    finished_at: datetime | None = None
    servers: dict[str, ServerProgress] = field(default_factory=dict)
    #: the hub stopped answering during the run: its outcome is unknown, resume it
    interrupted: bool = False
    #: a stop-all (its summary counts stops, also when none succeeded)
    stopping: bool = False

    def __post_init__(self):
        self.servers = {u: ServerProgress(u) for u in sorted(self.users)}

    @property
    def done(self) -> bool:
        return self.finished_at is not None

    def counts(self) -> Counter:
        return Counter(p.state for p in self.servers.values())

    def summary(
        self, words: Mapping[str, str] | None = None, unready: Mapping[str, str] | None = None
    ) -> str:
        """``"41 of 60 ready, 3 refused: no free slice"``; of a stop-all, ``"2 stopped, 3 were
        not running"``. ``words``: each user's reason as the reader should read it (the staff's
        words on the course page), instead of what the hub told the student; ``unready``: why
        a started server is not ready for the class after all (its content pull failed), by
        user: such a server is not counted ready, and is named (``"1 of 2 ready, 1 started
        without its content (bob): ~/ml101: …"``)."""
        words = words or {}
        c = self.counts()
        lacking = {
            u: why for u, why in (unready or {}).items()
            if u in self.servers and self.servers[u].state == "ready"
        }  # fmt: skip
        if self.stopping or c["stopped"] or c["not-running"]:
            parts = [f"{c['stopped']} stopped"]
            if c["not-running"]:
                parts.append(
                    f"{c['not-running']} {plural(c['not-running'], 'was', 'were')} not running"
                )
            others = len(self.servers) - c["stopped"] - c["not-running"]
            if others:
                reasons = Counter(p.reason for p in self.servers.values() if p.reason)
                top = reasons.most_common(1)[0][0] if reasons else "unknown"
                parts.append(f"{others} not stopped: {top}")
            return ", ".join(parts)
        parts = [f"{c['ready'] - len(lacking)} of {len(self.servers)} ready"]
        if lacking:
            who = sorted(lacking)
            named = ", ".join(who[:5]) + (f" and {len(who) - 5} more" if len(who) > 5 else "")
            top = Counter(lacking.values()).most_common(1)[0][0]
            its = plural(len(who), "its", "their")
            parts.append(f"{len(who)} started without {its} content ({named}): {top}")
        for state in ("starting", "waiting"):
            if c[state]:
                parts.append(f"{c[state]} {state}")
        for state in ("refused", "failed"):
            if c[state]:
                reasons = Counter(
                    words.get(p.user, p.reason) for p in self.servers.values() if p.state == state
                )
                top = reasons.most_common(1)[0][0]
                parts.append(f"{c[state]} {state}: {top}")
        return ", ".join(parts)

    def as_dict(self) -> dict:
        return {
            "course": self.course.slug,
            "session_start": self.session_start.isoformat() if self.session_start else None,
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "summary": self.summary(),
            "counts": dict(self.counts()),
            "servers": [
                {"user": p.user, "state": p.state, "reason": p.reason, "attempts": p.attempts}
                for p in self.servers.values()
            ],
        }

    async def start_all(
        self,
        hub: HubClient,
        *,
        batch: int,
        retries: int = 3,
        backoff_s: float = 5.0,
        ready_timeout_s: float = 300.0,
    ) -> None:
        """Start every server, at most ``batch`` starting at once; returns when each is ready or
        has used its retries."""
        sem = asyncio.Semaphore(max(1, batch))

        async def one(p: ServerProgress) -> None:
            delay = backoff_s
            for attempt in range(retries + 1):
                async with sem:
                    p.attempts = attempt + 1
                    ok = await self._start_one(hub, p, ready_timeout_s)
                if ok or attempt == retries:
                    return
                await asyncio.sleep(delay)
                delay *= 2

        watch = _Watch(hub, self.course.server_name)
        self._watch = watch
        watcher = asyncio.ensure_future(watch.run())
        try:
            await asyncio.gather(*(one(p) for p in self.servers.values()))
        finally:
            watcher.cancel()
            self.finished_at = clock.utcnow()
            log.info("Pre-start of %s: %s", self.course.slug, self.summary())

    def _path(self, user: str) -> str:
        return f"users/{url_escape(user, plus=False)}/servers/{url_escape(self.course.server_name, plus=False)}"

    async def _start_one(self, hub: HubClient, p: ServerProgress, timeout_s: float) -> bool:
        p.state, p.reason, p.status = "starting", "", None
        body = {"profile": self.course.profile} if self.course.profile else {}
        try:
            await hub.call("POST", self._path(p.user), body)
        except HubUnreachable as e:
            p.state, p.reason, self.interrupted = "failed", e.message, True
            return False
        except HubError as e:
            if e.status == 400 and ("already running" in e.message or "is pending" in e.message):
                pass  # a running (or starting) server counts once it answers
            else:
                p.state = "refused" if e.status in (400, 403, 429, 503) else "failed"
                p.reason, p.status = e.message, e.status
                return False
        return await self._wait_ready(hub, p, timeout_s)

    async def _wait_ready(self, hub: HubClient, p: ServerProgress, timeout_s: float) -> bool:
        posted = time.monotonic()
        deadline = posted + timeout_s
        seen_pending = False
        watch = getattr(self, "_watch", None)
        while time.monotonic() < deadline:
            try:
                if watch is not None and watch.listing:
                    server, fresh = await watch.server(p.user, after=posted)
                else:  # the token may not list the roster: ask for this user alone
                    _, model = await hub.call("GET", f"users/{url_escape(p.user, plus=False)}")
                    server, fresh = (model.get("servers") or {}).get(self.course.server_name), True
            except HubError as e:
                p.state, p.reason = "failed", e.message
                self.interrupted = self.interrupted or isinstance(e, HubUnreachable)
                return False
            if server and server.get("ready"):
                p.state, p.ready_at = "ready", clock.utcnow()
                return True
            if server and server.get("pending"):
                seen_pending = True
            elif fresh and server is None and (seen_pending or time.monotonic() > posted + 5):
                p.state = "failed"
                p.reason = "the server stopped while starting (its spawn failed; see the hub log)"
                return False
            if watch is None or not watch.listing:
                await asyncio.sleep(POLL_S)
        p.state, p.reason = "failed", f"not ready within {timeout_s:g} s"
        return False

    async def stop_all(self, hub: HubClient) -> None:
        """Stop every roster member's course server; one that is not running or pending is
        ``not-running`` (JupyterHub answers 204 to stopping a stopped named server too, so the
        hub's list of active servers says which ran; a token that may not list users stops
        every one and calls them all stopped)."""
        self.stopping = True
        try:
            active = {
                u["name"]
                for u in await hub.active_users()
                if (u.get("servers") or {}).get(self.course.server_name)
            }
        except HubError:
            active = None

        async def one(p: ServerProgress):
            if active is not None and p.user not in active:
                p.state, p.reason = "not-running", ""
                return
            try:
                await hub.call("DELETE", self._path(p.user))
                p.state, p.reason = "stopped", ""
            except HubError as e:
                if e.status == 404:
                    p.state, p.reason = "not-running", ""
                else:  # still running: the progress must not read "waiting"
                    p.state, p.reason = "failed", e.message

        await asyncio.gather(*(one(p) for p in self.servers.values()))
        self.finished_at = clock.utcnow()


class _Watch:
    """One look at the hub every :data:`POLL_S` for the whole run: the roster's running and
    pending servers (``GET /hub/api/users?state=active``, page by page), instead of one request
    per starting server per second (60 servers were 60 requests a second to a hub busy starting
    them). A token that may not list users (a course's roles from before ``list:users``) makes
    ``listing`` false and the run asks per server as before."""

    def __init__(self, hub: HubClient, server_name: str):
        self.hub, self.server_name = hub, server_name
        self.listing = True
        self._servers: dict[str, dict] = {}
        self._at = float("-inf")
        self._error: HubError | None = None
        self._new = asyncio.Event()

    async def run(self) -> None:
        while True:
            asked = time.monotonic()
            try:
                users = await self.hub.active_users()
                self._servers = {
                    u["name"]: (u.get("servers") or {}).get(self.server_name) for u in users
                }
                self._at, self._error = asked, None
            except HubError as e:
                if e.status == 403 and not isinstance(e, HubUnreachable):
                    self.listing = False
                else:
                    self._error = e
            except Exception as e:  # never leave the run's servers waiting on a dead watch
                log.exception("Pre-start: listing the roster's servers failed")
                self._error = HubError(500, f"listing the servers failed ({type(e).__name__})")
            self._new.set()
            self._new = asyncio.Event()
            if not self.listing:
                return
            await asyncio.sleep(POLL_S)

    async def server(self, user: str, *, after: float) -> tuple[dict | None, bool]:
        """``user``'s course server as the next look saw it (``None``: not running or
        pending), and whether that look began after ``after`` (monotonic seconds)."""
        await self._new.wait()
        if self._error is not None:
            raise self._error
        return self._servers.get(user), self._at >= after

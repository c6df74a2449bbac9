"""The service's side of course content, mixed into :class:`.manager.CourseManager`:
Distribute (the pull of :func:`.content.pull_script` run now in every running course server),
what each student's last pull said (read from their servers, :mod:`.contentread`, kept per
container), and the repository check made from where the pulls run.

Runs in the gpulab service's event loop; engine calls go through ``aio.call`` (a thread), through
the manager's ``backend`` (:mod:`jupyterhub_gpulab.backends`: on a Swarm, each server's own node).
"""

from __future__ import annotations

import logging

from ..ledger import aio
from ..spawner.container import LABEL_COURSE
from .contentstatus import one_line
from .model import Course
from .roster import roster_of

log = logging.getLogger("gpulab.courses")

#: Distribute's line for a server whose pull wrote no status (an image without git or sh).
NO_REPORT = "failed: the pull wrote no report (see ~/.gpulab/content.log)"
#: Distribute's line for a running server of the course's name that is not its course server.
NOT_COURSE = "not a course server: restart it as the course's server"


def split_course_servers(servers, course: Course) -> tuple[list, list]:
    """``(course servers, others)`` of ``servers`` (:class:`~..backends.base.Server`, listed by
    ``course``'s server name): a course server carries the course's label
    (:data:`~..spawner.container.LABEL_COURSE`), which only the courses' pre-spawn hook sets, at
    a start it made a course server's (course-work volume, not the personal home). A named
    server merely called like the course (started before the course existed, or by a version
    without the label) mounts the personal home: Distribute never writes into it and its
    content is not read; it is a course server again once restarted."""
    ours, others = [], []
    for server in servers:
        (ours if (server.labels or {}).get(LABEL_COURSE) == course.slug else others).append(server)
    return ours, others


class ContentActions:
    """Needs of the class it is mixed into: ``hub``, ``store``, ``settings``, ``tz``,
    ``images``, ``lab_id``, ``backend`` and ``_content`` (``{slug: {user: (container id,
    sources)}}``, the cache of what was read)."""

    async def distribute(self, course: Course, *, by: str) -> dict:
        """Pull the course content now into every running course server of the roster
        (``docker exec`` of the same pull as at start, as the container's user, one server
        after the other). ``{"message", "report": {user: one line}, "content": {user: state}}``:
        the message counts the servers pulled into and names those that failed; the line is
        ``not running``, :data:`NOT_COURSE` (a server of the course's name without its label,
        :func:`split_course_servers`: left untouched), or the student's content line, the state
        :func:`.contentstatus.describe`'s (running servers only)."""
        if not course.content:
            return {"message": "Nothing to pull: the course has no repository.", "report": {},
                    "content": {}}  # fmt: skip
        students = await roster_of(self.hub, course)
        found = await aio.call(self._distribute, course, students)
        strays = sorted(u for u, v in found.items() if v == NOT_COURSE)
        found = {u: v for u, v in found.items() if v != NOT_COURSE}
        content = {u: self._describe(v) for u, v in found.items() if not isinstance(v, str)}
        report = {u: NOT_COURSE if u in strays else "not running" for u in students}
        for u, v in found.items():
            if isinstance(v, str):  # the exec itself failed
                report[u] = v
            else:
                report[u] = (content[u] or {}).get("message") or NO_REPORT
        await aio.call(self.store.record, course.slug, by, "distribute", {"report": report})
        failed = sorted(
            u for u, v in found.items() if (content.get(u) or {}).get("state") in (None, "failed")
        )
        message = f"Pulled into {len(found) - len(failed)} of {len(found)} running servers."
        if failed:
            message += f" Failed in {len(failed)}: {', '.join(failed[:10])} (see the roster)."
        if strays:
            message += (f" Not a course server, left alone in {len(strays)}: "
                        f"{', '.join(strays[:10])} (restart it as the course's server).")  # fmt: skip
        return {"message": message, "report": report, "content": content}

    async def check_content(self, course: Course, repo: str, branch: str) -> str | None:
        """``None`` when ``repo`` has ``branch`` as seen from where ``course``'s pulls run: a
        short-lived container of the course profile's image on the lab's Docker network
        (``c.DockerSpawner.network_name``; on a Swarm, a node's bridge) asks it (:func:`.contentread.ask_in_container`);
        else one line saying why. Where the engine cannot run that container, the service's
        host asks instead (:func:`.content.check_reachable`), and it is logged."""
        from .content import check_reachable
        from .contentread import ask_in_container

        image = self.images.get(course.profile) or next(iter(self.images.values()), "")
        if image:
            try:
                return await aio.call(ask_in_container, self.backend, image, repo, branch)
            except Exception as e:
                log.warning("Repository %s checked from the service's host: %s", repo, e)
        return await check_reachable(repo, branch)

    def network(self) -> str:
        """The Docker network the lab's servers join (the spawner's ``network_name``)."""
        return self.backend.network

    async def content_of(self, course: Course, users) -> dict[str, dict | None]:
        """Each of ``users``' last content pull in their course server
        (:func:`.contentstatus.describe`; ``None``: not known). Read from each running server's
        ``~/.gpulab/content.status`` once per container (a new start is a new container;
        Distribute reads again); a stopped server keeps what was read while it ran."""
        try:
            await aio.call(self._read_content, course)
        except Exception as e:  # no engine here: the page shows what was read before
            log.info("Content status of %s not read: %s", course.slug, e)
        known = self._content.get(course.slug, {})
        return {u: self._describe(known[u][1]) if u in known else None for u in users}

    def _describe(self, sources) -> dict | None:
        from .contentstatus import describe

        return describe(sources, lambda t: t.astimezone(self.tz).strftime("%a %Y-%m-%d %H:%M %Z"))

    def _course_servers(self, course: Course) -> tuple[list, list]:
        """``(course servers, others)``: the running servers of ``course``'s server name in
        this lab, split by :func:`split_course_servers` (blocking)."""
        found = self.backend.servers(course.server_name, self.lab_id or None)
        ours, others = split_course_servers(found, course)
        for c in others:
            log.info("Course %s: %s's server %r is not a course server (no %s label): "
                     "left alone until restarted", course.slug, c.user, course.server_name,
                     LABEL_COURSE)  # fmt: skip
        return ours, others

    def _read_content(self, course: Course, *, again: bool = False) -> dict:
        """Read the content status of ``course``'s running servers into the cache (blocking);
        ``again``: also those read before. ``{user: sources}`` of the servers read."""
        from .contentread import status_in

        known = self._content.setdefault(course.slug, {})
        read = {}
        for c in self._course_servers(course)[0]:
            user = c.user
            if not user or (not again and known.get(user, ("", ()))[0] == c.id):
                continue
            try:
                sources = status_in(self.backend, c, self.settings.home_path)
            except Exception as e:  # one server's failure never stops the others
                log.info("Content status of %s in %s not read: %s", user, course.slug, e)
                continue
            if sources:  # else the pull has not finished yet: read again next time
                known[user] = (c.id, sources)
            read[user] = sources
        return read

    def _distribute(self, course: Course, students: set[str]) -> dict:
        """Run the pull in each running course server of ``students``, then read what it
        reported (blocking). ``{user: sources}`` (``()``: the pull reported nothing)."""
        from .content import pull_script

        script = pull_script(course.content, self.settings.home_path)
        ran: dict = {}
        ours, others = self._course_servers(course)
        for c in ours:
            user = c.user
            if user not in students:
                continue
            try:
                self.backend.exec_run(c, ["sh", "-c", script])
                ran[user] = ()
            except Exception as e:  # one server's failure never stops the others
                log.warning("Distribute of %s to %s failed: %s", course.slug, user, e)
                ran[user] = f"failed: {one_line(str(e))}"
        read = self._read_content(course, again=True)
        found = {u: read.get(u, ()) if v == () else v for u, v in ran.items()}
        return {**{c.user: NOT_COURSE for c in others if c.user in students}, **found}

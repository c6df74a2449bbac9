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
from .contentstatus import one_line
from .model import Course
from .roster import roster_of

log = logging.getLogger("gpulab.courses")

#: Distribute's line for a server whose pull wrote no status (an image without git or sh).
NO_REPORT = "failed: the pull wrote no report (see ~/.gpulab/content.log)"


class ContentActions:
    """Needs of the class it is mixed into: ``hub``, ``store``, ``settings``, ``tz``,
    ``images``, ``lab_id``, ``backend`` and ``_content`` (``{slug: {user: (container id,
    sources)}}``, the cache of what was read)."""

    async def distribute(self, course: Course, *, by: str) -> dict:
        """Pull the course content now into every running course server of the roster
        (``docker exec`` of the same pull as at start, as the container's user, one server
        after the other). ``{"message", "report": {user: one line}, "content": {user: state}}``:
        the message counts the servers pulled into and names those that failed; the line is
        ``not running`` or the student's content line, the state
        :func:`.contentstatus.describe`'s (running servers only)."""
        if not course.content:
            return {"message": "Nothing to pull: the course has no repository.", "report": {},
                    "content": {}}  # fmt: skip
        students = await roster_of(self.hub, course)
        found = await aio.call(self._distribute, course, students)
        content = {u: self._describe(v) for u, v in found.items() if not isinstance(v, str)}
        report = {u: "not running" for u in students}
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

    def _course_servers(self, course: Course) -> list:
        """The running servers of ``course``'s server name in this lab (blocking)."""
        return self.backend.servers(course.server_name, self.lab_id or None)

    def _read_content(self, course: Course, *, again: bool = False) -> dict:
        """Read the content status of ``course``'s running servers into the cache (blocking);
        ``again``: also those read before. ``{user: sources}`` of the servers read."""
        from .contentread import status_in

        known = self._content.setdefault(course.slug, {})
        read = {}
        for c in self._course_servers(course):
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
        for c in self._course_servers(course):
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
        return {u: read.get(u, ()) if v == () else v for u, v in ran.items()}

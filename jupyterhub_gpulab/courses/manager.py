"""The service's side of courses: the stored records (saved together with their sessions'
reservations), who is staff, pre-start runs (on "Start all", and scheduled: :mod:`.schedule`),
stop all; distribute is mixed in from :mod:`.distribute`, collect and return from
:mod:`.assignments`.

Runs in the gpulab service's event loop; ledger calls go through ``aio.call``.
"""

from __future__ import annotations

import asyncio
import logging

from tornado.escape import url_escape

from .. import clock
from ..auth.groupsowner import GroupsOwner
from ..backends import backend_for
from ..hubapi.client import HubClient, HubError
from ..ledger import aio
from ..ledger.notices import COURSE_PREFIX
from .access import roster_profile_problems
from .assignments import AssignmentActions
from .config import GPULabCourses
from .distribute import ContentActions
from .hubhook import prestart_token
from .model import Course, CourseError
from .parse import parse_course
from .prestart import PrestartRun
from .reserve import book_course, fit_problems, prefix_of
from .roster import PendingPreviews, roster_of, set_members
from .schedule import run_pass, strays_of, sync_reservations
from .store import CourseStore

log = logging.getLogger("gpulab.courses")

#: The rule of the notice a student gets when staff add or remove them (``course:roster``).
ROSTER_NOTICE = COURSE_PREFIX + "roster"


class RosterLocked(Exception):
    """The roster's group is not the hub's to edit (campus SSO, LTI): ``str(e)`` says whose."""


class CourseManager(ContentActions, AssignmentActions):
    def __init__(
        self,
        store: CourseStore,
        settings: GPULabCourses,
        hub: HubClient,
        *,
        tz,
        secret: bytes | None,
        ledger=None,
        spawn_limit: int = 100,
        lab_profiles: dict | None = None,
        images: dict[str, str] | None = None,
        lab_id: str = "",
        groups_owner: GroupsOwner | None = None,
        lab=None,
        backend=None,
    ):
        """``ledger``: the lab's :class:`~..ledger.Ledger` (reservations); ``lab_profiles``:
        ``{slug: Profile}`` of the lab; ``groups_owner``: who owns the hub's groups
        (:class:`~..auth.groupsowner.GroupsOwner`; default: the hub): under SSO or LTI the rosters
        are read from the identity provider's groups and not edited here; ``lab``: the loaded
        :class:`~..lab.config.Lab`, whose policies say which profiles a roster may use
        (``None``: not checked); ``backend``: the engine seam (default: the backend of
        ``settings.config``, :func:`~..backends.backend_for`)."""
        self.store, self.settings, self.hub, self.tz = store, settings, hub, tz
        self.ledger = ledger
        #: who fills the roster and staff groups (the hub, the identity provider, the LMS)
        self.groups_owner = groups_owner or GroupsOwner("hub")
        self.lab_profiles = lab_profiles or {}
        profiles = set(self.lab_profiles) if lab_profiles is not None else None
        #: profile slug -> image, for the helper containers of collect / return
        self.images = images or {}
        self.lab_id = lab_id
        self.lab = lab
        self.backend = backend if backend is not None else backend_for(settings.config)
        self.secret = secret
        self.batch = settings.prestart_batch or spawn_limit or 100
        self.profiles = profiles
        #: the latest start-all (or stop-all) of each course, by slug
        self.runs: dict[str, PrestartRun] = {}
        #: the course pages' roster CSV previews waiting for Apply
        self.csv_previews = PendingPreviews()
        self._tasks: set[asyncio.Task] = set()
        #: slug -> sessions that could not be reserved (the latest sync), for the course page
        self.booking_problems: dict[str, list[str]] = {}
        #: monotonic time of the last reservations sync (:mod:`.schedule`)
        self.reservations_synced_at = float("-inf")
        #: slug -> user -> (container id, sources): each server's last content pull, as read
        self._content: dict[str, dict[str, tuple]] = {}
        #: slug (or ``courses[i]``) -> why that course needs an admin's attention: a declared
        #: record that does not parse, a stored one that no longer does, a profile the lab lost
        #: (:meth:`declare`); shown on its page, in the API and the log; the lab runs on
        self.attention: dict[str, list[str]] = {}

    def roster_source(self, course) -> dict:
        """Where ``course``'s roster comes from: ``{"owner": kind, "editable": bool,
        "description": one sentence}`` (:class:`~jupyterhub_gpulab.auth.groupsowner.GroupsOwner`)."""
        owner = self.groups_owner
        return {
            "owner": owner.kind,
            "editable": owner.may_edit,
            "description": owner.describe(course.roster_group),
        }

    async def declare(self) -> None:
        """Store the valid courses of the config and book their sessions (what fits; conflicts
        are logged and shown on the course page). A course that cannot be used (an invalid
        declared or stored record, a profile the lab no longer has) is marked as needing
        attention (:attr:`attention`, a WARNING each) and the rest of the lab starts: its stored
        record, if any, stays as it was."""
        declared, problems = self.settings.declared_each(self.profiles)
        changed = await aio.call(self.store.declare, declared)
        if changed:
            log.info("Courses from the config stored: %s", ", ".join(changed))
        stored, broken = await aio.call(self.store.checked)
        for slug, errors in broken.items():
            problems.setdefault(slug, []).extend(
                f"the stored record cannot be read: {m}" for m in errors
            )
        for s in stored:  # today's rules: a profile the lab lost, a date out of bounds…
            try:
                self.parse(s.course.to_dict())
            except CourseError as e:
                problems.setdefault(s.course.slug, e.errors)
        self.attention = problems
        for key, errors in problems.items():
            log.warning(
                "Course %s needs attention (not pre-started, sessions not booked until an "
                "admin fixes it; the rest of the lab runs): %s",
                key,
                "; ".join(errors),
            )
        for course in declared:
            await sync_reservations(self, course)

    def attention_of(self, slug: str) -> list[str]:
        """Why course ``slug`` needs an admin's attention (empty: it does not)."""
        return list(self.attention.get(slug, ()))

    def parse(self, record: dict) -> Course:
        """The course of a record staff or an admin sent (:func:`~.parse.parse_course` against
        the lab's profiles, its ``shared_folder`` under ``c.GPULabCourses.shared_folder_root``);
        raises :class:`~.model.CourseError` listing every problem."""
        return parse_course(
            record, profiles=self.profiles, shared_root=self.settings.shared_folder_root
        )

    def profile_of(self, course: Course):
        """The lab's :class:`~..lab.profile.Profile` a course's servers start with, or ``None``."""
        return self.lab_profiles.get(course.profile)

    async def save(self, course: Course, *, by: str, origin: str = "admin") -> bool:
        """Create or replace ``course`` (audited) after booking its sessions' reservations, all
        or none; ``False`` when nothing changed. Raises :class:`~..ledger.BookingConflict`
        naming the session the lab cannot hold (nothing is saved then) and
        :class:`~.model.CourseError` for a course its profile cannot serve
        (:func:`.reserve.fit_problems`) or whose roster group may not use one of its profiles
        (:func:`.access.roster_profile_problems`; only where the hub owns the groups: under SSO
        or LTI the members' other groups come from the provider, and it is logged instead)."""
        problems = fit_problems(course, self.profile_of(course))
        if self.lab is not None:
            refused = roster_profile_problems(course, self.lab)
            if refused and self.groups_owner.may_edit:
                problems += refused
            for m in refused if not self.groups_owner.may_edit else ():
                log.warning("Course %s saved though %s", course.slug, m)
        if problems:
            raise CourseError(problems)
        if self.ledger is not None:
            await aio.call(
                book_course,
                self.ledger,
                course,
                self.profile_of(course),
                now=clock.utcnow(),
                tz=self.tz,
                horizon_days=self.settings.reserve_horizon_days,
            )
            self.booking_problems[course.slug] = []
        changed = await aio.call(self.store.put, course, by=by, origin=origin)
        self.attention.pop(
            course.slug, None
        )  # a valid record now (the config's is re-read at start)
        return changed

    async def edit_roster(
        self, course: Course, *, by: str, add: set[str], remove: set[str], action: str = "roster"
    ) -> list[str]:
        """Add and remove roster members as staff member (or admin) ``by``: audited as
        ``action`` (``roster``, ``roster-csv``), each student told on their gpulab page and
        the hub's home ("You were added to DL 101 (dl101) by ta1."), and the removed ones'
        running course servers stopped (:meth:`stop_removed`; returns whose were). Raises
        :class:`RosterLocked` when the identity provider or LMS owns the groups (nothing
        changes): the check every roster edit passes, whichever page or API asked."""
        if not self.groups_owner.may_edit:
            raise RosterLocked(
                self.groups_owner.describe(course.roster_group) + " Nothing changed."
            )
        await set_members(self.hub, course.roster_group, add, remove)
        detail = {"added": sorted(add), "removed": sorted(remove)}
        await aio.call(self.store.record, course.slug, by, action, detail)
        if self.ledger is not None:
            await self._tell_roster(course, by=by, add=add, remove=remove)
        return await self.stop_removed(course, remove, by=by) if remove else []

    async def _tell_roster(self, course: Course, *, by: str, add: set[str], remove: set[str]):
        """Each added or removed student's notice (:meth:`edit_roster`)."""
        name = f"{course.title} ({course.slug})" if course.title else course.slug
        now = clock.utcnow()

        def tell() -> None:  # one thread for a CSV's 5,000 notices, not one hop each
            for users, says in ((add, f"added to {name}"), (remove, f"removed from {name}")):
                for user in sorted(users):
                    message = f"You were {says} by {by}."
                    self.ledger.set_warning(user, course.server_name, ROSTER_NOTICE, message, now)

        await aio.call(tell)

    async def bookings_of(self, course: Course) -> list:
        """The course's reservations from now on (one per session)."""
        if self.ledger is None:
            return []
        found = await aio.call(self.ledger.bookings, clock.utcnow())
        return [b for b in found if (b.ref or "").startswith(prefix_of(course.slug))]

    async def course(self, slug: str) -> Course | None:
        stored = await aio.call(self.store.get, slug)
        return stored.course if stored else None

    async def groups_of(self, user: str) -> set[str]:
        try:
            _, model = await self.hub.call("GET", "users/" + url_escape(user, plus=False))
        except HubError as e:
            if e.status == 404:
                return set()
            raise
        return set(model.get("groups") or ())

    async def is_staff(self, user: str, course: Course) -> bool:
        return course.staff_group in await self.groups_of(user)

    async def prestart_client(self, course: Course) -> HubClient:
        """The client pre-start uses: the course's own token (the roster's servers only) when
        the hub knows it, else the service's (the course was made after the hub started)."""
        if self.secret is not None:
            client = HubClient(self.hub.api_url, prestart_token(self.secret, course.slug))
            try:
                await client.call("GET", "user")
                return client
            except HubError:
                log.info(
                    "Course %s has no pre-start token on the hub yet; using the service's",
                    course.slug,
                )
        return self.hub

    def run_of(self, slug: str) -> PrestartRun | None:
        return self.runs.get(slug)

    async def start_all(self, course: Course, *, by: str, session_start=None) -> PrestartRun:
        """Begin starting every roster member's course server; returns the run at once."""
        current = self.runs.get(course.slug)
        if current is not None and not current.done:
            if session_start is not None and current.session_start is None:
                current.session_start = session_start  # its end is this session's pre-start
            return current
        users = sorted(await roster_of(self.hub, course))
        run = PrestartRun(course, users, session_start=session_start)
        self.runs[course.slug] = run
        await aio.call(
            self.store.record,
            course.slug,
            by,
            "start-all",
            {"users": len(users), "session_start": session_start},
        )
        client = await self.prestart_client(course)
        task = asyncio.ensure_future(self._run(run, client))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return run

    async def _run(self, run: PrestartRun, client: HubClient) -> None:
        s = self.settings
        try:
            await run.start_all(
                client,
                batch=self.batch,
                retries=s.prestart_retries,
                backoff_s=s.prestart_backoff,
                ready_timeout_s=s.ready_timeout,
            )
        except Exception:
            log.exception("Pre-start of %s failed", run.course.slug)
        if run.session_start is None:
            return
        if run.interrupted:
            log.warning(
                "Pre-start of %s was cut off (the hub stopped answering); the next pass resumes it",
                run.course.slug,
            )
            return
        await aio.call(
            self.store.finish_prestart, run.course.slug, run.session_start, run.summary()
        )

    async def stop_all(self, course: Course, *, by: str) -> PrestartRun:
        users = sorted(await roster_of(self.hub, course))
        run = PrestartRun(course, users)
        await run.stop_all(await self.prestart_client(course))
        self.runs[course.slug] = run
        await aio.call(self.store.record, course.slug, by, "stop-all", {"users": len(users)})
        return run

    async def stop_removed(self, course: Course, users, *, by: str, active=None) -> list[str]:
        """Stop the ``course`` servers ``users`` run: they left its roster, so they lose its
        server (its course storage, its reserved seat) at once, not at their next logout. Only
        servers the hub lists as running or pending (``active``: its answer, else asked now),
        of users the hub no longer puts in the roster or staff group; with the service's token
        (the course's own reaches the roster only); each stop on its own, a server already gone
        is no error. Returns the users whose server was stopped (audited as ``stop-removed``;
        none when the hub cannot list its servers: the scheduled pass stops them later)."""
        if active is None:
            try:
                active = await self.hub.refresh_active()
            except HubError as e:
                log.warning("Course %s: removed students' servers not stopped yet: %s",
                            course.slug, e.message)  # fmt: skip
                return []
        stopped = []
        for user in sorted(set(users) & set(strays_of(course, active))):
            try:
                await self.hub.call(
                    "DELETE",
                    f"users/{url_escape(user, plus=False)}/servers/"
                    f"{url_escape(course.server_name, plus=False)}",
                )
                stopped.append(user)
            except HubError as e:
                if e.status != 404:
                    log.warning(
                        "Course %s: cannot stop %s's server after removal: %s",
                        course.slug,
                        user,
                        e.message,
                    )
        if stopped:
            log.info("Course %s: stopped the servers of removed %s", course.slug, stopped)
            await aio.call(self.store.record, course.slug, by, "stop-removed", {"users": stopped})
        return stopped

    async def check_due(self) -> None:
        """The scheduled pass: pre-starts, deadlines, reservations (:mod:`.schedule`)."""
        await run_pass(self)

"""The courses API under ``/services/gpulab/api/courses``::

    GET    courses                       the courses the caller may see (admin: all; staff: theirs)
    POST   courses                       create a course (admin; body: a course record)
    GET    courses/<slug>                record, roster with server states (a page at a
                                         time: ?offset=&limit=), next sessions,
                                         the latest start-all's progress          (staff, admin)
    PUT    courses/<slug>                replace the record (admin; staff: all but the groups
                                         and the shared folder)
    POST   courses/<slug>/roster         {"add": [...], "remove": [...]}: a removed
                                         student's running course server stops   (staff, admin)
    POST   courses/<slug>/roster.csv     a CSV of usernames; ?apply=1 applies it, else a preview
                                         of who is added, removed, unknown        (staff, admin)
    POST   courses/<slug>/start          start every roster member's course server (staff, admin)
    POST   courses/<slug>/stop           stop them                                 (staff, admin)
    GET    courses/<slug>/progress       the latest start-all                      (staff, admin)
    POST   courses/<slug>/distribute     pull the content into running servers now (staff, admin)
    POST   courses/<slug>/collect        {"assignment": "hw1"}: copy each student's
                                         ~/assignments/hw1 into the course folder  (staff, admin)
    POST   courses/<slug>/return         {"assignment": "hw1"}: feedback back      (staff, admin)
    GET    courses/<slug>/audit          who changed what, when                    (staff, admin)

Staff are the members of the course's staff group (asked of the hub at each request); admins
hold ``custom:gpulab:admin``. Anyone else gets a 403. Errors are ``{"status", "message"}``.
"""

from __future__ import annotations

from ...courses.assignments import UndeclaredAssignment
from ...courses.collect import ASSIGNMENT
from ...courses.model import CourseError
from ...courses.parse import KEYS
from ...courses.roster import create_groups, csv_preview, known_users, parse_csv, roster_of
from ...ledger import BookingConflict, aio
from ...units import counted
from . import inputs, paging
from .base import JSONHandler, refuse
from .courseview import ROSTER_SORTS, course_view


async def save_course(courses, course, who: str, origin: str = "admin") -> bool:
    """Save ``course`` with its sessions' reservations (:meth:`~...courses.manager.CourseManager.save`);
    a session the lab cannot hold is a 409 naming the conflict, seats of a CPU profile a 400;
    nothing is saved then. ``False`` when nothing changed."""
    try:
        return await courses.save(course, by=who, origin=origin)
    except BookingConflict as e:
        raise refuse(409, f"Not saved: {e.message}") from None
    except CourseError as e:
        raise refuse(400, "Not saved: " + "; ".join(e.errors)) from None


def no_course(courses, slug: str) -> str:
    """The 404's message for course ``slug``: none, or one whose stored record cannot be read
    (then why, so an admin knows what to fix)."""
    why = courses.attention_of(slug)
    if why:
        return f"Course {inputs.shown(slug)} cannot be used until an admin fixes it: " + "; ".join(
            why
        )
    return f"No course {inputs.shown(slug)}."


#: Fields only an admin may change: who the course's people are, and the host folder mounted
#: into every roster member's server.
ADMIN_ONLY = ("roster_group", "staff_group", "slug", "shared_folder", "mount_home")


class CourseHandler(JSONHandler):
    @property
    def courses(self):
        return self.settings["gpulab_courses"]

    async def course_for(self, slug: str, *, staff: bool = True):
        """The course, once the caller may act on it (admin, or staff when ``staff``)."""
        self.require()
        course = await self.courses.course(inputs.name(slug, "course slug"))
        if course is None:
            raise refuse(404, no_course(self.courses, slug))
        if self.can_admin:
            return course
        if staff and await self.courses.is_staff(self.who, course):
            return course
        raise refuse(
            403,
            f"Only the staff of course {course.slug} (group {course.staff_group}) and admins may do this.",
        )

    def require_editable_roster(self, course) -> None:
        """A 409 when the roster's group is not the hub's to edit (campus SSO, LTI)."""
        source = self.courses.roster_source(course)
        if not source["editable"]:
            raise refuse(409, source["description"] + " Nothing changed.")

    async def parse(self, record: dict, old=None):
        """The course of ``record``, once valid and its new repositories reachable from where
        the pulls run (``old``: the course before the change, whose repositories were checked
        when added)."""
        try:
            course = self.courses.parse(record)
        except CourseError as e:
            raise refuse(400, "; ".join(e.errors)) from None
        known = {(s.repo, s.branch) for s in old.content} if old is not None else set()
        for src in course.content:
            if (src.repo, src.branch) in known:
                continue
            problem = await self.courses.check_content(course, src.repo, src.branch)
            if problem:
                raise refuse(400, f"Content not saved: {problem}.")
        return course

    async def view(self, course, page=None) -> dict:
        return await course_view(
            self.state, self.hub, self.courses, course, reader=self.current_user, page=page
        )


class CoursesAPI(CourseHandler):
    async def get(self):
        self.require()
        stored = await aio.call(self.courses.store.all)
        out = []
        groups = None if self.can_admin else await self.courses.groups_of(self.who)
        for s in stored:
            c = s.course
            if groups is None or c.staff_group in groups:
                out.append(
                    {
                        "slug": c.slug,
                        "title": c.title,
                        "term": c.term,
                        "origin": s.origin,
                        "attention": self.courses.attention_of(c.slug),
                    }
                )
        body = {"courses": out}
        if self.can_admin:
            body["attention"] = self.courses.attention
        self.write_json(body)

    async def post(self):
        self.require(admin=True)
        course = await self.parse(self.json_body(KEYS))
        if await self.courses.course(course.slug) is not None:
            raise refuse(
                409, f"Course {course.slug} exists; PUT courses/{course.slug} to change it."
            )
        await save_course(self.courses, course, self.who)
        await create_groups(self.hub, course, self.courses.groups_owner)
        self.write_json(
            {
                "status": 201,
                "message": f"Course {course.slug} created.",
                "course": course.to_dict(),
            },
            201,
        )


class CourseAPI(CourseHandler):
    async def get(self, slug: str):
        """The course with its roster a page at a time (:mod:`.paging`: ``offset``, ``limit``,
        ``sort`` ``user`` or ``-user``, the ``user`` filter), in JupyterHub's shape with the
        pagination Accept header (the roster's rows are the ``items``)."""
        course = await self.course_for(slug)
        paginated = paging.accepts_pagination(self.request.headers.get("Accept"))
        page = self.page(ROSTER_SORTS, ("user",), paginated=paginated, default_sort="user",
                         others=())  # fmt: skip
        view = await self.view(course, page)
        total, url = view.pop("roster_total"), self.request.full_url()
        if paginated:
            rows = view.pop("roster")
            self.write_json({**paging.paginated_model(rows, page, total, url), **view})
        else:
            self.write_json({**view, "_pagination": paging.pagination(page, total, url)})

    async def put(self, slug: str):
        course = await self.course_for(slug)
        body = self.json_body(KEYS)
        record = {**course.to_dict(), **body}
        if not self.can_admin:
            old = course.to_dict()
            changed = [k for k in ADMIN_ONLY if k in body and body[k] != old.get(k)]
            if changed:
                raise refuse(403, f"Only an admin may change {', '.join(changed)}.")
        if record.get("slug") != course.slug:
            raise refuse(400, "The slug of a course cannot change.")
        new = await self.parse(record, course)
        changed = await save_course(self.courses, new, self.who)
        self.write_json(
            {
                "status": 200,
                "message": "Saved." if changed else "Nothing changed.",
                "course": new.to_dict(),
            }
        )


class RosterAPI(CourseHandler):
    async def post(self, slug: str):
        course = await self.course_for(slug)
        self.require_editable_roster(course)
        body = self.json_body({"add", "remove"})
        add, remove = (set(_names(body.get(k, []), k)) for k in ("add", "remove"))
        known = await known_users(self.hub, add)
        unknown = sorted(add - known)
        if unknown:
            raise refuse(
                400,
                f"Unknown user(s), nothing changed: {', '.join(unknown[:20])}. Users must have logged in to the hub once (or be created by an admin).",
            )
        stopped = await self.courses.edit_roster(course, by=self.who, add=add, remove=remove)
        self.write_json(
            {
                "status": 200,
                "message": f"{len(add)} added, {len(remove)} removed"
                + (f"; their course servers stopped: {', '.join(stopped)}." if stopped else "."),
            }
        )


class RosterCSVAPI(CourseHandler):
    def body_limit(self) -> int:
        return inputs.MAX_CSV_BODY  # a roster of up to 5,000 names

    async def post(self, slug: str):
        course = await self.course_for(slug)
        self.require_editable_roster(course)
        text = self.request.body.decode("utf-8", "replace")
        if self.request.files.get("csv"):
            text = self.request.files["csv"][0]["body"].decode("utf-8", "replace")
        elif self.get_body_argument("csv", None) is not None:
            text = self.get_body_argument("csv")
        try:
            names = parse_csv(text)
        except ValueError as e:
            raise refuse(400, str(e)) from None
        current = await roster_of(self.hub, course)
        known = await known_users(self.hub, set(names) - current) | (set(names) & current)
        preview = csv_preview(names, current, known)
        apply = self.get_query_argument("apply", "0") in ("1", "true", "yes")
        if not apply:
            self.write_json(
                {
                    "status": 200,
                    "message": "Preview only; POST with ?apply=1 to apply.",
                    "preview": preview.as_dict(),
                }
            )
            return
        if preview.unknown:
            raise refuse(
                400,
                f"Unknown user(s) in the CSV, nothing changed: {', '.join(preview.unknown[:20])}.",
            )
        await self.courses.edit_roster(
            course,
            by=self.who,
            add=set(preview.added),
            remove=set(preview.removed),
            action="roster-csv",
        )
        self.write_json(
            {
                "status": 200,
                "message": f"{len(preview.added)} added, {len(preview.removed)} removed.",
                "preview": preview.as_dict(),
            }
        )


class StartAllAPI(CourseHandler):
    async def post(self, slug: str):
        course = await self.course_for(slug)
        self.json_body()  # no fields: a malformed or unexpected body starts nothing
        run = await self.courses.start_all(course, by=self.who)
        self.write_json(
            {
                "status": 202,
                "message": f"Starting {counted(len(run.servers), 'server')}.",
                "progress": run.as_dict(),
            },
            202,
        )


class StopAllAPI(CourseHandler):
    async def post(self, slug: str):
        course = await self.course_for(slug)
        self.json_body()
        run = await self.courses.stop_all(course, by=self.who)
        self.write_json(
            {
                "status": 200,
                "message": f"Stop all: {run.summary()}.",
                "progress": run.as_dict(),
            }
        )


class ProgressAPI(CourseHandler):
    async def get(self, slug: str):
        course = await self.course_for(slug)
        run = self.courses.run_of(course.slug)
        self.write_json({"progress": run.as_dict() if run else None})


class DistributeAPI(CourseHandler):
    async def post(self, slug: str):
        course = await self.course_for(slug)
        self.json_body()
        done = await self.courses.distribute(course, by=self.who)
        self.write_json({"status": 200, **done})


class CollectAPI(CourseHandler):
    give = False

    async def post(self, slug: str):
        course = await self.course_for(slug)
        if self.request.headers.get("Content-Type", "").startswith("application/json"):
            name = self.json_body({"assignment"}).get("assignment")
        else:
            name = self.get_body_argument("assignment", "")
        if not isinstance(name, str) or not ASSIGNMENT.match(name):
            raise refuse(
                400,
                f"{inputs.shown(name)} is not an assignment name: one folder name under ~/assignments (letters, digits, . _ -).",
            )
        try:
            if self.give:
                report = await self.courses.give_back(course, name, by=self.who)
                n = sum(1 for r in report.values() if r["state"] == "returned")
                message = f"Feedback returned to {n} of {counted(len(report), 'student')}."
            else:
                report = await self.courses.collect(course, name, by=self.who)
                n = sum(1 for r in report.values() if r["state"] == "submitted")
                message = f"{n} of {len(report)} submitted."
        except UndeclaredAssignment as e:
            raise refuse(400, str(e)) from None
        self.write_json({"status": 200, "message": message, "report": report})


class ReturnAPI(CollectAPI):
    give = True


class AuditAPI(CourseHandler):
    async def get(self, slug: str):
        course = await self.course_for(slug)
        entries = await aio.call(self.courses.store.audit, course.slug)
        self.write_json(
            {
                "audit": [
                    {"at": a.at.isoformat(), "who": a.who, "action": a.action, "detail": a.detail}
                    for a in entries
                ]
            }
        )


def _names(value, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise refuse(400, f"{key!r} must be a list of usernames.")
    return [inputs.name(v, "user name") for v in value]


def course_handlers(prefix: str) -> list[tuple]:
    api = prefix + "api/courses"
    slug = r"/(?P<slug>[a-z][a-z0-9-]{1,39})"
    return [
        (api, CoursesAPI),
        (api + slug, CourseAPI),
        (api + slug + r"/roster", RosterAPI),
        (api + slug + r"/roster\.csv", RosterCSVAPI),
        (api + slug + r"/start", StartAllAPI),
        (api + slug + r"/stop", StopAllAPI),
        (api + slug + r"/progress", ProgressAPI),
        (api + slug + r"/distribute", DistributeAPI),
        (api + slug + r"/collect", CollectAPI),
        (api + slug + r"/return", ReturnAPI),
        (api + slug + r"/audit", AuditAPI),
    ]

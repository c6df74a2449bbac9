"""The course pages: ``/services/gpulab/courses`` (the courses the user teaches; admins see all
and create courses there) and ``/services/gpulab/courses/<slug>`` (staff and admins only), whose
buttons post to ``courses/<slug>/actions/<action>`` and come back with a message.

The same checks and actions as the API (:mod:`.courseapi`); the forms' actions are in
:mod:`.courseactions`. HTML without JavaScript: while a start-all runs the page reloads itself
every few seconds to show its progress.
"""

from __future__ import annotations

from tornado import web

from ...courses.model import CourseError
from ...courses.roster import create_groups
from ...ledger import BookingConflict, aio
from . import inputs, paging
from .base import refuse
from .courseapi import no_course
from .courseview import ROSTER_SORTS, course_view
from .pages import PageHandler

#: The largest whole number a course form field takes (minutes, seats, list indexes): past
#: every bound of the record (:mod:`...courses.parse`), short of a huge ``int()``.
MAX_FORM_NUMBER = 10**6


def form_number(text: str, key: str) -> int:
    """Form field ``key`` as a whole number of ASCII digits; ``ValueError`` saying so otherwise
    (the record's own bounds are checked when it is parsed)."""
    try:
        return inputs.whole_number(text, key, 0, MAX_FORM_NUMBER)
    except web.HTTPError as e:
        raise ValueError(e.log_message % e.args) from None


class CoursePageBase(PageHandler):
    @property
    def courses(self):
        return self.settings["gpulab_courses"]

    async def course_for(self, slug: str):
        if self.current_user is None:
            raise self.not_logged_in()
        course = await self.courses.course(slug)
        if course is None:
            raise refuse(404, no_course(self.courses, slug))
        if self.can_admin or await self.courses.is_staff(self.who, course):
            return course
        raise refuse(
            403,
            f"The page of course {course.slug} is for its staff (group {course.staff_group}) "
            "and admins.",
        )

    def back(self, slug: str, kind: str, message: str) -> None:
        self.flash(kind, message)
        self.redirect(f"{self.prefix}courses/{slug}")


class CoursesPage(CoursePageBase):
    @web.authenticated
    async def get(self):
        stored = await aio.call(self.courses.store.all)
        groups = None if self.can_admin else await self.courses.groups_of(self.who)
        mine = [s for s in stored if groups is None or s.course.staff_group in groups]
        profiles = [p for p in self.state.lab.profiles]
        self.render_page(
            "gpulab_courses.html",
            courses=mine,
            profiles=profiles,
            attention=self.courses.attention if self.can_admin else {},
            flash=self.pop_flash(),
        )

    async def post(self):
        """Create a course from the admin's form: its fields (slug, title, term, profile,
        groups, seats), or a whole record as JSON (``record``)."""
        if self.current_user is None or not self.can_admin:
            raise refuse(403, "Only admins (custom:gpulab:admin) create courses.")
        arg = lambda k: self.get_body_argument(k, "").strip()  # noqa: E731
        try:
            if arg("record"):
                try:
                    record = inputs.json_value(arg("record"))
                except ValueError as e:
                    raise ValueError(f"the record is not JSON ({e})") from None
            else:
                record = {
                    k: arg(k)
                    for k in ("slug", "title", "term", "roster_group", "staff_group")
                    if arg(k)
                }
                if arg("profile"):
                    record["profiles"] = [arg("profile")]
                for key in ("reserve", "lead_minutes"):
                    if arg(key):
                        record[key] = form_number(arg(key), key)
            course = self.courses.parse(record)
        except ValueError as e:
            errors = e.errors if isinstance(e, CourseError) else [str(e)]
            self.flash("danger", "Course not created: " + "; ".join(errors))
            self.redirect(self.prefix + "courses")
            return
        if await self.courses.course(course.slug) is not None:
            self.flash("danger", f"Course {course.slug} exists already.")
            self.redirect(self.prefix + "courses")
            return
        try:
            await self.courses.save(course, by=self.who, origin="admin")
        except (BookingConflict, CourseError) as e:
            why = e.message if isinstance(e, BookingConflict) else "; ".join(e.errors)
            self.flash("danger", f"Course not created: {why}")
            self.redirect(self.prefix + "courses")
            return
        await create_groups(self.hub, course, self.courses.groups_owner)
        self.back(course.slug, "success", f"Course {course.slug} created.")


class CoursePage(CoursePageBase):
    @web.authenticated
    async def get(self, slug: str):
        course = await self.course_for(slug)
        profile = self.courses.profile_of(course)
        seat_check = (
            await aio.call(self.state.image_needs.seat_check, profile, self.state.inventory)
            if profile is not None
            else None
        )
        # the roster 200 at a time (?offset=&limit=&user=&sort=), with previous/next links
        page = self.page(ROSTER_SORTS, ("user",), paginated=False, default_sort="user")
        data = await course_view(
            self.state, self.hub, self.courses, course, reader=self.current_user, page=page
        )
        data["roster_pager"] = paging.pager(page, data["roster_total"])
        pid = (self.get_signed_cookie("gpulab-csv", max_age_days=1) or b"").decode()
        kept = self.courses.csv_previews.get(pid, course.slug, self.who) if pid else None
        if pid:
            self.clear_cookie("gpulab-csv", path=self.prefix)
        self.render_page(
            "gpulab_course.html",
            data=data,
            course=course,
            running=bool(data["progress"] and not data["progress"]["finished_at"]),
            preview={**kept[1], "id": pid} if kept else None,
            tz_name=str(self.state.lab.tz),
            seat_check=seat_check,
            flash=self.pop_flash(),
        )

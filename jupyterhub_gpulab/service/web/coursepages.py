"""The course pages: ``/services/gpulab/courses`` (the courses the user teaches; admins see all
and create courses there) and ``/services/gpulab/courses/<slug>`` (staff and admins only), whose
buttons post to ``courses/<slug>/actions/<action>`` and come back with a message.

The same checks and actions as the API (:mod:`.courseapi`); HTML without JavaScript: while a
start-all runs the page reloads itself every few seconds to show its progress.
"""

from __future__ import annotations

import json

from tornado import web

from ...courses.collect import ASSIGNMENT
from ...courses.model import CourseError, parse_course
from ...courses.roster import csv_preview, known_users, parse_csv, roster_of, set_members
from ...ledger import aio
from . import inputs
from .base import refuse
from .courseapi import course_view
from .pages import PageHandler


class CoursePageBase(PageHandler):
    @property
    def courses(self):
        return self.settings["gpulab_courses"]

    async def course_for(self, slug: str):
        if self.current_user is None:
            raise refuse(403, "Log in to the hub first (and send the form's _xsrf token).")
        course = await self.courses.course(slug)
        if course is None:
            raise refuse(404, f"No course {inputs.shown(slug)}.")
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
        self.render_page("gpulab_courses.html", courses=mine, flash=self.pop_flash())

    async def post(self):
        """Create a course from the admin's form (a JSON record)."""
        if self.current_user is None or not self.can_admin:
            raise refuse(403, "Only admins (custom:gpulab:admin) create courses.")
        try:
            record = json.loads(self.get_body_argument("record", ""))
            course = parse_course(record, profiles=self.courses.profiles)
        except ValueError as e:
            errors = e.errors if isinstance(e, CourseError) else [f"not JSON: {e}"]
            self.flash("danger", "Course not created: " + "; ".join(errors))
            self.redirect(self.prefix + "courses")
            return
        if await self.courses.course(course.slug) is not None:
            self.flash("danger", f"Course {course.slug} exists already.")
            self.redirect(self.prefix + "courses")
            return
        await aio.call(self.courses.store.put, course, by=self.who, origin="admin")
        if self.courses.groups_owner.may_edit:  # else the provider creates them at logins
            await set_members(self.hub, course.roster_group, set(), set())
            await set_members(self.hub, course.staff_group, set(), set())
        self.back(course.slug, "success", f"Course {course.slug} created.")


class CoursePage(CoursePageBase):
    @web.authenticated
    async def get(self, slug: str):
        course = await self.course_for(slug)
        data = await course_view(self.state, self.hub, self.courses, course)
        preview = self.get_signed_cookie("gpulab-csv", max_age_days=1)
        if preview:
            self.clear_cookie("gpulab-csv", path=self.prefix)
        self.render_page(
            "gpulab_course.html",
            data=data,
            course=course,
            running=bool(data["progress"] and not data["progress"]["finished_at"]),
            preview=json.loads(preview) if preview else None,
            flash=self.pop_flash(),
        )


class CourseActionPage(CoursePageBase):
    """``POST courses/<slug>/actions/(start|stop|distribute|collect|return|add|remove|csv|
    content)``."""

    async def post(self, slug: str, action: str):
        course = await self.course_for(slug)
        arg = self.get_body_argument
        by = self.who
        if action == "start":
            run = await self.courses.start_all(course, by=by)
            return self.back(slug, "info", f"Starting {len(run.servers)} servers.")
        if action == "stop":
            run = await self.courses.stop_all(course, by=by)
            return self.back(slug, "success", f"Stopped: {run.summary()}.")
        if action == "distribute":
            report = await self.courses.distribute(course, by=by)
            n = sum(1 for v in report.values() if v == "pulled")
            return self.back(slug, "success", f"Pulled into {n} running servers.")
        if action in ("collect", "return"):
            name = arg("assignment", "").strip()
            if not ASSIGNMENT.match(name):
                return self.back(slug, "danger", f"{inputs.shown(name)} is not an assignment name.")
            if action == "collect":
                report = await self.courses.collect(course, name, by=by)
                missing = sorted(u for u, r in report.items() if r["state"] == "missing")
                big = sorted(u for u, r in report.items() if r["state"] == "oversized")
                ok = len(report) - len(missing) - len(big)
                msg = f"Collected {name}: {ok} of {len(report)} submitted"
                msg += f"; missing: {', '.join(missing)}" if missing else ""
                msg += f"; oversized: {', '.join(big)}" if big else ""
            else:
                report = await self.courses.give_back(course, name, by=by)
                n = sum(1 for r in report.values() if r["state"] == "returned")
                msg = f"Feedback on {name} returned to {n} of {len(report)} students."
            return self.back(slug, "success", msg + ".")
        if action in ("add", "remove", "csv"):
            source = self.courses.roster_source(course)
            if not source["editable"]:
                return self.back(slug, "danger", source["description"] + " Nothing changed.")
        if action in ("add", "remove"):
            user = inputs.name(arg("user", "").strip(), "user name")
            if action == "add" and not await known_users(self.hub, {user}):
                return self.back(slug, "danger", f"No user {user!r} on the hub; nothing changed.")
            add, remove = ({user}, set()) if action == "add" else (set(), {user})
            await set_members(self.hub, course.roster_group, add, remove)
            await aio.call(
                self.courses.store.record,
                course.slug,
                by,
                "roster",
                {"added": sorted(add), "removed": sorted(remove)},
            )
            return self.back(
                slug, "success", f"{user} {'added to' if add else 'removed from'} the roster."
            )
        if action == "csv":
            return await self._csv(course, arg("csv", ""), arg("apply", "") == "1")
        if action == "content":
            return await self._content(
                course, arg("repo", "").strip(), arg("branch", "").strip(), arg("dir", "").strip()
            )
        raise refuse(404, f"No action {inputs.shown(action)}.")

    async def _csv(self, course, text: str, apply: bool):
        if self.request.files.get("file"):
            text = self.request.files["file"][0]["body"].decode("utf-8", "replace")
        try:
            names = parse_csv(text)
        except ValueError as e:
            return self.back(course.slug, "danger", str(e))
        current = await roster_of(self.hub, course)
        known = await known_users(self.hub, set(names) - current) | (set(names) & current)
        pv = csv_preview(names, current, known)
        if not apply:
            self.set_signed_cookie(
                "gpulab-csv",
                json.dumps({**pv.as_dict(), "csv": "\n".join(names)[:3000]}),
                expires_days=None,
                path=self.prefix,
                httponly=True,
            )
            return self.back(course.slug, "info", "Preview below: nothing changed yet.")
        if pv.unknown:
            return self.back(
                course.slug,
                "danger",
                f"Unknown users, nothing changed: {', '.join(pv.unknown[:20])}.",
            )
        await set_members(self.hub, course.roster_group, set(pv.added), set(pv.removed))
        await aio.call(self.courses.store.record, course.slug, self.who, "roster-csv", pv.as_dict())
        return self.back(
            course.slug, "success", f"Roster: {len(pv.added)} added, {len(pv.removed)} removed."
        )

    async def _content(self, course, repo: str, branch: str, folder: str):
        from ...courses.content import check_reachable

        record = course.to_dict()
        record["content"] = record["content"] + [
            {"repo": repo, "branch": branch or "main", "dir": folder}
        ]
        try:
            new = parse_course(record, profiles=self.courses.profiles)
        except CourseError as e:
            return self.back(course.slug, "danger", "Not added: " + "; ".join(e.errors))
        problem = check_reachable(repo, branch or "main")
        if problem:
            return self.back(course.slug, "danger", f"Not added: {problem}.")
        await aio.call(self.courses.store.put, new, by=self.who)
        return self.back(
            course.slug, "success", f"Added {repo}: pulled at every start, or now with Distribute."
        )


def course_pages(prefix: str) -> list[tuple]:
    slug = r"(?P<slug>[a-z][a-z0-9-]{1,39})"
    return [
        (prefix + "courses", CoursesPage),
        (prefix + "courses/" + slug, CoursePage),
        (prefix + "courses/" + slug + r"/actions/(?P<action>[a-z]+)", CourseActionPage),
    ]

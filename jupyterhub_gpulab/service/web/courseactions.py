"""The course page's forms: ``POST courses/<slug>/actions/<action>``, each answered with a
redirect back to the page and a message (no JavaScript needed). The same checks and the same
manager calls as the API (:mod:`.courseapi`): staff of the course or admins only, every record
change saved with its sessions' reservations (a session the lab cannot hold is refused, naming
the conflict, and nothing changes).

Actions: ``start``, ``stop``, ``distribute``, ``collect``, ``return`` (``assignment``); ``add``,
``remove`` (``user``), ``csv`` (a file or ``csv`` text: a preview; ``apply`` = the preview's id
applies it); and
record edits: ``content`` / ``content-remove`` (``repo``, ``branch``, ``dir`` / ``index``),
``weekly`` (``days``, ``start``, ``end``, ``from``, ``until``), ``date`` (``start``, ``end``),
``session-remove`` (``kind``, ``index``), ``assignment`` / ``assignment-remove`` (``name``,
``due``), ``seats`` (``prestart``, ``lead_minutes``, ``reserve``, ``grace_minutes``,
``reserve_lead_minutes``) and ``record`` (the
whole record as JSON; only admins change its groups and ``shared_folder``).
"""

from __future__ import annotations

from tornado import web

from ...courses.assignments import UndeclaredAssignment
from ...courses.collect import ASSIGNMENT
from ...courses.model import CourseError
from ...courses.roster import csv_preview, known_users, parse_csv, roster_of
from ...ledger import BookingConflict
from ...units import counted
from . import inputs
from .base import refuse
from .courseapi import ADMIN_ONLY
from .coursepages import CoursePageBase, form_number

#: Actions that change the course record (the rest act on servers, files or the roster).
RECORD_ACTIONS = (
    "content",
    "content-remove",
    "weekly",
    "date",
    "session-remove",
    "assignment",
    "assignment-remove",
    "seats",
    "record",
)


class CourseActionPage(CoursePageBase):
    def body_limit(self) -> int:
        if self.path_kwargs.get("action") == "csv":  # a roster of up to 5,000 names
            return inputs.MAX_CSV_BODY
        return super().body_limit()

    async def post(self, slug: str, action: str):
        course = await self.course_for(slug)
        arg = self.get_body_argument
        if action in RECORD_ACTIONS:
            return await self._edit(course, action)
        if action == "start":
            run = await self.courses.start_all(course, by=self.who)
            return self.back(slug, "info", f"Starting {counted(len(run.servers), 'server')}.")
        if action == "stop":
            run = await self.courses.stop_all(course, by=self.who)
            return self.back(slug, "success", f"Stopped: {run.summary()}.")
        if action == "distribute":
            done = await self.courses.distribute(course, by=self.who)
            failed = any(v.startswith("failed") for v in done["report"].values())
            return self.back(slug, "warning" if failed else "success", done["message"])
        if action in ("collect", "return"):
            return await self._collect(course, action, arg("assignment", "").strip())
        if action in ("add", "remove", "csv"):
            source = self.courses.roster_source(course)
            if not source["editable"]:
                return self.back(slug, "danger", source["description"] + " Nothing changed.")
        if action in ("add", "remove"):
            return await self._one(course, action, arg("user", "").strip())
        if action == "csv":
            return await self._csv(course, arg("csv", ""), arg("apply", ""))
        raise refuse(404, f"No action {inputs.shown(action)}.")

    # -- files ----------------------------------------------------------------------------

    async def _collect(self, course, action: str, name: str):
        if not ASSIGNMENT.match(name):
            return self.back(
                course.slug, "danger", f"{inputs.shown(name)} is not an assignment name."
            )
        try:
            return await self._copy(course, action, name)
        except UndeclaredAssignment as e:
            return self.back(course.slug, "danger", str(e))

    async def _copy(self, course, action: str, name: str):
        if action == "collect":
            report = await self.courses.collect(course, name, by=self.who)
            missing = sorted(u for u, r in report.items() if r["state"] == "missing")
            big = sorted(u for u, r in report.items() if r["state"] == "oversized")
            failed = sorted(u for u, r in report.items() if r["state"] == "failed")
            links = sorted(u for u, r in report.items() if r["state"] == "skipped")
            ok = len(report) - len(missing) - len(big) - len(failed) - len(links)
            msg = f"Collected {name}: {ok} of {len(report)} submitted"
            for label, who in (
                ("missing", missing),
                ("oversized", big),
                ("failed", failed),
                ("skipped (a link on the path)", links),
            ):
                msg += f"; {label}: {', '.join(who)}" if who else ""
        else:
            report = await self.courses.give_back(course, name, by=self.who)
            n = sum(1 for r in report.values() if r["state"] == "returned")
            msg = f"Feedback on {name} returned to {n} of {counted(len(report), 'student')}"
        return self.back(course.slug, "success", msg + ".")

    # -- the roster -----------------------------------------------------------------------

    async def _one(self, course, action: str, user: str):
        try:
            user = inputs.name(user, "user name")
        except web.HTTPError as e:
            return self.back(course.slug, "danger", f"{e.log_message % e.args} Nothing changed.")
        if action == "add" and not await known_users(self.hub, {user}):
            return self.back(
                course.slug, "danger", f"No user {user!r} on the hub; nothing changed."
            )
        add, remove = ({user}, set()) if action == "add" else (set(), {user})
        stopped = await self.courses.edit_roster(course, by=self.who, add=add, remove=remove)
        where = "added to" if add else "removed from"
        also = "; their course server was stopped" if stopped else ""
        return self.back(course.slug, "success", f"{user} {where} the roster{also}.")

    async def _csv(self, course, text: str, apply: str):
        """Preview an uploaded CSV (kept server-side, its id in a cookie), or apply the
        preview whose id ``apply`` names, against the roster as it is now."""
        previews = self.courses.csv_previews
        if apply:
            kept = previews.get(apply, course.slug, self.who)
            if kept is None:
                return self.back(
                    course.slug,
                    "danger",
                    "That preview is gone (applied, over an hour old, or the service restarted): "
                    "upload the CSV again. Nothing changed.",
                )
            names = kept[0]
        else:
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
            pid = previews.put(course.slug, self.who, names, pv.as_dict())
            self.set_signed_cookie(
                "gpulab-csv", pid, expires_days=None, path=self.prefix, httponly=True
            )
            return self.back(course.slug, "info", "Preview below: nothing changed yet.")
        previews.drop(apply)
        if pv.unknown:
            return self.back(
                course.slug,
                "danger",
                f"Unknown users, nothing changed: {', '.join(pv.unknown[:20])}.",
            )
        await self.courses.edit_roster(
            course, by=self.who, add=set(pv.added), remove=set(pv.removed), action="roster-csv"
        )
        return self.back(
            course.slug, "success", f"Roster: {len(pv.added)} added, {len(pv.removed)} removed."
        )

    # -- the record -------------------------------------------------------------------------

    async def _edit(self, course, action: str):
        """Apply one record edit (module docstring): parse, check, book, save; or say why not."""
        record = course.to_dict()
        try:
            done = self._change(record, action)
        except ValueError as e:
            return self.back(course.slug, "danger", f"Not saved: {e}")
        if not self.can_admin:
            changed = [k for k in ADMIN_ONLY if record.get(k) != course.to_dict().get(k)]
            if changed:
                return self.back(
                    course.slug,
                    "danger",
                    f"Not saved: only an admin may change {', '.join(changed)}.",
                )
        try:
            new = self.courses.parse(record)
        except CourseError as e:
            return self.back(course.slug, "danger", "Not saved: " + "; ".join(e.errors))
        added = {(s.repo, s.branch) for s in new.content} - {
            (s.repo, s.branch) for s in course.content
        }
        for repo, branch in sorted(added):
            problem = await self.courses.check_content(new, repo, branch)
            if problem:
                return self.back(course.slug, "danger", f"Not saved: {problem}.")
        try:
            changed = await self.courses.save(new, by=self.who)
        except BookingConflict as e:
            return self.back(course.slug, "danger", f"Not saved: {e.message}")
        except CourseError as e:
            return self.back(course.slug, "danger", "Not saved: " + "; ".join(e.errors))
        return self.back(course.slug, "success", done if changed else "Nothing changed.")

    def _change(self, record: dict, action: str) -> str:
        """Change ``record`` in place for ``action``; the message on success. ``ValueError``
        says what is wrong with the form."""
        arg = lambda k: self.get_body_argument(k, "").strip()  # noqa: E731
        sessions = record["sessions"]
        if action == "content":
            src = {"repo": arg("repo"), "branch": arg("branch") or "main"}
            if arg("dir"):
                src["dir"] = arg("dir")
            record["content"].append(src)
            return f"Added {src['repo']}: pulled at every start, or now with Distribute."
        if action == "weekly":
            days = self.get_body_arguments("days")
            sessions["weekly"].append(
                {"days": days, "start": arg("start"), "end": arg("end"), "from": arg("from"),
                 "until": arg("until")}
            )  # fmt: skip
            return f"Weekly sessions added: {', '.join(days)} {arg('start')}-{arg('end')}."
        if action == "date":
            sessions["dates"].append({"start": arg("start"), "end": arg("end")})
            return f"Session added: {arg('start')} to {arg('end')}."
        if action == "assignment":
            record["assignments"].append({"name": arg("name"), "due": arg("due") or None})
            due = f", collected at {arg('due')}" if arg("due") else ""
            return f"Assignment {arg('name')} added{due}."
        if action == "assignment-remove":
            kept = [a for a in record["assignments"] if a["name"] != arg("name")]
            if len(kept) == len(record["assignments"]):
                raise ValueError(f"no assignment {inputs.shown(arg('name'))}")
            record["assignments"] = kept
            return f"Assignment {arg('name')} removed."
        if action in ("content-remove", "session-remove"):
            kind = "content" if action == "content-remove" else arg("kind")
            items = record["content"] if kind == "content" else sessions.get(kind)
            if not isinstance(items, list):
                raise ValueError("no such entry")
            index = form_number(arg("index"), "index")
            if index >= len(items):
                raise ValueError("no such entry (the page was out of date; reload it)")
            items.pop(index)
            return "Removed."
        if action == "seats":
            if self.get_body_argument("prestart-form", ""):
                record["prestart"] = self.get_body_argument("prestart", "") == "on"
            for key in ("lead_minutes", "reserve", "grace_minutes", "reserve_lead_minutes"):
                if arg(key):
                    record[key] = form_number(arg(key), key)
            started = (
                f"servers started {record['lead_minutes']} min before each session"
                if record.get("prestart", True)
                else "no pre-start"
            )
            return f"Saved: {started}; {counted(record['reserve'], 'seat')} reserved per session."
        if action == "record":
            try:
                body = inputs.json_value(arg("record"), "form field 'record'")
            except ValueError as e:
                raise ValueError(f"the record is not JSON ({e})") from None
            if not isinstance(body, dict):
                raise ValueError("the record must be a JSON object")
            if body.get("slug", record["slug"]) != record["slug"]:
                raise ValueError("the slug of a course cannot change")
            record.update(body)
            return "Saved."
        raise ValueError(f"no action {inputs.shown(action)}")

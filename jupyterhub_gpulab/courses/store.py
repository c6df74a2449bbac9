"""Course records in the ledger (tables ``courses``, ``course_audit``, ``course_prestarts``).

Synchronous, like the ledger (call it through :func:`jupyterhub_gpulab.ledger.aio.call`). Every
change writes its audit row in the same transaction: who, when, what.

    store = CourseStore(ledger.engine)
    store.declare(courses_from_config, by="config")   # at every service start
    store.put(course, by="admin", origin="admin")     # create or replace
    store.get("ml101") -> Course | None
    store.audit("ml101") -> [AuditEntry, ...]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from .. import clock
from ..ledger.db import READ
from ..ledger.schema import course_audit, course_deadlines, course_prestarts, courses
from .model import Course, CourseError
from .parse import parse_course

__all__ = ["AuditEntry", "CourseStore", "StoredCourse"]

#: The longest audit detail kept (characters of JSON); longer ones are cut with a note.
MAX_DETAIL = 20_000


@dataclass(frozen=True)
class StoredCourse:
    course: Course
    origin: str
    updated_at: datetime
    updated_by: str
    created_at: datetime | None = None


@dataclass(frozen=True)
class AuditEntry:
    at: datetime
    who: str
    course: str
    action: str
    detail: dict


def _utc(dt: datetime) -> datetime:
    from datetime import timezone

    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


class CourseStore:
    """Course records over the ledger's ``engine``."""

    def __init__(self, engine: sa.Engine):
        self.engine = engine

    def _read(self):
        return self.engine.connect().execution_options(**READ)

    @staticmethod
    def _audit(conn, who: str, slug: str, action: str, detail: dict) -> None:
        text = json.dumps(detail, default=str, sort_keys=True)
        if len(text) > MAX_DETAIL:
            text = json.dumps({"truncated": True, "head": text[:MAX_DETAIL]})
        conn.execute(
            course_audit.insert().values(
                at=clock.utcnow(), who=who, course=slug, action=action, detail=text
            )
        )

    def record(self, slug: str, who: str, action: str, detail: dict) -> None:
        """Audit an action on course ``slug`` that changes no record (start all, collect…)."""
        with self.engine.begin() as conn:
            self._audit(conn, who, slug, action, detail)

    def all(self) -> list[StoredCourse]:
        """Every readable stored course, by slug (:meth:`unreadable` lists the others)."""
        return self.checked()[0]

    def checked(self) -> tuple[list[StoredCourse], dict[str, list[str]]]:
        """``(readable courses, {slug: problems})``: a stored record that no longer parses
        (written by an older version, or edited in the database) is left out of the first and
        named in the second, so one broken record never stops the pages or the schedule."""
        with self._read() as conn:
            rows = conn.execute(sa.select(courses).order_by(courses.c.slug)).all()
        found, broken = [], {}
        for r in rows:
            try:
                found.append(self._stored(r))
            except (CourseError, ValueError, RecursionError) as e:
                broken[r.slug] = list(getattr(e, "errors", None) or [f"unreadable record: {e}"])
        return found, broken

    def unreadable(self) -> dict[str, list[str]]:
        """``{slug: problems}`` of the stored records that no longer parse."""
        return self.checked()[1]

    def get(self, slug: str) -> StoredCourse | None:
        """The stored course ``slug``; ``None`` when there is none or its record no longer
        parses (:meth:`checked`)."""
        with self._read() as conn:
            row = conn.execute(sa.select(courses).where(courses.c.slug == slug)).first()
        try:
            return self._stored(row) if row else None
        except (CourseError, ValueError, RecursionError):
            return None

    @staticmethod
    def _stored(row) -> StoredCourse:
        return StoredCourse(
            # unchecked against today's lab and bounds: an older record stays readable, and
            # the service lists what it no longer passes (CourseManager.declare)
            course=parse_course(json.loads(row.record), years=None),
            origin=row.origin,
            updated_at=_utc(row.updated_at),
            updated_by=row.updated_by,
            created_at=_utc(row.created_at),
        )

    def put(self, course: Course, *, by: str, origin: str = "admin", action: str = "") -> bool:
        """Create or replace ``course``; audits the difference. ``False`` when nothing changed."""
        record = course.to_dict()
        text = json.dumps(record, sort_keys=True)
        now = clock.utcnow()
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(courses).where(courses.c.slug == course.slug)).first()
            if row is None:
                conn.execute(
                    courses.insert().values(
                        slug=course.slug,
                        record=text,
                        origin=origin,
                        created_at=now,
                        updated_at=now,
                        updated_by=by,
                    )
                )
                self._audit(conn, by, course.slug, action or "create", {"record": record})
                return True
            if row.record == text:
                return False
            old = json.loads(row.record)
            changed = {
                k: {"from": old.get(k), "to": v} for k, v in record.items() if old.get(k) != v
            }
            conn.execute(
                courses.update()
                .where(courses.c.slug == course.slug)
                .values(record=text, updated_at=now, updated_by=by)
            )
            self._audit(conn, by, course.slug, action or "update", {"changed": changed})
            return True

    def delete(self, slug: str, *, by: str) -> bool:
        with self.engine.begin() as conn:
            n = conn.execute(courses.delete().where(courses.c.slug == slug)).rowcount
            if n:
                self._audit(conn, by, slug, "delete", {})
        return bool(n)

    def declare(self, declared: list[Course], *, by: str = "config") -> list[str]:
        """Store the courses declared in the config; the slugs changed. A course is written
        when it is new or when its record *in the config* changed since the last start (the
        config's version is kept in ``courses.declared``): edits made on the course page since
        then stay across restarts until the admin changes that course in the config."""
        changed = []
        for c in declared:
            text = json.dumps(c.to_dict(), sort_keys=True)
            with self._read() as conn:
                row = conn.execute(
                    sa.select(courses.c.declared).where(courses.c.slug == c.slug)
                ).first()
            if row is not None and row.declared == text:
                continue  # the config did not change: the stored record (maybe edited) stays
            if self.put(c, by=by, origin="config"):
                changed.append(c.slug)
            with self.engine.begin() as conn:
                conn.execute(courses.update().where(courses.c.slug == c.slug).values(declared=text))
        return changed

    def audit(self, slug: str | None = None, limit: int = 200) -> list[AuditEntry]:
        q = sa.select(course_audit).order_by(course_audit.c.id.desc()).limit(limit)
        if slug is not None:
            q = q.where(course_audit.c.course == slug)
        with self._read() as conn:
            rows = conn.execute(q).all()
        return [
            AuditEntry(_utc(r.at), r.who, r.course, r.action, json.loads(r.detail)) for r in rows
        ]

    # -- pre-start bookkeeping -----------------------------------------------------------------

    def begin_prestart(
        self, slug: str, session_start: datetime, *, stale_after_s: float = 120.0
    ) -> bool:
        """Whether the caller runs the pre-start of ``slug``'s session at ``session_start``:
        ``True`` when none began (it is recorded now), or when one began but was cut off (not
        finished, no heartbeat for ``stale_after_s`` seconds: its service was killed) and the
        caller takes it over; ``False`` when one finished or runs (another pass, another
        service, or before a restart). Atomic across processes (the primary key settles a
        race on PostgreSQL; SQLite writers are serialised)."""
        now = clock.utcnow()
        key = (course_prestarts.c.course == slug, course_prestarts.c.session_start == session_start)
        stale = now - timedelta(seconds=stale_after_s)
        try:
            with self.engine.begin() as conn:
                row = conn.execute(sa.select(course_prestarts).where(*key)).first()
                if row is None:
                    conn.execute(
                        course_prestarts.insert().values(
                            course=slug, session_start=session_start, started_at=now,
                            heartbeat_at=now, summary="",
                        )
                    )  # fmt: skip
                    return True
                taken = conn.execute(
                    course_prestarts.update()
                    .where(
                        *key,
                        course_prestarts.c.finished_at.is_(None),
                        sa.func.coalesce(
                            course_prestarts.c.heartbeat_at, course_prestarts.c.started_at
                        )
                        < stale,
                    )
                    .values(heartbeat_at=now)
                ).rowcount
                return taken == 1
        except IntegrityError:
            return False  # another service recorded it first

    def heartbeat(self, slug: str, session_start: datetime) -> None:
        """The running pre-start of that session is alive (see :meth:`begin_prestart`)."""
        with self.engine.begin() as conn:
            conn.execute(
                course_prestarts.update()
                .where(
                    course_prestarts.c.course == slug,
                    course_prestarts.c.session_start == session_start,
                )
                .values(heartbeat_at=clock.utcnow())
            )

    def finish_prestart(self, slug: str, session_start: datetime, summary: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                course_prestarts.update()
                .where(
                    course_prestarts.c.course == slug,
                    course_prestarts.c.session_start == session_start,
                )
                .values(finished_at=clock.utcnow(), summary=summary[:2000])
            )

    def prestarts(self, slug: str) -> dict[datetime, tuple[datetime | None, str]]:
        """``{session_start: (finished_at, summary)}`` of the pre-starts that ran."""
        with self._read() as conn:
            rows = conn.execute(
                sa.select(course_prestarts).where(course_prestarts.c.course == slug)
            ).all()
        return {
            _utc(r.session_start): (_utc(r.finished_at) if r.finished_at else None, r.summary)
            for r in rows
        }

    # -- deadlines ---------------------------------------------------------------------------

    def begin_deadline(
        self, slug: str, assignment: str, due_at: datetime, *, stale_after_s: float = 600.0
    ) -> bool:
        """Whether the caller collects ``assignment`` of ``slug`` for its deadline ``due_at``:
        ``True`` once (recorded now; again only for a collect cut off ``stale_after_s`` ago
        without finishing), ``False`` for every other caller and pass."""
        now = clock.utcnow()
        key = (
            course_deadlines.c.course == slug,
            course_deadlines.c.assignment == assignment,
            course_deadlines.c.due_at == due_at,
        )
        try:
            with self.engine.begin() as conn:
                row = conn.execute(sa.select(course_deadlines).where(*key)).first()
                if row is None:
                    conn.execute(
                        course_deadlines.insert().values(
                            course=slug, assignment=assignment, due_at=due_at, started_at=now,
                            summary="",
                        )
                    )  # fmt: skip
                    return True
                return (
                    conn.execute(
                        course_deadlines.update()
                        .where(
                            *key,
                            course_deadlines.c.finished_at.is_(None),
                            course_deadlines.c.started_at < now - timedelta(seconds=stale_after_s),
                        )
                        .values(started_at=now)
                    ).rowcount
                    == 1
                )
        except IntegrityError:
            return False

    def finish_deadline(self, slug: str, assignment: str, due_at: datetime, summary: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                course_deadlines.update()
                .where(
                    course_deadlines.c.course == slug,
                    course_deadlines.c.assignment == assignment,
                    course_deadlines.c.due_at == due_at,
                )
                .values(finished_at=clock.utcnow(), summary=summary[:2000])
            )

    def deadlines(self, slug: str) -> dict[tuple[str, datetime], tuple[datetime | None, str]]:
        """``{(assignment, due_at): (finished_at, summary)}`` of the deadlines collected."""
        with self._read() as conn:
            rows = conn.execute(
                sa.select(course_deadlines).where(course_deadlines.c.course == slug)
            ).all()
        return {
            (r.assignment, _utc(r.due_at)): (
                _utc(r.finished_at) if r.finished_at else None,
                r.summary,
            )
            for r in rows
        }

"""The OpenAPI description of the courses API (:mod:`.courseapi`), merged into
:mod:`.openapi`'s document: every path, and every response's schema (errors too)."""

from __future__ import annotations

from .apischemas import (
    BOOL,
    INTEGER,
    NUM,
    NUMBER,
    STR,
    STRING,
    STRINGS,
    TIME,
    TIME_OR_NULL,
    _described,
    array,
    obj,
    ref,
)
from .paging import paging_parameters

#: A course record as ``c.GPULabCourses.courses`` holds it (courses/model.py says each key).
RECORD = {
    "type": "object",
    "required": ["slug", "title", "roster_group", "staff_group", "profiles", "sessions"],
    "properties": {
        "slug": STRING,
        "title": STRING,
        "term": STRING,
        "roster_group": STRING,
        "staff_group": STRING,
        "profiles": STRINGS,
        "content": array(obj({"repo": STRING, "branch": STRING, "dir": STRING})),
        "shared_folder": STRING,
        "mount_home": BOOL,
        "sessions": {"type": "object"},
        "lead_minutes": INTEGER,
        "prestart": BOOL,
        "reserve": INTEGER,
        "reserve_lead_minutes": {"type": ["integer", "null"]},
        "grace_minutes": INTEGER,
        "assignments": array(obj({"name": STRING, "due": STR})),
        "gpu_hours": NUM,
        "collect_max_bytes": INTEGER,
    },
}

PROGRESS = obj(
    {
        "course": STRING,
        "session_start": TIME_OR_NULL,
        "started_at": TIME,
        "finished_at": TIME_OR_NULL,
        "summary": STRING,
        "counts": {"type": "object", "additionalProperties": INTEGER},
        "servers": array(
            obj(
                {
                    "user": STRING,
                    "state": {
                        "type": "string",
                        "enum": [
                            "waiting",
                            "starting",
                            "ready",
                            "refused",
                            "failed",
                            "stopped",
                            "not-running",
                        ],
                    },
                    "reason": STRING,
                    "attempts": INTEGER,
                }
            )
        ),
    },
    "A start-all (or stop-all): '41 of 60 ready, 3 refused: no free slice'.",
    nullable=True,
)

#: A student's last content pull (courses/contentstatus.py ``describe``); null: not known yet.
CONTENT = obj(
    {
        "state": {"type": "string", "enum": ["pulled", "kept", "failed"]},
        "at": TIME,
        "message": {
            "type": "string",
            "maxLength": 400,
            "description": "One line: 'pulled at …', 'failed: ~/ml101: …', 'history "
            "rewritten: your copy kept in ~/ml101_backup_…; pulled at …'",
        },
        "sources": array(
            obj(
                {
                    "dir": STRING,
                    "state": {"type": "string", "enum": ["pulled", "kept", "failed"]},
                    "at": TIME,
                    "backup": STRING,
                    "reason": {"type": "string", "maxLength": 200},
                }
            )
        ),
    },
    nullable=True,
)

COPY_REPORT = obj(
    {
        "at": TIME,
        "who": STRING,
        "done": _described(STRINGS, "who submitted (collect) or got feedback (return)"),
        "skipped": array(obj({"user": STRING, "state": STRING, "reason": STRING})),
        "of": INTEGER,
    },
    "the assignment's latest collect or return (null: none yet)",
    nullable=True,
)

ROSTER_ROW = obj(
    {
        "user": STRING,
        "server": STRING,
        "url": STR,
        "last_activity": TIME_OR_NULL,
        "slice": STR,
        "slice_name": _described(STR, "the slice as people name it: shared seat 1 of 4 …"),
        "gpu_percent": NUM,
        "gpu_hours_7d": NUMBER,
        "prestart": STR,
        "reason": _described(STRING, "why it did not start, to the staff"),
        "content": CONTENT,
    }
)
_VIEW = {
    "course": {"$ref": "#/components/schemas/CourseRecord"},
    "server_name": STRING,
    "roster_source": obj(
        {
            "owner": {"type": "string", "enum": ["hub", "oidc", "lti"]},
            "editable": BOOL,
            "description": STRING,
        }
    ),
    "sessions": array(
        obj(
            {
                "start": TIME,
                "end": TIME,
                "prestart_at": TIME,
                "prestart": STR,
                "reserved": obj(
                    {"id": INTEGER, "count": INTEGER, "in_use": INTEGER}, nullable=True
                ),
            }
        ),
        "the next 60 days' sessions (at most 20); prestart: its summary once run; reserved: "
        "its booking (null: none)",
    ),
    "attention": array(
        STRING,
        "why the course needs an admin's attention (a declared or stored record that does "
        "not parse, a profile the lab lost); empty when it does not",
    ),
    "reservation": obj(
        {
            "seats": INTEGER,
            "lead_minutes": INTEGER,
            "grace_minutes": INTEGER,
            "profile": STRING,
            "problems": STRINGS,
            "calendar": array({"type": "object"}),
        }
    ),
    "assignments": array(
        obj(
            {
                "name": STRING,
                "due": TIME_OR_NULL,
                "collected": STR,
                "last_collect": COPY_REPORT,
                "last_return": COPY_REPORT,
            }
        )
    ),
    "budget": obj({"gpu_hours": NUM, "used": NUMBER, "since": TIME}),
    "progress": {"$ref": "#/components/schemas/CourseProgress"},
    "audit": array(obj({"at": TIME, "who": STRING, "action": STRING})),
    "my_server": obj(
        {"user": STRING, "state": STRING, "url": STR},
        "the reader's own course server (the staff folder is mounted there; null unless "
        "the reader is on the course's staff); url while it runs, else null",
        nullable=True,
    ),
}
#: the roster a page at a time, ``_pagination`` beside it; with the pagination Accept header
#: the page's rows are JupyterHub's ``items`` (VIEW_PAGE)
VIEW = obj({**_VIEW, "roster": array(ROSTER_ROW), "_pagination": ref("Pagination")})
VIEW_PAGE = obj({"items": array(ROSTER_ROW), "_pagination": ref("Pagination"), **_VIEW})
ROSTER_ANSWER = "the course, a page of its roster: CoursePage (pagination header), else CourseView"

REPORT = {
    "type": "object",
    "description": "per student: state submitted | missing | skipped | oversized | failed "
    "(collect) or returned | no-feedback | skipped | oversized | failed (return), with bytes, "
    "files, modified, folder, reason where they apply (skipped: a link on the path)",
    "additionalProperties": obj({"state": STRING}),
}

PREVIEW = obj({"added": STRINGS, "removed": STRINGS, "unknown": STRINGS, "kept": STRINGS})


def _listing() -> dict:
    """``GET courses``: the caller's courses; for admins also ``attention``."""
    item = {"slug": STRING, "title": STRING, "term": STRING, "origin": STRING}
    schema = obj({"courses": array(obj({**item, "attention": STRINGS}))})
    schema["properties"]["attention"] = {
        "type": "object",
        "additionalProperties": STRINGS,
        "description": "admins only: every course needing attention (its slug, or courses[i] "
        "for a declared record without a valid slug) and why; such a course is not "
        "pre-started and its sessions are not booked until an admin fixes it",
    }
    return schema


def course_schemas() -> dict:
    ok = {"status": INTEGER, "message": STRING}
    return {
        "CourseRecord": RECORD,
        "CourseProgress": PROGRESS,
        "CourseView": VIEW,
        "CoursePage": VIEW_PAGE,
        "CourseAnswer": {
            "if": {"required": ["items"]},
            "then": ref("CoursePage"),
            "else": ref("CourseView"),
        },  # fmt: skip  # fmt: skip
        "Courses": _listing(),
        "CourseSaved": obj({**ok, "course": {"$ref": "#/components/schemas/CourseRecord"}}),
        "CourseRun": obj({**ok, "progress": {"$ref": "#/components/schemas/CourseProgress"}}),
        "CourseProgressOnly": obj({"progress": {"$ref": "#/components/schemas/CourseProgress"}}),
        "CourseReport": obj({**ok, "report": REPORT}),
        "Distributed": obj(
            {
                **ok,
                "report": {"type": "object", "additionalProperties": STRING},
                "content": {"type": "object", "additionalProperties": CONTENT},
            }
        ),
        "RosterPreview": obj({**ok, "preview": PREVIEW}),
        "CourseAudit": obj(
            {
                "audit": array(
                    obj({"at": TIME, "who": STRING, "action": STRING, "detail": {"type": "object"}})
                )
            }
        ),
    }


def course_paths(op, json, ref) -> dict:
    """``paths`` for the courses API, built with openapi.py's ``_op``/``_json``/``ref``."""
    from ...hub.hubconfig import ADMIN_SCOPE

    bad = {"400": {"$ref": "#/components/responses/BadRequest"}}
    missing = {"404": {"$ref": "#/components/responses/NotFound"}}
    conflict = {"409": {"$ref": "#/components/responses/Conflict"}}
    staff = "The course's staff (its staff group) or `custom:gpulab:admin`."
    slug = [{"name": "slug", "in": "path", "required": True, "schema": {"type": "string"}}]
    body = {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}}

    def staff_op(summary, ok, **kw):
        return {**op(summary, None, {**ok, **missing}, **kw), "description": staff}

    def each(path, ops):
        return {f"/courses/{{slug}}{path}": {"parameters": slug, **ops}}

    return {
        "/courses": {
            "get": op(
                "The courses I may see (admins: all; staff: theirs)",
                None,
                {"200": json(ref("Courses"), "courses")},
            ),
            "post": op(
                "Create a course (a record, as in c.GPULabCourses.courses); its sessions' seats "
                "are booked, or a 409 names the session the lab cannot hold",
                ADMIN_SCOPE,
                {"201": json(ref("CourseSaved"), "created"), **bad, **conflict},
                requestBody=body,
            ),
        },
        **each(
            "",
            {
                "get": staff_op(
                    "The course: roster with servers, sessions, reservations, assignments, "
                    "budget, progress, audit",
                    {"200": json(ref("CourseAnswer"), ROSTER_ANSWER), **bad},
                    parameters=paging_parameters(
                        ("user",), {"user": "exact match"}, ties="none", default="user"
                    ),  # fmt: skip
                ),
                "put": staff_op(
                    "Change the record (only admins change its groups, shared_folder and "
                    "mount_home); saved with its sessions' reservations, or a 409 names the "
                    "conflict and nothing changes",
                    {"200": json(ref("CourseSaved"), "saved"), **bad, **conflict},
                    requestBody=body,
                ),
            },
        ),
        **each(
            "/roster",
            {
                "post": staff_op(
                    "Add or remove students ({add: [...], remove: [...]}); a removed "
                    "student's running course server is stopped (the message names them); an "
                    "unknown user changes nothing; a 409 when the identity provider owns the "
                    "roster",
                    {"200": json(ref("Done"), "done"), **bad, **conflict},
                    requestBody=body,
                )
            },
        ),
        **each(
            "/roster.csv",
            {
                "post": staff_op(
                    "A CSV of usernames: a preview of who is added, removed, unknown; "
                    "?apply=1 applies it (refused while any name is unknown) and stops the "
                    "removed students' running course servers",
                    {"200": json(ref("RosterPreview"), "preview or applied"), **bad, **conflict},
                )
            },
        ),
        **each(
            "/start",
            {
                "post": staff_op(
                    "Start every roster member's course server",
                    {"202": json(ref("CourseRun"), "started")},
                )
            },  # fmt: skip
        ),
        **each(
            "/stop",
            {"post": staff_op("Stop them", {"200": json(ref("CourseRun"), "stopped")})},
        ),
        **each(
            "/progress",
            {
                "get": staff_op(
                    "The latest start-all", {"200": json(ref("CourseProgressOnly"), "progress")}
                )
            },  # fmt: skip
        ),
        **each(
            "/distribute",
            {
                "post": staff_op(
                    "Pull the content into running course servers now",
                    {"200": json(ref("Distributed"), "per student")},
                )
            },  # fmt: skip
        ),
        **each(
            "/collect",
            {
                "post": staff_op(
                    "Copy each student's ~/assignments/<assignment> into the course "
                    "folder ({assignment}; 400 for one the course does not declare, when it "
                    "declares any)",
                    {"200": json(ref("CourseReport"), "per student"), **bad},
                    requestBody=body,
                )
            },  # fmt: skip
        ),
        **each(
            "/return",
            {
                "post": staff_op(
                    "Return feedback/<assignment>/<student> into each home",
                    {"200": json(ref("CourseReport"), "per student"), **bad},
                    requestBody=body,
                )
            },  # fmt: skip
        ),
        **each(
            "/audit",
            {
                "get": staff_op(
                    "Who changed what, when", {"200": json(ref("CourseAudit"), "newest first")}
                )
            },  # fmt: skip
        ),
    }

"""The waitlist and reservations in the JSON API (routes in :func:`queue_handlers`)::

GET    waitlist             my queue entries (position, estimate, offer, or why the
                            queue passed me over); the whole queue too with
                            custom:gpulab:read                                (any user)
POST   waitlist             join the queue for a profile ({"profile": slug})  (any user)
DELETE waitlist/<profile>   leave that queue (releasing a held offer)         (any user)
GET    bookings             reservations from now, and the capacity calendar:
                            reserved vs available per profile per hour
                            (?hours=, default 336: two weeks)                 (read)
"""

from __future__ import annotations

from datetime import datetime

from ... import clock
from ...lab.policy import PolicyContext
from ...lab.profiles import entitled_in
from ...ledger import aio
from .apischemas import INT, INTEGER, NUM, STR, STRING, STRINGS, TIME, TIME_OR_NULL, array, obj
from .base import JSONHandler, refuse
from .inputs import shown, whole_number

#: Longest capacity calendar the API draws (hours): four weeks.
MAX_HOURS = 24 * 28


def _iso(t: datetime | None) -> str | None:
    return t.isoformat() if t is not None else None


def entry_view(e, position=None) -> dict:
    return {
        "id": e.id,
        "user": e.user,
        "profile": e.profile,
        "state": e.state,
        "priority": e.priority,
        "joined_at": _iso(e.joined_at),
        "offer_until": _iso(e.offer_until),
        "message": e.message,
        "position": position[0] if position else None,
        "estimate_min": round(position[1] / 60, 1)
        if position and position[1] is not None
        else None,
    }


def my_entries(ledger, name: str) -> list[dict]:
    """``name``'s queue entries with position and estimate, and for each profile whose latest
    entry the queue passed over (``refused``: their budget was spent, the profile no longer
    theirs) that entry, whose ``message`` says why (blocks: reads the ledger)."""
    latest = {}
    for e in ledger.entries_of(name):  # newest first
        latest.setdefault(e.profile, e)
    mine = [e for e in latest.values() if e.state in ("waiting", "offered", "refused")]
    return [
        entry_view(e, ledger.queue_position(name, e.profile) if e.state != "refused" else None)
        for e in mine
    ]


async def join_queue(state, user: dict, slug: object) -> tuple[dict, str]:
    """Queue ``user`` (the hub's model) for profile ``slug``: ``(entry view, message)``. A slug
    that is not a GPU profile the user may use is a 400 naming the ones they may queue for."""
    ctx = PolicyContext.for_user(user.get("groups") or [], bool(user.get("admin")), state.lab)
    mine = {p.slug: p for p in entitled_in(state.lab.profiles, ctx)}
    profile = mine.get(slug) if isinstance(slug, str) else None
    if profile is None or not profile.wants_gpu:
        gpu = ", ".join(s for s, p in mine.items() if p.wants_gpu) or "none"
        raise refuse(
            400, f"{shown(slug)} is not a GPU profile you may use; queue for one of: {gpu}."
        )
    ledger, name = state.ledger, user["name"]

    def join():
        e = ledger.join_waitlist(name, profile.slug, profile.slice, priority=ctx.priority)
        return e, ledger.queue_position(name, profile.slug)

    e, position = await aio.call(join)
    where = (
        "A slice is held for you now: start your server." if position and position[0] == 0
        else f"You are number {position[0]} in line for {profile.display_name}."
    )  # fmt: skip
    return entry_view(e, position), where


class WaitlistAPI(JSONHandler):
    async def get(self):
        self.require()
        name = self.current_user["name"]
        ledger = self.state.ledger

        def read():
            out = {"entries": my_entries(ledger, name)}
            if self.can_read:
                out["queue"] = [entry_view(e) for e in ledger.waitlist()]
            return out

        self.write_json(await aio.call(read))

    async def post(self):
        self.require()
        body = self.json_body({"profile"})
        entry, where = await join_queue(self.state, self.current_user, body.get("profile"))
        self.write_json({"status": 201, "message": where, "entry": entry}, 201)


class WaitlistEntryAPI(JSONHandler):
    async def delete(self, profile: str):
        self.require()
        self.json_body()
        name = self.current_user["name"]
        left = await aio.call(self.state.ledger.leave_waitlist, name, profile)
        if not left:
            raise refuse(404, f"You are not queued for {shown(profile)}.")
        self.write_json({"status": 200, "message": f"You left the queue for {profile}."})


def bookings_data(state, hours: int, *, unbooked: bool = True) -> dict:
    """Bookings from now and the capacity calendar for ``hours`` hours (blocks: reads the
    ledger): ``{"bookings": [...], "calendar": [{"profile", "hour", "total", "reserved",
    "available", "holders"}]}``. Without ``unbooked`` the calendar is left empty when nothing
    is booked (the admin page shows it only beside bookings; it reads every slice)."""
    lab, ledger = state.lab, state.ledger
    now = clock.utcnow()
    bookings = ledger.bookings(now)
    calendar = (
        ledger.capacity_calendar({p.slug: p.slice for p in lab.profiles if p.wants_gpu}, now, hours)
        if bookings or unbooked
        else []
    )
    return {
        "bookings": [
            {
                "id": b.id,
                "holder": b.holder,
                "profile": b.profile,
                "count": b.count,
                "groups": list(b.groups),
                "starts_at": _iso(b.starts_at),
                "ends_at": _iso(b.ends_at),
                "lead_s": b.lead_s,
                "grace_s": b.grace_s,
            }
            for b in bookings
        ],
        "calendar": calendar,
    }


class BookingsAPI(JSONHandler):
    async def get(self):
        self.require(read=True)
        hours = whole_number(self.get_argument("hours", "336"), "hours", 1, MAX_HOURS)
        self.write_json(await aio.call(bookings_data, self.state, hours))


def queue_handlers(api: str) -> list[tuple]:
    """Routes under ``api`` (the API's prefix), before its catch-all."""
    return [
        (api + r"waitlist", WaitlistAPI),
        (api + r"waitlist/(?P<profile>[^/]+)", WaitlistEntryAPI),
        (api + r"bookings", BookingsAPI),
    ]


# -- the OpenAPI description (merged into openapi.py's document) -------------------------------


def queue_schemas() -> dict:
    """``components/schemas`` for these endpoints."""
    entry = obj(
        {
            "id": INTEGER,
            "user": STRING,
            "profile": STRING,
            "state": {"type": "string", "enum": ["waiting", "offered", "refused"]},
            "priority": INTEGER,
            "joined_at": TIME,
            "offer_until": TIME_OR_NULL,
            "message": STR,
            "position": INT,
            "estimate_min": NUM,
        },
        "A queue entry. position: 1 = next, 0 = a slice is held for them until offer_until "
        "(null in the whole-queue list and for refused); estimate_min: null without recent "
        "sessions. refused (only in my entries, the latest for its profile): the queue passed "
        "them over when a slice freed, and message says why (a GPU-hour budget spent until "
        "when, a profile no longer theirs).",
    )
    waitlist = {
        "type": "object",
        "required": ["entries"],
        "properties": {
            "entries": array({"$ref": "#/components/schemas/WaitlistEntry"}, "my entries"),
            "queue": array(
                {"$ref": "#/components/schemas/WaitlistEntry"},
                "everyone's, in serving order (only with custom:gpulab:read)",
            ),
        },
    }
    joined = obj(
        {
            "status": INTEGER,
            "message": STRING,
            "entry": {"$ref": "#/components/schemas/WaitlistEntry"},
        }
    )
    booking = obj(
        {
            "id": INTEGER,
            "holder": STRING,
            "profile": STRING,
            "count": INTEGER,
            "groups": STRINGS,
            "starts_at": TIME,
            "ends_at": TIME,
            "lead_s": INTEGER,
            "grace_s": INTEGER,
        }
    )
    hour = obj(
        {
            "profile": STRING,
            "hour": TIME,
            "total": INTEGER,
            "reserved": INTEGER,
            "available": INTEGER,
            "holders": STRINGS,
        }
    )
    return {
        "WaitlistEntry": entry,
        "Waitlist": waitlist,
        "Joined": joined,
        "Bookings": obj({"bookings": array(booking), "calendar": array(hour)}),
    }


def queue_paths(op, json, ref) -> dict:
    """``paths`` for these endpoints, built with openapi.py's ``_op``/``_json``/``ref``."""
    from ...hub.hubconfig import READ_SCOPE

    bad = {"400": {"$ref": "#/components/responses/BadRequest"}}
    return {
        "/waitlist": {
            "get": op(
                "My waitlist entries with position and estimate (and the whole queue for readers)",
                None,
                {"200": json(ref("Waitlist"), "the queue")},
            ),
            "post": op(
                "Join the queue for a GPU profile: the next free slice of it is held for the "
                "first in line",
                None,
                {"201": json(ref("Joined"), "queued"), **bad},
                requestBody={
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["profile"],
                                "properties": {"profile": {"type": "string"}},
                                "additionalProperties": False,
                            }
                        }
                    },
                },
            ),
        },
        "/waitlist/{profile}": {
            "parameters": [
                {"name": "profile", "in": "path", "required": True, "schema": {"type": "string"}}
            ],
            "delete": op(
                "Leave the queue for a profile (a slice held for me is released)",
                None,
                {
                    "200": json(ref("Done"), "left"),
                    "404": {"$ref": "#/components/responses/NotFound"},
                },
            ),
        },
        "/bookings": {
            "get": op(
                "Reservations from now and the capacity calendar: reserved vs available slices "
                "per profile per hour",
                READ_SCOPE,
                {"200": json(ref("Bookings"), "bookings and calendar"), **bad},
                parameters=[
                    {
                        "name": "hours",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_HOURS},
                        "description": "how many hours the calendar covers (default 336)",
                    }
                ],
            )
        },
    }

"""What the course page and ``GET api/courses/<slug>`` show, and the student's view of their
courses on their own page. Reads the hub (roster, servers) and the ledger (allocations,
reservations, records); no rule is decided here."""

from __future__ import annotations

from datetime import timedelta

from ... import clock
from ...courses.budget import used_gpu_hours, window_start
from ...courses.roster import roster_of
from ...courses.sessions import next_session, sessions_between
from ...fairuse.accounting import gpu_seconds
from ...ledger import aio
from .coursereport import copy_reports, staff_reason, staff_server
from .views import describe_slice

#: Days of sessions the course page lists, and of the capacity calendar it draws.
SESSION_DAYS = 60
CALENDAR_HOURS = 14 * 24


def _iso(t):
    return t.isoformat() if t is not None else None


def local(t, tz) -> str | None:
    """``Mon 2026-10-05 14:00 CEST``: ``t`` (aware) on the lab's wall clock, for people."""
    return t.astimezone(tz).strftime("%a %Y-%m-%d %H:%M %Z") if t is not None else None


def _reservations(state, courses, course, bookings, open_allocs, now) -> dict:
    """The course's seats: its bookings by session start, each with the seats in use, the
    sessions that could not be reserved, and the capacity calendar of its profile (hours with
    a reservation, next two weeks)."""
    in_use: dict[int, int] = {}
    for a in open_allocs:
        if a.booking_id is not None:
            in_use[a.booking_id] = in_use.get(a.booking_id, 0) + 1
    profile = courses.profile_of(course)
    calendar = []
    if profile is not None and profile.wants_gpu and bookings:
        cal = state.ledger.capacity_calendar({profile.slug: profile.slice}, now, CALENDAR_HOURS)
        calendar = [h for h in cal if h["reserved"]]
    return {
        "seats": course.reserve,
        "lead_minutes": course.seats_lead_minutes,
        "grace_minutes": course.grace_minutes,
        "profile": course.profile,
        "by_start": {
            b.starts_at: {"id": b.id, "count": b.count, "in_use": in_use.get(b.id, 0)}
            for b in bookings
        },
        "problems": list(courses.booking_problems.get(course.slug, [])),
        "calendar": calendar,
    }


def no_content(content: dict) -> dict[str, str]:
    """Why each student whose last content pull failed lacks the course's content (the line
    staff read in the roster), for the start-all's summary: their server runs, but not with
    what the class needs."""
    return {u: c["message"] for u, c in content.items() if c and c["state"] == "failed"}


#: ``sort=`` fields of the roster (``GET api/courses/<slug>``, the course page): the user name
ROSTER_SORTS = ("user",)


def roster_page(roster: list[str], page) -> tuple[list[str], int]:
    """``(names, total)``: the roster members of ``page`` (a :class:`~.paging.Page` over
    :data:`ROSTER_SORTS`, filter ``user``; ``None``: all of them) by name, and how many match."""
    if page is None:
        return sorted(roster), len(roster)
    wanted = page.filters.get("user")
    names = sorted((u for u in roster if wanted is None or u == wanted), reverse=page.descending)
    return names[page.offset : page.offset + page.limit], len(names)


async def course_view(state, hub, courses, course, reader: dict | None = None, page=None) -> dict:
    """The record, each roster member's course server (state, slice as people name it, GPU use
    now, last activity, GPU-hours of the last 7 days through it, why it did not start in the
    staff's words, its last content pull), the sessions of the next 60 days with their pre-start and reservation, the
    assignments with their collection and each one's last collect and return report, the
    course budget, the latest start-all, the audit trail's last entries and the own course server
    of ``reader`` (the hub's model of who asks) when they are on its staff (where they open the
    collected work). The roster's rows are ``page``'s (:func:`roster_page`; a course of a
    thousand students reads a page of them), ``roster_total`` how many match; the start-all's
    summary still counts the whole roster."""
    everyone = await roster_of(hub, course)
    roster, roster_total = roster_page(everyone, page)
    try:
        active = await hub.refresh_active()
    except Exception:
        active = hub.active or {}
    now = clock.utcnow()
    tz = state.lab.tz
    week = now - timedelta(days=7)
    stored = await aio.call(courses.store.get, course.slug)
    term = state.lab.term
    since = window_start(term, stored.created_at if stored else now, now)
    allocs = await aio.call(state.ledger.allocations_between, min(week, since), now)
    mine = [a for a in allocs if a.server_name == course.server_name]
    hours: dict[str, float] = {}
    slices: dict[str, str] = {}
    for a in mine:
        hours[a.user] = hours.get(a.user, 0.0) + gpu_seconds(a, week, now, now) / 3600
        if a.ended_at is None:
            slices[a.user] = a.slice_id
    sample = state.sample.by_slice if state.sample else {}
    sessions = sessions_between(
        course, now - timedelta(days=1), now + timedelta(days=SESSION_DAYS), state.lab.tz
    )
    ran = await aio.call(courses.store.prestarts, course.slug)
    collected = await aio.call(courses.store.deadlines, course.slug)
    bookings = await courses.bookings_of(course)
    reservation = await aio.call(
        _reservations,
        state,
        courses,
        course,
        bookings,
        [a for a in allocs if a.ended_at is None],
        now,
    )
    run = courses.run_of(course.slug)
    content = await courses.content_of(course, everyone)  # a cached read: the summary counts all
    names = {s["id"]: describe_slice(s) for s in await aio.call(state.ledger.slices)}
    refused = (
        await aio.call(state.ledger.last_refusals, list(run.servers), run.started_at) if run else {}
    )
    staff_words = {
        u: staff_reason(u, p.reason, refused.get(u), p.status, summary=True)
        for u, p in (run.servers.items() if run else ())
        if p.reason
    }
    rows = []
    for u in roster:
        server = active.get((u, course.server_name))
        util = sample.get(slices.get(u)) if slices.get(u) else None
        p = run.servers.get(u) if run else None
        rows.append(
            {
                "user": u,
                "server": server.state if server else "stopped",
                "url": server.url if server else None,
                "last_activity": _iso(server.last_activity if server else None),
                "slice": slices.get(u),
                "slice_name": names.get(slices.get(u), slices.get(u)),
                "gpu_percent": util.gpu_percent if util is not None else None,
                "gpu_hours_7d": round(hours.get(u, 0.0), 3),
                "prestart": p.state if p else None,
                "reason": staff_reason(u, p.reason, refused.get(u), p.status) if p else "",
                "content": content.get(u),
            }
        )
    by_start = reservation.pop("by_start")
    audit = await aio.call(courses.store.audit, course.slug, 200)
    reports = copy_reports(audit)
    return {
        "course": course.to_dict(),
        "server_name": course.server_name,
        "roster": rows,
        "roster_total": roster_total,
        "roster_source": courses.roster_source(course),
        "attention": courses.attention_of(course.slug),
        "sessions": [
            {
                "start": s.isoformat(),
                "end": e.isoformat(),
                "start_local": local(s, tz),
                "end_local": local(e, tz),
                "prestart_local": local(s - timedelta(minutes=course.lead_minutes), tz),
                "prestart_at": (s - timedelta(minutes=course.lead_minutes)).isoformat(),
                "prestart": ran[s][1] or "running" if s in ran else None,
                "reserved": by_start.get(s),
            }
            for s, e in sessions[:20]
        ],
        "reservation": reservation,
        "assignments": [
            {
                "name": a.name,
                "due": _iso(a.due.replace(tzinfo=tz) if a.due else None),
                "due_local": local(a.due.replace(tzinfo=tz), tz) if a.due else None,
                "collected": next(
                    (v[1] or "running" for (n, _), v in collected.items() if n == a.name), None
                ),
                "last_collect": reports.get(a.name, {}).get("collect"),
                "last_return": reports.get(a.name, {}).get("return"),
            }
            for a in course.assignments
        ],
        "budget": {
            "gpu_hours": course.gpu_hours,
            "used": round(used_gpu_hours(course, allocs, since, now), 3),
            "since": since.isoformat(),
        },
        "progress": {**run.as_dict(), "summary": run.summary(staff_words, no_content(content))}
        if run
        else None,
        "audit": [{"at": a.at.isoformat(), "who": a.who, "action": a.action} for a in audit[:20]],
        # the staff folder is mounted in staff's course servers only (courses.hubhook)
        "my_server": staff_server(
            reader["name"]
            if reader and course.staff_group in (reader.get("groups") or ())
            else None,
            course.server_name,
            active,
        ),
    }


async def my_courses(state, courses, user: dict) -> list[dict]:
    """The courses ``user`` (the hub's model) is a student or staff of, for their own page: the
    next session (and whether their server is started for it), and each assignment's deadline."""
    if courses is None:
        return []
    groups = set(user.get("groups") or ())
    now = clock.utcnow()
    out = []
    for s in await aio.call(courses.store.all):
        c = s.course
        role = "staff" if c.staff_group in groups else "student" if c.roster_group in groups else ""
        if not role:
            continue
        tz = state.lab.tz
        nxt = next_session(c, now, tz)
        out.append(
            {
                "slug": c.slug,
                "title": c.title,
                "role": role,
                "server_name": c.server_name,
                "next_session": {
                    "start": nxt[0].isoformat(),
                    "end": nxt[1].isoformat(),
                    "start_local": local(nxt[0], tz),
                    "prestart_local": local(nxt[0] - timedelta(minutes=c.lead_minutes), tz),
                }
                if nxt
                else None,
                "prestart_minutes": c.lead_minutes if c.prestart else None,
                "reserved_seats": c.reserve,
                "assignments": [
                    {
                        "name": a.name,
                        "folder": f"~/assignments/{a.name}",
                        "due": _iso(a.due.replace(tzinfo=tz) if a.due else None),
                        "due_local": local(a.due.replace(tzinfo=tz), tz) if a.due else None,
                    }
                    for a in c.assignments
                ],
            }
        )
    return out

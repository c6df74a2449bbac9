"""The service's timed course work, one pass every ``c.GPULabCourses.check_interval``:

- **pre-start** ``lead_minutes`` before each session (once per session, recorded in the ledger;
  a run whose service was killed before it finished is resumed by the next service, never run
  twice at once: :meth:`~.store.CourseStore.begin_prestart`);
- **collect** each assignment at its ``due`` time, once (:meth:`~.store.CourseStore.begin_deadline`),
  up to ``MISSED_DEADLINE`` late (a service that was down for longer leaves it to the staff's
  Collect button, and the course page says so);
- **reservations**: every ``c.GPULabCourses.reserve_sync_every`` the bookings of each course's
  coming sessions are brought in line with its record (:func:`.reserve.sync_course`); sessions
  the lab cannot hold are listed on the course page.

Runs in the service's event loop (the ledger through ``aio.call``); one course's failure is
logged and the pass goes on.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from .. import clock
from ..hubapi.client import HubError
from ..ledger import aio
from .reserve import fit_problems, sync_course
from .sessions import sessions_between

log = logging.getLogger("gpulab.courses")

#: The latest a deadline is still collected by the schedule after it passed.
MISSED_DEADLINE = timedelta(hours=24)


async def run_pass(manager) -> None:
    """One pass over every stored course (module docstring)."""
    now = clock.utcnow()
    stale = max(30.0, 4 * manager.settings.check_interval)
    for run in list(manager.runs.values()):
        if not run.done and run.session_start is not None:
            await aio.call(manager.store.heartbeat, run.course.slug, run.session_start)
    stored = await aio.call(manager.store.all)
    usable = [s for s in stored if not manager.attention_of(s.course.slug)]
    for s in usable:
        try:
            await _prestart_due(manager, s.course, now, stale)
        except Exception:
            log.exception(
                "Course %s: the scheduled pre-start failed; the next pass tries again",
                s.course.slug,
            )
    for s in stored:  # a course needing attention still has its work collected
        await _deadlines_due(manager, s.course, now)
    if stored:
        await stop_strays(manager, stored)
    if time.monotonic() - manager.reservations_synced_at >= manager.settings.reserve_sync_every:
        manager.reservations_synced_at = time.monotonic()
        for s in usable:
            await sync_reservations(manager, s.course)


async def _prestart_due(manager, course, now, stale_after_s: float) -> None:
    if not course.prestart:
        return
    lead = timedelta(minutes=course.lead_minutes)
    for start, end in sessions_between(course, now, now + lead + timedelta(seconds=1), manager.tz):
        if not (start - lead <= now < end):
            continue
        current = manager.runs.get(course.slug)
        if current is not None and not current.done and current.session_start == start:
            continue  # this service runs it
        if await aio.call(
            manager.store.begin_prestart, course.slug, start, stale_after_s=stale_after_s
        ):
            log.info("Pre-starting %s for its session at %s", course.slug, start)
            await manager.start_all(course, by="schedule", session_start=start)


async def _deadlines_due(manager, course, now) -> None:
    """Collect each assignment of ``course`` due now, each on its own: one that fails (a date
    the time zone cannot convert, a collect that raises) is logged and the others go on."""
    for a in course.assignments:
        if a.due is None:
            continue
        try:
            await _deadline_due(manager, course, a, now)
        except Exception:
            log.exception(
                "Course %s: collecting %s at its deadline failed; the next pass tries again",
                course.slug,
                a.name,
            )


async def _deadline_due(manager, course, a, now) -> None:
    due = a.due.replace(tzinfo=manager.tz).astimezone(now.tzinfo)
    if not (due <= now < due + MISSED_DEADLINE):
        return
    if await aio.call(manager.store.begin_deadline, course.slug, a.name, due):
        log.info("Collecting %s of %s at its deadline %s", a.name, course.slug, due)
        report = await manager.collect(course, a.name, by="schedule")
        n = sum(1 for r in report.values() if r["state"] == "submitted")
        summary = f"{n} of {len(report)} submitted"
        await aio.call(manager.store.finish_deadline, course.slug, a.name, due, summary)


def strays_of(course, active) -> list[str]:
    """Users running ``course``'s server who are neither on its roster nor its staff nor hub
    admins (``active``: the hub's running servers, :meth:`~..hubapi.client.HubClient.refresh_active`):
    removed from the roster since their server started."""
    return sorted(
        s.user
        for s in active.values()
        if s.name == course.server_name
        and not s.admin
        and course.roster_group not in s.groups
        and course.staff_group not in s.groups
    )


async def stop_strays(manager, stored) -> None:
    """Stop the course servers of users removed from their course's roster by the hub's admin
    panel or the identity provider (the course pages and API stop them at removal:
    :meth:`~.manager.CourseManager.stop_removed`). The hub unreachable: the next pass tries."""
    try:
        active = await manager.hub.refresh_active()
    except HubError as e:
        log.warning("Course servers of removed students not checked: %s", e.message)
        return
    for s in stored:
        users = strays_of(s.course, active)
        if users:
            await manager.stop_removed(s.course, users, by="schedule", active=active)


async def sync_reservations(manager, course) -> list[str]:
    """Book what fits of ``course``'s coming sessions; the problems, with what else makes the
    course unworkable with its profile (also kept for its page)."""
    try:
        problems = await aio.call(
            sync_course,
            manager.ledger,
            course,
            manager.profile_of(course),
            now=clock.utcnow(),
            tz=manager.tz,
            horizon_days=manager.settings.reserve_horizon_days,
        )
    except Exception as e:
        log.exception("Course %s: its sessions could not be booked", course.slug)
        problems = [f"the sessions could not be booked: {str(e)[:200]}"]
    problems += [p for p in fit_problems(course, manager.profile_of(course)) if p not in problems]
    if problems:
        log.error("Course %s: sessions not reserved: %s", course.slug, "; ".join(problems))
    manager.booking_problems[course.slug] = problems
    return problems

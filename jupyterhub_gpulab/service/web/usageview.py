"""Pure builders of the fair-use figures the pages and the API show: GPU-hours used in a period
(per group, per user), a user's budget and usage, and the culler's warnings. No I/O.

The accounting rule (:mod:`jupyterhub_gpulab.fairuse.accounting`), as the pages state it:
:data:`RULE`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import date, datetime, timedelta, timezone, tzinfo

from ...clock import midnight_utc
from ...fairuse.accounting import Usage
from ...fairuse.quota import Budget, period_window
from ...ledger import CullWarning
from ...ledger.notices import OFFER_RULE, kind_of, offer_text
from .inputs import shown
from .views import iso

__all__ = ["RULE", "PeriodError", "budget_view", "parse_period", "usage_view", "warnings_view"]

RULE = (
    "GPU-hours are weighted by the slice's share of a device: a whole GPU (or vGPU) counts 1, a "
    "MIG instance its compute slices over the GPU's 7 (a 1g.10gb hour is 1/7 of a GPU-hour), a "
    "shared seat its compute share. Only time inside the period counts; a running server counts "
    "up to now; CPU-only servers count nothing. A group's figure is what was charged to it (each "
    "allocation is charged to one of its user's groups); a user's is all their allocations."
)

#: The longest period the API sums at once (days).
MAX_DAYS = 400
#: The dates a period may start or end on: the ledger holds nothing earlier, and nothing past
#: this is a plan anyone makes (far dates overflow Python's datetime near year 1 and 9999).
FIRST_DAY = date(1970, 1, 1)
LAST_DAY = date(2999, 12, 31)


class PeriodError(ValueError):
    """A period the caller wrote wrong; the message says the accepted form."""


def _day(text: str, what: str) -> date:
    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise PeriodError(f"{what} {shown(text)} is not an ISO date such as 2026-03-02") from None
    if not FIRST_DAY <= day <= LAST_DAY:
        raise PeriodError(f"{what} {day} is not between {FIRST_DAY} and {LAST_DAY}")
    return day


def parse_period(
    start: str | None, end: str | None, now: datetime, tz: tzinfo = timezone.utc
) -> tuple[datetime, datetime]:
    """``[start, end)`` in UTC from two ISO dates (local midnights in ``tz``; ``end`` is the day
    after the last one counted). Both missing: this calendar week (Monday to Monday, as the
    budgets count). One missing: a week from, or up to, the other. Raises :class:`PeriodError`
    for a malformed date, one outside ``[FIRST_DAY, LAST_DAY]``, an end not after the start, or
    a period longer than :data:`MAX_DAYS`."""
    if not start and not end:
        return period_window("week", now, tz=tz)
    first = _day(start, "start") if start else None
    last = _day(end, "end") if end else None
    if first is None:
        first = last - timedelta(days=7)
    if last is None:
        last = first + timedelta(days=7)
    if last <= first:
        raise PeriodError(f"end {last} must be after start {first}")
    if (last - first).days > MAX_DAYS:
        raise PeriodError(f"a period of at most {MAX_DAYS} days, please")

    return midnight_utc(first, tz), midnight_utc(last, tz)


def _hours(seconds: float) -> float:
    return round(seconds / 3600.0, 4)


def usage_view(u: Usage, tz: tzinfo = timezone.utc) -> dict:
    """GPU-hours in ``u``'s period: total, per charge group (``null``: charged to none) and per
    user, largest first; the period's dates in ``tz`` for the CSV link and the form."""
    local_start = u.start.astimezone(tz).date()
    local_end = u.end.astimezone(tz).date()
    return {
        "period": {
            "start": iso(u.start),
            "end": iso(u.end),
            "start_date": local_start.isoformat(),
            "end_date": local_end.isoformat(),
        },
        "rule": RULE,
        "total_gpu_hours": _hours(u.total),
        "by_group": [
            {"group": g or None, "gpu_hours": _hours(s)}
            for g, s in sorted(u.by_group.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
        "by_user": [
            {"user": name, "gpu_hours": _hours(s)}
            for name, s in sorted(u.by_user.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
        # what the CSV export holds, one row per user, group, profile and slice kind
        "rows": [
            {
                "user": r.user,
                "group": r.group or None,
                "profile": r.profile,
                "slice_kind": r.slice_kind,
                "allocations": r.allocations,
                "gpu_seconds": round(r.gpu_seconds, 1),
                "gpu_hours": _hours(r.gpu_seconds),
            }
            for r in u.rows
        ],
    }


#: ``sort=`` fields of ``GET api/usage``'s GPU-hours per user (default ``-gpu_hours``: most
#: first); ties by user name, A to Z, so pages never overlap or skip a user
USER_SORTS = ("gpu_hours", "user")


def user_hours_page(u: Usage, view: dict, page) -> tuple[list[dict], list[dict], int]:
    """``(by_user, rows, total)``: the users of ``page`` (a :class:`~.paging.Page` over
    :data:`USER_SORTS`, filter ``user``) among those with GPU-hours in ``u``'s period, as
    :func:`usage_view`'s ``by_user`` entries; ``view``'s CSV ``rows`` of those users only; and
    how many users match."""
    wanted = page.filters.get("user")
    names = [n for n in u.by_user if wanted is None or n == wanted]
    if page.sort == "user":
        names.sort(reverse=page.descending)
    else:
        sign = -1 if page.descending else 1
        names.sort(key=lambda n: (sign * u.by_user[n], n))
    shown = names[page.offset : page.offset + page.limit]
    keep = set(shown)
    by_user = [{"user": n, "gpu_hours": _hours(u.by_user[n])} for n in shown]
    return by_user, [r for r in view["rows"] if r["user"] in keep], len(names)


def budget_view(
    budget: Budget | None, used_hours: float, period: tuple[datetime, datetime], tz: tzinfo
) -> dict:
    """A user's governing budget (``None``: none applies) and what they used in its period (or,
    without a budget, in ``period``: this week)."""
    if budget is None:
        return {
            "budget": None,
            "describe": None,
            "rule": RULE,
            "used_hours": round(used_hours, 4),
            "period_start": iso(period[0]),
            "period_end": iso(period[1]),
        }
    return {
        "budget": {
            "group": budget.group,
            "period": budget.period,
            "limit_hours": budget.limit_hours,
            "remaining_hours": round(budget.remaining_hours, 4),
            "exhausted": budget.exhausted,
            "resets_at": iso(budget.resets_at),
        },
        "describe": budget.describe(tz),
        "rule": RULE,
        "used_hours": round(budget.used_hours, 4),
        "period_start": iso(budget.start),
        "period_end": iso(budget.resets_at),
    }


def warnings_view(warnings: Iterable[CullWarning], running: Collection[str] = ()) -> list[dict]:
    """The culler's warnings and notices, soonest first: ``kind`` is ``warning`` (the server
    will be stopped at ``due_at``), ``stopped`` (a notice that it was) or ``notice`` (a course's,
    such as "You were added to DL 101 (dl101) by ta1."). ``running``: the reader's active
    servers, for a waitlist offer's how-to (:func:`~...ledger.notices.offer_text`)."""
    return [
        {
            "user": w.user,
            "server_name": w.server_name,
            "rule": w.rule,
            "kind": kind_of(w.rule),
            "message": offer_text(w.message, w.server_name, w.server_name in running)
            if w.rule == OFFER_RULE
            else w.message,
            "due_at": iso(w.due_at),
        }
        for w in warnings
    ]

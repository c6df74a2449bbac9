"""GPU-hour budgets: which budget governs a user, whether they may spawn, who has run out.

Pure logic, no I/O: the caller passes the user's groups, the configured policies
(:mod:`jupyterhub_gpulab.lab.policy`) and allocations read from the ledger. The rules:

- **Per user.** ``gpu_hours`` is what *each member* of the group may use per period, as student
  quotas are: one student's usage never eats a classmate's budget. (Group-wide *concurrent* caps
  are ``max_slices``, enforced by the ledger.)
- **Usage** is the user's weighted GPU-hours (:mod:`.accounting`: a ``1g.10gb`` MIG hour counts
  1/7, a seat its compute share) over *all* their allocations and servers, whichever group each
  was charged to, inside the period; an open allocation counts up to now. It is recomputed from
  the ledger each time, so a hub or service restart loses nothing.
- **Periods are calendar periods**, not rolling windows: ``day`` runs from local midnight to the
  next, ``week`` from Monday 00:00 to the next Monday, in a configurable time zone (default UTC);
  ``term`` is the configured ``[term_start, term_end)``. Calendar periods are what a user can
  plan with ("10 hours a week, back on Monday") and give an exact answer to *when more comes
  back*; a rolling window returns hours a trickle at a time, which a refusal cannot state simply.
  Outside the configured term a ``term`` budget has nothing to count against and does not apply
  (so, being the most generous, it leaves its members without a budget until the next term's
  dates are configured).
- **Several groups: the most generous governs**, as for ``max_slices_per_user`` in
  :mod:`~jupyterhub_gpulab.lab.policy`. A policy without ``gpu_hours`` means no budget, which beats any
  number. Otherwise the governing budget is the one with the most hours *left now* (ties: the
  larger limit, then the group name), so a user may spawn while any of their groups' budgets has
  hours left. Admins, and users under no policy, follow :func:`~jupyterhub_gpulab.lab.policy.applicable_policies`.
- **CPU-only profiles** use no GPU-hours and are never refused for a budget.
- **Longest session** (:func:`session_limit`): the profile's ``max_age`` and the user's policies'
  ``max_session`` (most generous of those allowing the profile; unset in one of them = none); the
  shorter of the two applies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo

from ..clock import midnight_utc
from ..errors import ConfigError, plain
from ..lab.policy import GroupPolicy, PolicyContext
from ..lab.profile import Profile
from ..lab.term import Term
from ..ledger.models import Allocation
from ..units import format_gpu_hours
from .accounting import usage

__all__ = [
    "Budget",
    "OverBudget",
    "budgets",
    "budget_window",
    "check_spawn",
    "over_budget_servers",
    "queue_skip",
    "spent_budget",
    "period_window",
    "session_limit",
    "user_budget",
    "window_start",
]

UTC = timezone.utc


def period_window(
    period: str, now: datetime, *, tz: tzinfo = UTC, term: Term | None = None
) -> tuple[datetime, datetime] | None:
    """The calendar period containing ``now``, as ``(start, end)`` in UTC.

    ``"day"``: local midnight to the next (23 or 25 hours across a DST change); ``"week"``: Monday
    00:00 local to the next Monday; ``"term"``: ``term``, or ``None`` when ``now`` is outside it.
    Raises :class:`ConfigError` for a ``term`` period without a configured term.
    """
    local = now.astimezone(tz)
    if period == "day":
        first = local.date()
        return midnight_utc(first, tz), midnight_utc(first + timedelta(days=1), tz)
    if period == "week":
        first = local.date() - timedelta(days=local.weekday())
        return midnight_utc(first, tz), midnight_utc(first + timedelta(days=7), tz)
    if period == "term":
        if term is None:
            raise ConfigError(
                "a group policy has period 'term' but no term is configured; set "
                "c.GPULab.term_start and c.GPULab.term_end"
            )
        return (term.start, term.end) if term.start <= now < term.end else None
    raise ConfigError(f"period {period!r} is not one of day, week, term")


@dataclass(frozen=True)
class Budget:
    """One GPU-hour budget as it stands at a moment.

    ``group`` whose policy set it; ``period`` (``day``/``week``/``term``); ``limit_hours`` and
    ``used_hours`` (weighted GPU-hours); ``start`` of the period; ``resets_at``: when the period
    ends and a new budget starts (for a term, the term's end: nothing comes back before)."""

    group: str
    period: str
    limit_hours: float
    used_hours: float
    start: datetime
    resets_at: datetime

    @property
    def remaining_hours(self) -> float:
        return max(0.0, self.limit_hours - self.used_hours)

    @property
    def exhausted(self) -> bool:
        return self.remaining_hours <= 0.0

    def describe(self, tz: tzinfo = UTC) -> str:
        """``"4.5 of 10 GPU-hours used this week (students); renews Monday 2026-12-07 00:00 UTC"``."""
        used, limit = (
            format_gpu_hours(self.used_hours),
            format_gpu_hours(self.limit_hours, limit=True),
        )
        return (
            f"{used} of {limit} GPU-hours used this {self.period} ({plain(self.group)}); "
            f"{_renewal(self, tz)}"
        )


def _when(at: datetime, tz: tzinfo) -> str:
    return at.astimezone(tz).strftime("%A %Y-%m-%d %H:%M %Z")


def _renewal(b: Budget, tz: tzinfo) -> str:
    if b.period == "term":
        return f"this term's hours do not renew before the term ends on {_when(b.resets_at, tz)}"
    return f"renews {_when(b.resets_at, tz)}"


def budgets(
    user: str,
    mine: Sequence[GroupPolicy],
    allocations: Iterable[Allocation],
    now: datetime,
    *,
    tz: tzinfo = UTC,
    term: Term | None = None,
) -> list[Budget] | None:
    """Every budget of ``mine`` (the user's policies, from
    :func:`~jupyterhub_gpulab.lab.policy.applicable_policies`) as it stands at ``now``; ``None`` when
    the user has no budget at all (no policy, a policy without ``gpu_hours``, or a term budget
    outside the term). ``allocations`` may hold other users' rows; only ``user``'s count."""
    if not mine:
        return None
    own = [a for a in allocations if a.user == user]
    found: list[Budget] = []
    for p in mine:
        if p.gpu_hours is None:
            return None
        window = period_window(p.period, now, tz=tz, term=term)
        if window is None:
            return None
        start, end = window
        used = usage(own, start, end, now).hours(user)
        found.append(Budget(p.group, p.period, p.gpu_hours, used, start, end))
    return found


def user_budget(
    user: str, ctx: PolicyContext, allocations: Iterable[Allocation], now: datetime
) -> Budget | None:
    """The budget that governs ``user`` (whose policies are ``ctx``) now (module docstring: the
    most generous), or ``None`` for no budget. ``allocations``: the ledger's rows overlapping
    the period (see :func:`budget_window`); other users' rows are ignored."""
    found = budgets(user, ctx.policies, allocations, now, tz=ctx.tz, term=ctx.term)
    if found is None:
        return None
    return min(found, key=lambda b: (-b.remaining_hours, -b.limit_hours, b.group))


def window_start(
    policies: Iterable[GroupPolicy], now: datetime, *, tz: tzinfo = UTC, term: Term | None = None
) -> datetime:
    """The earliest period start among ``policies`` with ``gpu_hours``: read the ledger's
    allocations from here (``ledger.allocations_between(window_start(...), now)``) to compute
    any of their budgets. ``now`` when none has a budget."""
    starts = [now]
    for p in policies:
        if p.gpu_hours is not None:
            window = period_window(p.period, now, tz=tz, term=term)
            if window is not None:
                starts.append(window[0])
    return min(starts)


def budget_window(ctx: PolicyContext, now: datetime) -> datetime:
    """Where to read the ledger from for the budgets of the user of ``ctx``
    (:func:`window_start` of their policies); ``now`` when they have none."""
    return window_start(ctx.policies, now, tz=ctx.tz, term=ctx.term)


def spent_budget(
    user: str,
    ctx: PolicyContext,
    allocations: Iterable[Allocation],
    now: datetime,
    *,
    profile: Profile | None = None,
) -> Budget | None:
    """The budget that governs ``user`` (:func:`user_budget`) when it is spent now, else
    ``None``: no budget, hours left, or a CPU-only ``profile`` (never counted)."""
    if profile is not None and not profile.wants_gpu:
        return None
    b = user_budget(user, ctx, allocations, now)
    return b if b is not None and b.exhausted else None


def _more(b: Budget, tz: tzinfo) -> str:
    if b.period == "term":
        return (
            f"this term's hours do not renew before the term ends on {_when(b.resets_at, tz)}; "
            "ask your instructor if you need more"
        )
    return f"more from {_when(b.resets_at, tz)}"


def _used(b: Budget) -> str:
    used, limit = format_gpu_hours(b.used_hours), format_gpu_hours(b.limit_hours, limit=True)
    return f"{used} of {limit} GPU-hours this {b.period} ({plain(b.group)})"


def check_spawn(
    user: str,
    ctx: PolicyContext,
    allocations: Iterable[Allocation],
    now: datetime,
    *,
    profile: Profile | None = None,
) -> str | None:
    """``None`` when ``user`` may start a server of ``profile`` now, else the refusal for them:
    ``"You have used 10.0 of 10 GPU-hours this week (students); more from Monday 2026-12-07 00:00
    UTC. CPU profiles are not counted."`` A CPU-only ``profile`` is never refused. The spawner
    raises it as ``SpawnRefused(message, reason="quota")`` (HTTP 429)."""
    b = spent_budget(user, ctx, allocations, now, profile=profile)
    if b is None:
        return None
    return f"You have used {_used(b)}; {_more(b, ctx.tz)}. CPU profiles are not counted."


def queue_skip(b: Budget, profile_name: str, tz: tzinfo = UTC) -> str:
    """Why the waitlist passed over a user whose budget ``b`` is spent when a slice of
    ``profile_name`` freed: ``"Skipped in the queue for PyTorch 1g: your GPU-hour budget is
    spent until Monday 2026-12-07 00:00 UTC (you have used 10.0 of 10 GPU-hours this week
    (students)). Join the queue again then; CPU profiles are not counted."``"""
    until = (
        f"the term ends on {_when(b.resets_at, tz)}"
        if b.period == "term"
        else _when(b.resets_at, tz)
    )
    return (
        f"Skipped in the queue for {plain(profile_name)}: your GPU-hour budget is spent until "
        f"{until} (you have used {_used(b)}). Join the queue again then; CPU profiles are not "
        "counted."
    )


@dataclass(frozen=True)
class OverBudget:
    """An open allocation whose user's budget runs out at ``exhausted_at`` (at the user's current
    rate over all their open allocations; in the past when already exhausted)."""

    allocation: Allocation
    budget: Budget
    exhausted_at: datetime


def over_budget_servers(
    open_allocations: Iterable[Allocation],
    user_budgets: Mapping[str, Budget | None],
    now: datetime,
    *,
    within_s: float,
) -> list[OverBudget]:
    """Open allocations whose user's budget is exhausted, or will be within ``within_s`` seconds
    at the rate they burn it now (the sum of the shares they hold: two ``1g`` slices burn 2/7
    GPU-hour per hour). ``user_budgets`` maps users to :func:`user_budget`'s answer; users
    missing or mapped to ``None`` have no budget. Pass ``within_s`` >= the culler's warning lead
    so users are warned before the budget runs out; feed ``exhausted_at`` to the culler's
    ``budget_exhausted_at``."""
    by_user: dict[str, list[Allocation]] = {}
    for a in open_allocations:
        if a.ended_at is None:
            by_user.setdefault(a.user, []).append(a)
    found: list[OverBudget] = []
    for user, held in sorted(by_user.items()):
        b = user_budgets.get(user)
        if b is None:
            continue
        rate = sum(a.share for a in held)  # GPU-hours per hour
        if rate <= 0:
            continue
        # A period that resets before the budget runs out brings a fresh one: not over budget.
        at = now + timedelta(hours=b.remaining_hours / rate)
        if at > now + timedelta(seconds=within_s) or at >= b.resets_at:
            continue
        found.extend(OverBudget(a, b, at) for a in sorted(held, key=lambda a: a.id))
    return found


def session_limit(profile: Profile, mine: Sequence[GroupPolicy]) -> int | None:
    """The longest a server of ``profile`` may run, in seconds (``None``: no limit): the shorter
    of ``profile.max_age`` and the most generous ``max_session`` among ``mine`` (the user's
    policies) that allow the profile, where a policy without ``max_session`` means none."""
    covering = [p for p in mine if p.allows(profile.slug)] or list(mine)
    sessions = [p.max_session for p in covering]
    from_policy = None if not sessions or None in sessions else max(sessions)
    limits = [s for s in (profile.max_age, from_policy) if s is not None]
    return min(limits) if limits else None

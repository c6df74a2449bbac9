"""What is checked again when the waitlist offers a queued user a slice: the same policy and
GPU-hour budget rules as a spawn (:mod:`~..lab.policy`, :mod:`.quota`), for a user who may not
be logged in. Runs in the gpulab service (and the semester benchmark), in a thread: it reads
the ledger."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .. import clock
from ..errors import ProfileChoiceError
from ..lab.policy import PolicyContext
from .quota import Budget, budget_window, check_spawn, queue_skip, spent_budget

if TYPE_CHECKING:
    from ..lab.config import Lab
    from ..lab.profile import Profile


def _budget_rows(ledger, user: str, ctx: PolicyContext):
    """``(allocations, now)``: ``user``'s allocations in their budget window (read from
    ``ledger``), or ``None`` when no budget applies to them."""
    now = clock.utcnow()
    start = budget_window(ctx, now)
    if start >= now:
        return None
    return ledger.allocations_between(start, now, user=user), now


def budget_refusal(ledger, user: str, ctx: PolicyContext, profile: Profile) -> str | None:
    """``user``'s GPU-hour budget refusal for a spawn of ``profile`` now, or ``None`` (reads
    ``ledger``'s allocations in the budget window). The spawner asks this."""
    rows = _budget_rows(ledger, user, ctx)
    return None if rows is None else check_spawn(user, ctx, rows[0], rows[1], profile=profile)


def spent_now(ledger, user: str, ctx: PolicyContext, profile: Profile) -> Budget | None:
    """``user``'s governing budget when it is spent now for ``profile``, else ``None`` (reads
    ``ledger``, as :func:`budget_refusal`)."""
    rows = _budget_rows(ledger, user, ctx)
    return None if rows is None else spent_budget(user, ctx, rows[0], rows[1], profile=profile)


def offer_limits(
    lab: Lab, ledger, user: str, profile_slug: str, groups: Iterable[str], is_admin: bool
) -> dict | str:
    """The claim limits for offering ``user`` a slice of ``profile_slug`` now
    (``{"user_limit", "charge_groups", "groups"}``, keyword arguments of
    :meth:`~..ledger.Ledger.claim`), or the refusal message when the profile is gone, no longer
    allowed by their groups' policies, or their budget is spent (:func:`~.quota.queue_skip`:
    skipped, until when)."""
    profile = next((p for p in lab.profiles if p.slug == profile_slug), None)
    if profile is None or not profile.slice.wants_gpu:
        return f"Profile {profile_slug!r} no longer offers a GPU slice."
    ctx = PolicyContext.for_user(groups, is_admin, lab)
    try:
        ent = ctx.entitlement(profile)
    except ProfileChoiceError as e:
        return e.message
    spent = spent_now(ledger, user, ctx, profile)
    if spent is not None:
        return queue_skip(spent, profile.display_name, ctx.tz)
    return {
        "user_limit": ent.user_limit,
        "charge_groups": ent.charge_groups,
        "groups": sorted(ctx.groups),
    }


def free_for_newcomer(ledger, request, profile: str) -> int:
    """Slices of ``request`` a user starting ``profile`` now, in no booked group, could claim:
    free slices less the seats bookings keep of them (counted as kept from anyone). What
    :func:`starved` and the culler's demand-aware GPU-idle rule (:mod:`.spare`) read as "a
    slice is free" (reads ``ledger``)."""
    free, _total = ledger.capacity(request)
    if free <= 0:
        return 0
    kept = sum(n.unclaimed for n in ledger.reserved_for_others(request, (), profile))
    return max(0, free - kept)


def starved(ledger, entry) -> bool:
    """Whether queued ``entry`` (a waitlist entry: ``request``, ``profile``) finds no slice it
    could be offered now: every free slice of its request is kept by a reservation (counted as
    kept from it, whoever it is) or there is none. Preemption serves only such entries: where a
    slice is free, the waitlist offers it instead (reads the ledger)."""
    return free_for_newcomer(ledger, entry.request, entry.profile) <= 0

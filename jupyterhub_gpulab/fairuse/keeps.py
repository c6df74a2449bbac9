"""Keep: a user at the keyboard postpones their server's GPU-idle stop. Pure logic, no I/O.

The culler warns a server whose GPU has been idle (rule ``gpu-idle``, :mod:`.culler`) before
stopping it. The warning offers **Keep**: one click moves that rule's due time to one window
(the profile's ``gpu_idle_timeout``) after the click, so a student reading a paper beside their
notebook is not stopped mid-thought. The rules (:func:`judge_keep`):

- a Keep applies to one server that holds a slice, whose profile has a ``gpu_idle_timeout``,
  and that has a GPU-idle warning now (the culler's, in the ledger); otherwise it is refused
  (HTTP 409) and nothing is counted: there is nothing to keep;
- each Keep counts against the user's allowance, ``keeps_per_day`` of their group policies
  (:attr:`~..lab.policy.PolicyContext.keeps_per_day`, the most generous; ``None``: no limit),
  per day of ``c.GPULab.quota_timezone`` (:func:`keep_day`); at the limit it is refused (HTTP
  429) with when the allowance renews;
- a Keep given at ``t`` makes the ``gpu-idle`` rule due no earlier than
  ``t + gpu_idle_timeout`` (:attr:`.culler.Server.kept_at`); the GPU becoming busy, or any other
  rule (``idle``, ``max-age``, ``budget``, ``preempt``), is not changed by it.

The ledger records each Keep (``gpu_keeps``, :mod:`~..ledger.keeps`), numbered within the
user's day, so two clicks at once cannot both take the last one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo

from ..units import counted
from .culler import Server
from .quota import period_window

__all__ = ["KeepVerdict", "judge_keep", "keep_day"]


@dataclass(frozen=True)
class KeepVerdict:
    """The answer to one Keep click.

    ``ok``: granted. ``status``: the HTTP status to answer (200, or 409 / 429 when refused).
    ``message``: for the user, plain text. ``until``: the new earliest GPU-idle stop (granted
    only). ``used`` / ``allowance``: the user's keeps today after this click and their allowance
    (``None``: no limit)."""

    ok: bool
    status: int
    message: str
    used: int
    allowance: int | None
    until: datetime | None = None


def keep_day(now: datetime, tz: tzinfo) -> tuple[str, datetime]:
    """``(day, renews_at)``: the ISO date of ``now`` in ``tz`` (the day a Keep counts in) and the
    next local midnight (UTC), when the allowance renews."""
    start, end = period_window("day", now, tz=tz)
    return start.astimezone(tz).date().isoformat(), end


def _clock(t: datetime, tz: tzinfo) -> str:
    return t.astimezone(tz).strftime("%H:%M %Z")


def judge_keep(
    server: Server,
    warnings: Mapping[str, datetime],
    used_today: int,
    allowance: int | None,
    now: datetime,
    tz: tzinfo,
) -> KeepVerdict:
    """Whether ``server`` may be kept at ``now`` (rules: module docstring). ``warnings``: the
    rules already warned about for it (``{rule: when}``, as the culler keeps them);
    ``used_today``: the user's keeps so far in :func:`keep_day`'s day; ``allowance``: their
    ``keeps_per_day``."""
    timeout = server.limits.gpu_idle_timeout
    if not server.has_gpu or timeout is None:
        return KeepVerdict(
            False,
            409,
            "This server holds no GPU slice that is stopped when idle: there is nothing to keep.",
            used_today,
            allowance,
        )
    if "gpu-idle" not in warnings:
        return KeepVerdict(
            False,
            409,
            "This server has no GPU-idle warning now: Keep is offered once one is shown.",
            used_today,
            allowance,
        )
    if allowance is not None and used_today >= allowance:
        _, renews = keep_day(now, tz)
        spent = "Keep is turned off for your groups" if allowance == 0 else (
            f"You have used your {counted(allowance, 'keep')} for today"
        )  # fmt: skip
        return KeepVerdict(
            False,
            429,
            f"{spent}; it renews at {_clock(renews, tz)}. Save your work, or move the server "
            "to a CPU profile to go on without a GPU.",
            used_today,
            allowance,
        )
    until = now + timedelta(seconds=timeout)
    used = used_today + 1
    left = "no limit" if allowance is None else f"{allowance - used} left today"
    return KeepVerdict(
        True,
        200,
        f"Kept: your server keeps its GPU until at least {_clock(until, tz)}, even if the GPU "
        f"stays idle ({counted(used, 'keep')} used today, {left}).",
        used,
        allowance,
        until,
    )

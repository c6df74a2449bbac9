"""The GPU-aware culler's decisions: keep, warn or cull one server. Pure logic, no I/O.

The service gathers, per server (named servers included): the hub's ``last_activity``, whether
any kernel is busy (where the single-user server reports it), the utilisation history of its
slice (:mod:`jupyterhub_gpulab.service.monitor`), its limits, and the warnings already given; :func:`decide` answers. The
service then warns the user, stops the server through the hub API, or (dry run) only logs
:meth:`Decision.log_line`.

Rules (``rule`` names, also the allocation's end reason ``culled:<rule>``):

- ``max-age``: ``started_at + max_age`` (the profile's ``max_age`` capped by the policy's
  ``max_session``, :func:`.quota.session_limit`). Always applies, busy or not.
- ``gpu-idle``: the slice's utilisation has stayed below ``threshold_percent`` (default 5 %) for
  ``gpu_idle_timeout``, **even if the hub shows recent activity**: an open tab over an idle GPU
  does not keep the slice. Only for servers holding a slice whose utilisation is known. A sample
  NVML could not read (``gpu_percent=None``), a gap in the samples longer than
  ``max_sample_gap_s`` or a last sample older than that restarts or suspends the idle clock: the
  culler never calls a GPU idle that it could not see. A **Keep** at ``kept_at``
  (:mod:`.keeps`) makes it due no earlier than ``kept_at + gpu_idle_timeout``; a server
  :mod:`.spare` spares (its user at the keyboard, a free slice of its kind, nobody queued) is
  not due this pass.
- ``idle``: no activity for ``idle_timeout``, where activity is the latest of the hub's
  ``last_activity``, the server's start, *now* while a kernel is busy, and the last sample at or
  above the threshold: **a busy GPU counts as activity**, so a long run with the tab closed
  survives until ``max-age``.
- ``budget``: the user's GPU-hour budget runs out at ``budget_exhausted_at``
  (:func:`.quota.over_budget_servers`).
- ``preempt``: from ``preempt_at``, a higher-priority user queued for a slice this server's
  could serve is waiting (chosen by :mod:`.preempt`, by this module's own GPU-idle measure).

CPU-only servers (no slice) get only ``idle`` and ``max-age``.

Warnings: a rule *comes due* at the time above. From ``warn_before_s`` before that the user is
warned once per rule; the server is culled when a rule is due *and* its warning is at least
``warn_before_s`` old (so a rule found already due, e.g. after a service restart, is warned now
and culled ``warn_before_s`` later). A rule whose due time moves back out of the warning window
(the user came back, the GPU got busy) cancels its warning: :attr:`Decision.cancel` lists it and
:func:`next_warnings` drops it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo

from ..inventory.model import Utilization
from ..lab.profile import Profile

__all__ = [
    "RULES",
    "gpu_idle_since",
    "Decision",
    "Limits",
    "Server",
    "Settings",
    "decide",
    "next_warnings",
]

#: Rule names, in the order that breaks ties between rules due at the same moment.
RULES = ("budget", "max-age", "gpu-idle", "preempt", "idle")


@dataclass(frozen=True)
class Limits:
    """A server's limits in seconds; ``None`` disables the rule."""

    idle_timeout: int | None = None
    gpu_idle_timeout: int | None = None
    max_age: int | None = None

    @classmethod
    def for_profile(cls, profile: Profile, max_age: int | None = None) -> Limits:
        """``profile``'s timeouts; ``max_age`` overrides the profile's (pass
        :func:`.quota.session_limit` to include the policy's ``max_session``)."""
        return cls(
            idle_timeout=profile.idle_timeout,
            gpu_idle_timeout=profile.gpu_idle_timeout if profile.wants_gpu else None,
            max_age=max_age if max_age is not None else profile.max_age,
        )


@dataclass(frozen=True)
class Server:
    """What the culler knows about one server.

    ``name`` is the server name (``""`` for the default server). ``last_activity`` is the hub's
    (``None``: never). ``kernels_busy``: ``True`` when the single-user server reports a kernel
    with ``execution_state == "busy"``, ``None`` when it cannot tell. ``has_gpu``: it holds a
    slice. ``samples``: its slice's utilisation history, oldest first. ``budget_exhausted_at``:
    from :func:`.quota.over_budget_servers`, else ``None``."""

    user: str
    name: str
    profile: str
    started_at: datetime
    limits: Limits
    last_activity: datetime | None = None
    kernels_busy: bool | None = None
    has_gpu: bool = False
    samples: Sequence[Utilization] = ()
    budget_exhausted_at: datetime | None = None
    #: the user's policy priority, and whether their policies let them be preempted
    priority: int = 0
    preemptible: bool = False
    #: set by :mod:`.preempt`: when the server is to give its slice to ``preempt_for``
    preempt_at: datetime | None = None
    preempt_for: str = ""
    #: "GPU idle since" as kept in the ledger from before a service restart (``None``: unknown);
    #: continues the clock when the history's first sample finds the GPU idle
    idle_since_kept: datetime | None = None
    #: the user's latest Keep of this server's slice (:mod:`.keeps`); ``None``: never kept
    kept_at: datetime | None = None
    #: set by :mod:`.spare`: its user is at the keyboard and nobody needs its slice, so the
    #: ``gpu-idle`` rule does not come due this pass
    gpu_idle_spared: bool = False
    #: its user's last keystroke, click or scroll in the page, as the server's JupyterLab
    #: extension reports it (:mod:`~..service.presence`); ``None``: no report since it started
    #: (no extension, or nobody touched the page): :mod:`.spare` reads ``last_activity`` then
    interaction_at: datetime | None = None


@dataclass(frozen=True)
class Settings:
    """``threshold_percent``: below it a GPU is idle (0–100). ``warn_before_s``: the warning's
    lead time, seconds. ``max_sample_gap_s``: longer gaps between samples (the monitor was down)
    are not counted as idle, seconds. ``tz``: the time zone of times in messages."""

    threshold_percent: float = 5.0
    warn_before_s: float = 600.0
    max_sample_gap_s: float = 120.0
    tz: tzinfo = timezone.utc


@dataclass(frozen=True)
class Decision:
    """What to do with one server now.

    ``action`` is ``"keep"``, ``"warn"`` or ``"cull"``. ``rule`` is the rule acted on, or for
    ``keep`` the next rule to come due (``None``: none will). ``at``: when that rule culls (for
    ``cull``: the due time). ``message`` is for the user (plain text, empty for ``keep``);
    ``detail`` is for the log. ``cancel`` lists rules whose earlier warnings no longer hold."""

    action: str
    user: str
    server_name: str
    profile: str
    now: datetime
    rule: str | None = None
    at: datetime | None = None
    message: str = ""
    detail: str = ""
    cancel: tuple[str, ...] = ()

    @property
    def end_reason(self) -> str:
        """The ledger's end reason for a cull: ``"culled:<rule>"``."""
        return f"culled:{self.rule}"

    def log_line(self, dry_run: bool = False) -> str:
        """One line for the service log: ``"cull alice/'' (pytorch-1g) rule=gpu-idle
        at=2026-…Z: GPU below 5% since …"`` with ``[dry-run]`` first when nothing is done."""
        at = self.at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if self.at else "-"
        cancel = f" cancel={','.join(self.cancel)}" if self.cancel else ""
        return (
            f"{'[dry-run] ' if dry_run else ''}{self.action} {self.user}/{self.server_name!r} "
            f"({self.profile}) rule={self.rule or '-'} at={at}{cancel}: {self.detail or '-'}"
        )


def _fmt(at: datetime, tz: tzinfo) -> str:
    return at.astimezone(tz).strftime("%H:%M %Z")


def _span(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 120 else f"{minutes / 60:g} h"


def _gpu_signal(
    server: Server, now: datetime, s: Settings
) -> tuple[datetime | None, datetime | None]:
    """``(last busy, idle since)`` from the server's samples since it started.

    ``idle since`` is ``None`` when the GPU cannot be called idle now: no usable sample, the last
    one busy, unknown, or stale."""
    gap = timedelta(seconds=s.max_sample_gap_s)
    last_busy = idle_since = previous = None
    for sample in server.samples:
        if sample.at < server.started_at or sample.at > now:
            continue
        if sample.gpu_percent is None:
            idle_since = None
        elif sample.gpu_percent >= s.threshold_percent:
            last_busy, idle_since = sample.at, None
        elif previous is not None and sample.at - previous > gap:
            idle_since = sample.at  # the monitor did not see the gap: the idle clock restarts
        elif idle_since is None:
            seen_start = previous is None and sample.at - server.started_at <= gap
            idle_since = server.started_at if seen_start else sample.at
            kept = server.idle_since_kept
            if previous is None and kept is not None and server.started_at <= kept < idle_since:
                idle_since = kept  # the history starts after a restart: the clock continues
        previous = sample.at
    if previous is None or now - previous > gap:
        idle_since = None
    return last_busy, idle_since


def gpu_idle_since(server: Server, now: datetime, s: Settings) -> datetime | None:
    """Since when the server's GPU has been idle by the ``gpu-idle`` rule's own measure
    (``None``: not idle, or not known to be); what preemption ranks servers by."""
    return _gpu_signal(server, now, s)[1] if server.has_gpu else None


def _conditions(server: Server, now: datetime, s: Settings) -> dict[str, tuple[datetime, str, str]]:
    """``{rule: (due, user-facing reason, log detail)}`` for the rules that apply."""
    lim = server.limits
    found: dict[str, tuple[datetime, str, str]] = {}
    last_busy, idle_since = (None, None)
    if server.has_gpu:
        last_busy, idle_since = _gpu_signal(server, now, s)
    if server.budget_exhausted_at is not None:
        found["budget"] = (
            server.budget_exhausted_at,
            "your GPU-hour budget runs out",
            f"budget exhausted at {server.budget_exhausted_at.isoformat()}",
        )
    if lim.max_age is not None:
        found["max-age"] = (
            server.started_at + timedelta(seconds=lim.max_age),
            f"it reaches the longest session allowed ({_span(lim.max_age)})",
            f"started {server.started_at.isoformat()}, max age {lim.max_age} s",
        )
    spared = server.gpu_idle_spared  # at the keyboard, nobody needs the slice (.spare)
    if server.has_gpu and lim.gpu_idle_timeout is not None and idle_since and not spared:
        window = timedelta(seconds=lim.gpu_idle_timeout)
        due = idle_since + window
        kept = ""
        if server.kept_at is not None and server.kept_at + window > due:
            due, kept = server.kept_at + window, f", kept at {server.kept_at.isoformat()}"
        found["gpu-idle"] = (
            due,
            f"its GPU has been idle (below {s.threshold_percent:g} %) since "
            f"{_fmt(idle_since, s.tz)}",
            f"GPU below {s.threshold_percent:g}% since {idle_since.isoformat()}, "
            f"timeout {lim.gpu_idle_timeout} s{kept}",
        )
    if server.preempt_at is not None:
        found["preempt"] = (
            server.preempt_at,
            f"its GPU is idle and {server.preempt_for or 'a user with higher priority'} is "
            "waiting for a slice",
            f"preempted for {server.preempt_for} (priority {server.priority} is lower)",
        )
    if lim.idle_timeout is not None:
        active = [server.started_at]
        if server.last_activity is not None:
            active.append(server.last_activity)
        if last_busy is not None:
            active.append(last_busy)
        if server.kernels_busy:
            active.append(now)
        last = max(active)
        found["idle"] = (
            last + timedelta(seconds=lim.idle_timeout),
            f"it has not been used since {_fmt(last, s.tz)}",
            f"last activity {last.isoformat()} (hub, kernels or GPU), timeout {lim.idle_timeout} s",
        )
    return found


# What the user can do: before the cull (warning) and after it.
_BEFORE = {
    "budget": "Save your work; CPU profiles do not use GPU-hours.",
    "max-age": "Save your work; you can start a new server afterwards.",
    "gpu-idle": "Run something on the GPU, click Keep, or move the server to a CPU profile.",
    "idle": "Open it and run a cell to keep it.",
    "preempt": "Run something on the GPU to keep it, or save your work.",
}
_AFTER = {
    "budget": "CPU profiles do not use GPU-hours and are still open to you.",
    "max-age": "Start a new one from the hub when you need it.",
    "gpu-idle": "Start it again from the hub when you need the GPU.",
    "idle": "Start it again from the hub when you need it.",
    "preempt": "Its slice went to a user with higher priority who was queued for it; start "
    "again from the hub when you need the GPU, or join the waitlist.",
}


def _order(rule: str, conds: Mapping[str, tuple[datetime, str, str]]) -> tuple:
    return (conds[rule][0], RULES.index(rule))


def decide(
    server: Server,
    warnings: Mapping[str, datetime],
    now: datetime,
    settings: Settings = Settings(),
) -> Decision:
    """Keep, warn or cull ``server`` at ``now`` (rules: module docstring). ``warnings`` maps each
    rule already warned about for this server to when the warning went out."""
    conds = _conditions(server, now, settings)
    lead = timedelta(seconds=settings.warn_before_s)
    name = f"Your server '{server.name}'" if server.name else "Your server"
    base = {
        "user": server.user,
        "server_name": server.name,
        "profile": server.profile,
        "now": now,
    }
    in_window = {r for r, (due, _, _) in conds.items() if now >= due - lead}
    cancel = tuple(r for r in RULES if r in warnings and r not in in_window)
    cullable = [
        r for r in in_window if now >= conds[r][0] and r in warnings and now >= warnings[r] + lead
    ]
    if cullable:
        rule = min(cullable, key=lambda r: _order(r, conds))
        due, why, detail = conds[rule]
        return Decision(
            "cull",
            rule=rule,
            at=due,
            message=f"{name} was stopped: {why}. {_AFTER[rule]}",
            detail=detail,
            cancel=cancel,
            **base,
        )
    pending = [r for r in in_window if r not in warnings]
    if pending:
        rule = min(pending, key=lambda r: _order(r, conds))
        due, why, detail = conds[rule]
        at = max(due, now + lead)
        return Decision(
            "warn",
            rule=rule,
            at=at,
            message=f"{name} will be stopped at {_fmt(at, settings.tz)}: {why}. {_BEFORE[rule]}",
            detail=detail,
            cancel=cancel,
            **base,
        )
    upcoming = min(conds, key=lambda r: _order(r, conds)) if conds else None
    return Decision(
        "keep",
        rule=upcoming,
        at=conds[upcoming][0] if upcoming else None,
        detail=conds[upcoming][2] if upcoming else "no limit applies",
        cancel=cancel,
        **base,
    )


def next_warnings(previous: Mapping[str, datetime], decision: Decision) -> dict[str, datetime]:
    """The server's warnings after acting on ``decision``: cancelled ones dropped, a new warning
    recorded at ``decision.now``, everything forgotten after a cull."""
    if decision.action == "cull":
        return {}
    kept = {r: t for r, t in previous.items() if r not in decision.cancel}
    if decision.action == "warn" and decision.rule is not None:
        kept[decision.rule] = decision.now
    return kept

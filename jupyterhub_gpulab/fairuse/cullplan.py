"""What the culler knows about every running server, built from the hub's answer, the ledger and
the utilisation history. Pure logic, no I/O: :mod:`jupyterhub_gpulab.service.culling` reads, this module combines.

- **Servers** come from the hub (``GET /hub/api/users?state=active``): every *ready* server,
  named ones included, with its ``last_activity`` and its user's groups. A server still starting
  or stopping is left alone.
- **Slices** come from the ledger's open allocations, matched by ``(user, server_name)``: the
  allocation gives the profile, the slice and ``started_at`` (the slice has been held since).
  A server without one is CPU-only: its profile is the one in its ``user_options``, else the
  lab's default profile, and only the ``idle`` and ``max-age`` rules apply to it.
- **Limits**: the profile's ``idle_timeout``, ``gpu_idle_timeout`` and ``max_age``, the latter
  capped by the user's policies' ``max_session`` (:func:`~..fairuse.quota.session_limit`).
- **Utilisation**: the slice's history from the monitor; with ``unknown_idle`` a sample without
  a figure counts as 0 % (``c.GPULabService.unknown_utilization = "idle"``).
- **Budgets**: each user's governing GPU-hour budget over the ledger's allocations of the period
  (:func:`~..fairuse.quota.user_budget`); servers whose user runs out within ``within_s`` get
  ``budget_exhausted_at`` (:func:`~..fairuse.quota.over_budget_servers`).

Warnings live in the ledger (``cull_warnings``): :func:`warnings_map` turns them into what
:func:`~..fairuse.rounds.cull_round` keeps, and :func:`to_clear` says which rows a pass made
obsolete. A server the culler stopped gets a notice whose rule is its end reason
(``culled:<rule>``), shown to its user until they start that server again or for
:data:`NOTICE_TTL`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from ..hubapi.servers import HubServer, servers_in
from ..inventory.model import Utilization
from ..lab.choice import default_profile
from ..lab.config import Lab
from ..lab.policy import PolicyContext
from ..ledger import Allocation, CullWarning
from ..ledger.notices import LASTING_PREFIXES, NOTICE_PREFIX, NOTICE_PREFIXES
from .culler import RULES, Limits, Server
from .quota import over_budget_servers, session_limit, user_budget, window_start

__all__ = [
    "NOTICE_PREFIX",
    "NOTICE_TTL",
    "budget_window_start",
    "plan",
    "running_servers",
    "to_clear",
    "warnings_map",
]

#: How long a "your server was stopped" notice stays at most.
NOTICE_TTL = timedelta(hours=24)


def running_servers(users: Iterable[Mapping]) -> list[HubServer]:
    """Every ready server in the hub's user models (servers starting or stopping are left out:
    their ``pending`` is set and ``ready`` is false)."""
    return sorted((s for s in servers_in(users) if s.state == "running"), key=lambda r: r.key)


def budget_window_start(lab: Lab, now: datetime) -> datetime:
    """Where to read the ledger from to compute any user's budget now."""
    policies = list(lab.policies.values())
    if lab.default_policy is not None:
        policies.append(lab.default_policy)
    return window_start(policies, now, tz=lab.tz, term=lab.term)


def _budgets(
    contexts: Mapping[str, PolicyContext], period: Iterable[Allocation], now: datetime
) -> dict[str, object]:
    by_user: dict[str, list[Allocation]] = {}
    for a in period:
        by_user.setdefault(a.user, []).append(a)
    return {
        user: user_budget(user, ctx, by_user.get(user, ()), now) for user, ctx in contexts.items()
    }


def _seen(samples: Sequence[Utilization], unknown_idle: bool) -> tuple[Utilization, ...]:
    if not unknown_idle:
        return tuple(samples)
    return tuple(replace(s, gpu_percent=0.0) if s.gpu_percent is None else s for s in samples)


def plan(
    running: Sequence[HubServer],
    open_allocations: Iterable[Allocation],
    lab: Lab,
    history: Callable[[str], Sequence[Utilization]],
    period_allocations: Iterable[Allocation],
    now: datetime,
    *,
    within_s: float,
    unknown_idle: bool = False,
    idle_clocks: Mapping[int, datetime] | None = None,
    keeps: Mapping[int, datetime] | None = None,
    interactions: Mapping[tuple[str, str], datetime] | None = None,
) -> list[tuple[HubServer, Server, tuple[Allocation, ...]]]:
    """One culler :class:`~..fairuse.culler.Server` per running server (module docstring), with
    the hub's record and the open allocations it holds (oldest first). ``history(slice_id)``
    gives a slice's samples; ``period_allocations``: the ledger's allocations since
    :func:`budget_window_start` (every user's; only running users' count); ``idle_clocks``:
    ``{allocation id: GPU idle since}`` kept in the ledger (``Ledger.idle_clocks``); ``keeps``:
    ``{allocation id: the latest Keep}`` (``Ledger.latest_keeps``, :mod:`.keeps`);
    ``interactions``: ``{(user, server name): last interaction}`` its JupyterLab extension
    reported (:class:`~..service.presence.Presence`), kept only when at or after the server's
    start (an earlier one was in the page of a server since stopped)."""
    idle_clocks = idle_clocks or {}
    interactions = interactions or {}
    keeps = keeps or {}
    held: dict[tuple[str, str], list[Allocation]] = {}
    for a in open_allocations:
        held.setdefault((a.user, a.server_name), []).append(a)
    for allocations in held.values():
        allocations.sort(key=lambda a: a.id)
    contexts: dict[str, PolicyContext] = {}
    for r in running:  # a user's first server gives their groups, as the hub lists them
        contexts.setdefault(r.user, PolicyContext.for_user(r.groups, r.admin, lab))
    budgets = _budgets(contexts, period_allocations, now)
    mine_open = [a for r in running for a in held.get(r.key, ())]
    exhausted: dict[int, datetime] = {
        ob.allocation.id: ob.exhausted_at
        for ob in over_budget_servers(mine_open, budgets, now, within_s=within_s)
    }
    found = []
    for r in running:
        allocations = tuple(held.get(r.key, ()))
        first = allocations[0] if allocations else None
        slug = first.profile if first else r.profile
        profile = lab.profile(slug) if slug else None
        if profile is None and first is None:
            profile = default_profile(lab.profiles)
        mine = contexts[r.user].policies
        limits = Limits.for_profile(profile, session_limit(profile, mine)) if profile else Limits()
        started = first.started_at if first else (r.started or now)
        dues = [exhausted[a.id] for a in allocations if a.id in exhausted]
        touched = interactions.get(r.key)
        server = Server(
            user=r.user,
            name=r.name,
            profile=slug or (profile.slug if profile else "?"),
            started_at=started,
            limits=limits,
            last_activity=r.last_activity,
            kernels_busy=None,
            has_gpu=first is not None,
            samples=_seen(history(first.slice_id), unknown_idle) if first else (),
            budget_exhausted_at=min(dues) if dues else None,
            priority=contexts[r.user].priority,
            preemptible=contexts[r.user].preemptible,
            idle_since_kept=idle_clocks.get(first.id) if first else None,
            kept_at=keeps.get(first.id) if first else None,
            interaction_at=touched if touched is not None and touched >= started else None,
        )
        found.append((r, server, allocations))
    return found


def warnings_map(warnings: Iterable[CullWarning]) -> dict[tuple[str, str], dict[str, datetime]]:
    """The ledger's warnings as :func:`~..fairuse.rounds.cull_round` keeps them:
    ``{(user, server_name): {rule: when warned}}`` (notices left out)."""
    found: dict[tuple[str, str], dict[str, datetime]] = {}
    for w in warnings:
        if w.rule in RULES:
            found.setdefault((w.user, w.server_name), {})[w.rule] = w.created_at
    return found


def to_clear(
    warnings: Iterable[CullWarning],
    kept: Mapping[tuple[str, str], Mapping[str, datetime]],
    running: Iterable[HubServer],
    now: datetime,
) -> list[tuple[str, str, str]]:
    """``(user, server_name, rule)`` of the ledger's warnings a pass made obsolete: warnings no
    longer in ``kept`` (cancelled, acted on, or their server stopped), and notices of a cull
    whose server runs again (a pass after the cull sees it ready: it was started since) or that
    are older than :data:`NOTICE_TTL` (a course's notices and the seat guard's ``ended:``
    ones: only by age)."""
    again = {r.key for r in running}
    found = []
    for w in warnings:
        key = (w.user, w.server_name)
        if w.rule in RULES:
            if w.rule not in kept.get(key, {}):
                found.append((w.user, w.server_name, w.rule))
        elif w.rule.startswith((*NOTICE_PREFIXES, *LASTING_PREFIXES)) and (
            now - w.created_at > NOTICE_TTL
            or (key in again and not w.rule.startswith(LASTING_PREFIXES))
        ):
            found.append((w.user, w.server_name, w.rule))
    return found

"""Demand-aware GPU idle: a user at the keyboard keeps an idle slice nobody needs. Pure logic,
no I/O.

The ``gpu-idle`` rule (:mod:`.culler`) stops a server whose GPU stayed idle for the profile's
``gpu_idle_timeout`` even while its user works in the notebook: a student reading between two
GPU cells loses their kernel although, often, the lab has free slices of the very kind they hold
and nobody is waiting for one. With ``c.GPULabService.gpu_idle_spare_active`` set, the culler
*spares* such a server (:func:`spares`): the ``gpu-idle`` rule does not come due for it this
pass, so it is neither warned nor stopped, when all of these hold now:

- it holds a slice and its user was at the keyboard within ``active_within_s``: their last
  keystroke, click or scroll in JupyterLab (:attr:`~.culler.Server.interaction_at`, which the
  server's JupyterLab extension reports), or, for a server whose extension reports none, the
  hub's ``last_activity`` (an open tab, a kernel's activity: a tab left open counts);
- a user starting the server's profile now would still find a free slice for it
  (:attr:`Demand.free`: free slices of the profile's request that no booking keeps);
- nobody is queued for a slice this server's slice could serve (:attr:`Demand.queued`);
- its GPU has not been idle longer than the profile's ``gpu_idle_timeout`` plus
  ``longest_s`` (``c.GPULabService.gpu_idle_spare_longest``): a user thinking between GPU
  cells runs one again before that, while a tab left open over an idle GPU (the hub counts an
  open tab as activity) is not spared for ever.

The slice is reclaimed only when someone needs it (or the spare's longest runs out): the pass
the last free slice is taken, or a user joins the queue for that kind, the rule applies again from the GPU's idle clock (which went
on running), so a server idle past its timeout is warned at once and stopped
``cull_warn_before`` later, as a rule found already due always is. Every other rule (``idle``,
``max-age``, ``budget``, ``preempt``) is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from .culler import Server, Settings, gpu_idle_since

__all__ = ["Demand", "Spare", "last_seen", "spare_idle", "spares"]


@dataclass(frozen=True)
class Demand:
    """What the lab asks of one server's slice now: ``free``, slices a user starting the
    server's profile could claim (free and not kept by a booking); ``queued``, waiting users
    whose request the server's slice satisfies."""

    free: int
    queued: int


@dataclass(frozen=True)
class Spare:
    """The setting, seconds: ``active_within_s`` (``gpu_idle_spare_active``; 0: off) and
    ``longest_s`` (``gpu_idle_spare_longest``; ``None``: no limit)."""

    active_within_s: float = 0.0
    longest_s: float | None = None


def last_seen(server: Server) -> datetime | None:
    """When ``server``'s user was last seen at the keyboard: the interaction its JupyterLab
    extension reported, where it reported one; else the hub's ``last_activity`` (``None``:
    never)."""
    if server.interaction_at is not None:
        return server.interaction_at
    return server.last_activity


def _at_keyboard(server: Server, now: datetime, spare: Spare) -> bool:
    seen = last_seen(server)
    if spare.active_within_s <= 0 or not server.has_gpu or seen is None:
        return False
    return now - seen <= timedelta(seconds=spare.active_within_s)


def _not_too_long(server: Server, now: datetime, spare: Spare, idle_since) -> bool:
    timeout = server.limits.gpu_idle_timeout
    if spare.longest_s is None or idle_since is None or timeout is None:
        return True
    return now - idle_since < timedelta(seconds=timeout + spare.longest_s)


def spares(
    server: Server, demand: Demand, now: datetime, spare: Spare, idle_since: datetime | None
) -> bool:
    """Whether the ``gpu-idle`` rule spares ``server`` at ``now`` (module docstring), its GPU
    idle since ``idle_since`` (:func:`~.culler.gpu_idle_since`; ``None``: not idle)."""
    return (
        _at_keyboard(server, now, spare)
        and _not_too_long(server, now, spare, idle_since)
        and demand.free > 0
        and demand.queued == 0
    )


def spare_idle(
    servers: Iterable[Server],
    demand_of: Callable[[Server], Demand],
    now: datetime,
    spare: Spare,
    settings: Settings,
) -> list[Server]:
    """``servers`` with :attr:`~.culler.Server.gpu_idle_spared` set on those :func:`spares`
    spares (others unchanged), their GPU's idle clock by ``settings`` (the culler's own);
    ``demand_of(server)`` is asked only for servers holding a slice whose user was active in
    time."""
    out = []
    for s in servers:
        at_keyboard = _at_keyboard(s, now, spare)  # only then is the ledger asked
        if at_keyboard and spares(s, demand_of(s), now, spare, gpu_idle_since(s, now, settings)):
            s = replace(s, gpu_idle_spared=True)
        out.append(s)
    return out

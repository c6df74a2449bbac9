"""Keep and Move to CPU: what a user at the keyboard can do about a GPU-idle warning.

Both act on the caller's own running server only (the handlers check who asks,
:mod:`.web.keepapi`), and both refuse with an :class:`~.actions.ActionError` (status and a
message for the user) before changing anything.

- :func:`keep_server` judges the click with :func:`~..fairuse.keeps.judge_keep` on the same
  picture of the server the culler builds (:func:`~..fairuse.cullplan.plan`, the culler's
  settings), records it in the ledger (:meth:`~..ledger.Ledger.take_keep`), and clears the
  GPU-idle warning when the culler's own rule (:func:`~..fairuse.culler.decide`) says the kept
  server is out of the warning window, so the user's pages stop showing it at once.
- :func:`move_to_cpu` stops the server through the hub (:mod:`..hubapi.stopper`), ends its
  allocations as ``moved-to-cpu``, and starts the same server (same name, so the same home
  volume) with a CPU profile open to the user, through the hub's REST API with
  ``{"profile": <slug>}`` as its ``user_options``: the spawner judges that choice as it judges
  its form's. The stop and start run after the request is answered (HTTP 202): in JupyterLab,
  the request comes from the very server being stopped. Open notebooks are saved by the
  JupyterLab extension before it asks; the page says to save first.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Protocol

from .. import clock
from ..fairuse.culler import Server, Settings, decide
from ..fairuse.cullplan import plan, warnings_map
from ..fairuse.keeps import KeepVerdict, judge_keep, keep_day
from ..hubapi.client import HubClient, HubError
from ..hubapi.servers import HubServer
from ..lab.choice import default_profile
from ..lab.policy import PolicyContext
from ..lab.profile import Profile
from ..lab.profiles import entitled_in
from ..ledger import aio
from .actions import ActionError
from .state import LabState

log = logging.getLogger("gpulab.keep")

#: ``end_reason`` of the allocations of a server moved to a CPU profile.
MOVED_REASON = "moved-to-cpu"


class CullView(Protocol):
    """What Keep reads of the culler (:class:`~.culling.Culler` has it): its settings, and
    whether it counts unknown utilisation as idle."""

    settings: Settings
    unknown_idle: bool


def _label(name: str) -> str:
    return f"Your server {name!r}" if name else "Your server"


async def _running(hub: HubClient, user: str, name: str) -> HubServer:
    """``user``'s server ``name`` as the hub reports it, if it is running (else a 409)."""
    try:
        servers = await hub.servers_of(user)
    except HubError as e:
        raise ActionError(503, f"The hub cannot be asked for your servers ({e.message}).") from None
    found = next((s for s in servers if s.name == name), None)
    if found is None or found.state != "running":
        state = found.state if found else "not there"
        raise ActionError(409, f"{_label(name)} is {state}, not running: there is nothing to do.")
    return found


async def keep_server(
    state: LabState, hub: HubClient, view: CullView | None, user: dict, name: str
) -> KeepVerdict:
    """One Keep of ``user``'s (the hub's model) server ``name``, judged with the culler
    ``view``'s settings: the granted verdict, or an :class:`~.actions.ActionError` with the
    refusal (409: nothing to keep; 429: allowance used up, the message says when it renews;
    503: no culler runs, ``view`` is ``None``)."""
    if view is None:
        raise ActionError(
            503, "The culler is not running in this service: there is no stop to keep."
        )
    me = user["name"]
    running = await _running(hub, me, name)
    lab = state.lab

    def work() -> KeepVerdict:
        ledger, now = state.ledger, clock.utcnow()
        [(_, server, held)] = plan(
            [running], ledger.open_allocations(me), lab, state.history, (), now,
            within_s=view.settings.warn_before_s, unknown_idle=view.unknown_idle,
            idle_clocks=ledger.idle_clocks(), keeps=ledger.latest_keeps(),
        )  # fmt: skip
        warned = warnings_map(ledger.warnings(me)).get((me, name), {})
        ctx = PolicyContext.for_user(user.get("groups") or (), bool(user.get("admin")), lab)
        day, _ = keep_day(now, lab.tz)
        allowance = ctx.keeps_per_day
        verdict = judge_keep(server, warned, ledger.keeps_used(me, day), allowance, now, lab.tz)
        if not verdict.ok:
            return verdict
        taken = ledger.take_keep(
            me, name, held[0].id, day=day, allowance=allowance, at=now, until=verdict.until
        )
        if taken is None:  # a click at the same moment took the last one
            return judge_keep(server, warned, allowance or 0, allowance, now, lab.tz)
        _clear_if_moved_out(ledger, replace(server, kept_at=now), warned, now, view.settings)
        return replace(verdict, used=taken)

    verdict = await aio.call(work)
    if not verdict.ok:
        raise ActionError(verdict.status, verdict.message)
    log.info("%s kept %r until %s (%d today)", me, name, verdict.until, verdict.used)
    return verdict


def _clear_if_moved_out(ledger, kept: Server, warned: dict, now, settings: Settings) -> None:
    """Drop the GPU-idle warning when the culler's rule cancels it for the kept server."""
    d = decide(kept, {"gpu-idle": warned["gpu-idle"]}, now, settings)
    if "gpu-idle" in d.cancel:
        ledger.clear_warnings(kept.user, kept.name, "gpu-idle")


def keeps_view(state: LabState, user: dict) -> dict:
    """``user``'s keeps today, for their page: ``{"used", "allowance" (None: no limit),
    "renews_at" (ISO, UTC)}`` (blocks: reads the ledger)."""
    ctx = PolicyContext.for_user(user.get("groups") or (), bool(user.get("admin")), state.lab)
    day, renews = keep_day(clock.utcnow(), state.lab.tz)
    return {
        "used": state.ledger.keeps_used(user["name"], day),
        "allowance": ctx.keeps_per_day,
        "renews_at": renews.isoformat(),
    }


def keeps_today(state: LabState) -> dict:
    """Every user's keeps today, for the admin page: ``{"day", "tz", "users": {user: n}}``
    (blocks: reads the ledger)."""
    day, _ = keep_day(clock.utcnow(), state.lab.tz)
    return {"day": day, "tz": str(state.lab.tz), "users": state.ledger.keeps_by_user(day)}


def cpu_profile(state: LabState, user: dict) -> Profile | None:
    """The CPU profile ``user`` moves to: of the CPU profiles open to them, the one marked
    ``default``, else the first (:func:`~..lab.choice.default_profile`'s rule); ``None``: none
    is open to them."""
    ctx = PolicyContext.for_user(user.get("groups") or (), bool(user.get("admin")), state.lab)
    return default_profile([p for p in entitled_in(state.lab.profiles, ctx) if not p.wants_gpu])


async def move_to_cpu(state: LabState, hub: HubClient, user: dict, name: str) -> str:
    """Stop ``user``'s server ``name`` and start it again with a CPU profile (module docstring);
    returns the message for the user once the move is under way. Refused (409) when the server
    is not running, holds no slice, or no CPU profile is open to the user."""
    me = user["name"]
    await _running(hub, me, name)
    held = await aio.call(
        lambda: [a.id for a in state.ledger.open_allocations(me) if a.server_name == name]
    )
    if not held:
        raise ActionError(409, f"{_label(name)} holds no GPU slice: it already runs on CPU.")
    cpu = cpu_profile(state, user)
    if cpu is None:
        raise ActionError(
            409,
            "No CPU profile is open to you, so the server cannot move; save your work and stop "
            "it from the hub instead.",
        )

    async def start_cpu():
        def close():
            for aid in held:
                if not state.ledger.amend_end_reason(aid, MOVED_REASON):
                    a = state.ledger.get(aid)
                    if a is not None and a.open:
                        state.ledger.release(aid, MOVED_REASON)

        await aio.call(close)
        await hub.start(me, name, {"profile": cpu.slug})
        log.info("%s's server %r moved to %s (allocations %s)", me, name, cpu.slug, held)

    def not_stopped():
        log.warning("%s's server %r did not stop; it was not moved to CPU", me, name)

    hub.stopper.in_background(
        hub.stopper.stop(me, name, start_cpu, if_not_stopped=not_stopped),
        f"moving {me}'s server {name!r} to {cpu.slug}",
    )
    return (
        f"{_label(name)} is stopping and will start again with {cpu.display_name} on the same "
        "home, without a GPU, in a minute or so."
    )

"""The service's MIG layout pass: the GPUs of ``c.GPULab.mig_schedule`` follow the timetable.

Every ``c.GPULabService.layout_every``, for each MIG GPU of this host the schedule covers, the
decision of :func:`~..inventory.layoutplan.decide` (from the ledger's slices, open allocations
and bookings) is acted on:

- **drain** a GPU whose layout is not its target (no new allocation lands on it), with the
  reason ``"MIG re-layout to <layout>"`` the admin page shows;
- **warn** each holder (the culler's channel: a warning with rule ``mig-layout`` on the hub's
  home page and the user's gpulab page) that their server stops at
  :attr:`~..inventory.layoutplan.Decision.holders_by`, and **stop** it then (its allocation
  ends ``culled:mig-layout``, and the user is told why);
- **re-lay** a GPU that holds no allocation any more (:func:`~..cli.miglayout.relay`: NVML's
  GPU and compute instance calls, never a MIG mode change), then re-read the inventory so the
  service and the ledger offer the new instances, and return the GPU to service.

A GPU an admin drained for another reason is left alone. A service killed part way leaves the
GPU drained "MIG re-layout to …"; the next pass (of the next service) finishes the layout:
:func:`~..cli.miglayout.relay` converges. It needs NVML's MIG configuration capability: the
service runs as root on the GPU host. On a lab whose GPUs come from node agents (Swarm) the
agent on each GPU's node would do it: not built, and the pass says so once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from traitlets.config import LoggingConfigurable

from .. import clock
from ..cli.miglayout import EXIT, relay
from ..inventory.layoutplan import DRAIN_REASON, HORIZON, Decision, decide
from ..inventory.miglayout import format_layout
from ..lab.traits import Duration
from ..ledger import aio
from ..ledger.bookingfit import ScheduledHost

log = logging.getLogger("gpulab.layouts")

#: the warning's rule before the stop, and the end reason (and notice) after it
RULE = "mig-layout"
END_REASON = "culled:mig-layout"


class LayoutTraits(LoggingConfigurable):
    """The layout pass's settings (``c.GPULabService.*``)."""

    layout_every = Duration(
        "1m",
        positive=True,
        config=True,
        help="""Seconds (or ``"1m"``) between passes of the MIG layout schedule
        (``c.GPULab.mig_schedule``): drain a GPU ahead of a change, warn and then stop its
        holders, re-lay it through NVML once empty, re-read the inventory. Needs the service to
        run as root on the GPU host (NVML's MIG configuration capability); never changes MIG
        mode. Runs only when a schedule is set and the GPUs are read from NVML on this host.
        ``c.GPULabService.layout_every = "1m"``""",
    )


@dataclass
class GpuPass:
    """What one pass did to one GPU (for logs and tests)."""

    decision: Decision
    drained: bool = False
    warned: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    relaid: int | None = None  # relay()'s exit status


class LayoutKeeper:
    """Runs layout passes for one service (``state``: its :class:`~.state.LabState`, ``hub``:
    its :class:`~..hubapi.client.HubClient`, whose ``stopper`` stops servers)."""

    def __init__(self, state, hub, settings: LayoutTraits):
        self.state, self.hub, self.settings = state, hub, settings
        self.schedule = state.lab.schedule
        self._said_agents = False

    @property
    def active(self) -> bool:
        """A schedule is set and this host's GPUs are read from NVML (the pass has work): the
        same test that gives the ledger its :class:`~..ledger.bookingfit.ScheduledHost`."""
        source = self.state.inventory.source
        if ScheduledHost.of(self.schedule, self.state.node, source) is not None:
            return True
        if self.schedule.entries and not self._said_agents:
            log.warning(
                "c.GPULab.mig_schedule is set but the GPUs are not read from NVML on this "
                "host (%s): no layout changes. On node agents (Swarm) re-laying is not yet "
                "built; run `gpulab mig-layout` on the GPU's host.",
                source,
            )
            self._said_agents = True
        return False

    async def run_pass(self) -> list[GpuPass]:
        """One pass (module docstring). Never raises: a GPU's failure is logged, the rest go on."""
        if not self.active:
            return []
        now = clock.utcnow()
        try:
            found = await aio.call(decisions, self.state, now)
        except Exception:
            log.exception("Layout pass: cannot read the ledger; the next pass tries again")
            return []
        done = []
        for d, dev, held in found:
            try:
                done.append(await self._one(d, dev, held, now))
            except Exception:
                log.exception("Layout pass: GPU %s failed; the next pass tries again", d.uuid)
        return done

    async def _one(self, d: Decision, dev: dict, held: list, now: datetime) -> GpuPass:
        ledger = self.state.ledger
        out = GpuPass(d)
        reason = dev.get("drain_reason") or ""
        ours = reason.startswith(DRAIN_REASON)
        if dev["drained"] and not ours:
            return out  # an admin drained it: theirs to return
        if not d.drain:
            if dev["drained"] and ours:  # a change finished by a pass killed before un-draining
                await aio.call(self.state.undrain, d.uuid)
            for a in held:
                await aio.call(ledger.clear_warnings, a.user, a.server_name or "", RULE)
            return out
        if not dev["drained"]:
            await aio.call(ledger.set_drained, d.uuid, True, DRAIN_REASON + d.target)
            out.drained = True
            log.info("Drained GPU %s for its change to %s (%s)", d.uuid, d.target, d.why)
        if d.relay_due:
            out.relaid = await aio.call(self._relay, d)
            return out
        by_server: dict[tuple[str, str], list[int]] = {}
        for a in held:
            by_server.setdefault((a.user, a.server_name or ""), []).append(a.id)
        for key, ids in by_server.items():
            if d.holders_by is not None and now >= d.holders_by:
                if key not in self.hub.stopper.stopping:
                    await self._stop(d, key, ids)
                    out.stopped.append("/".join(key))
            else:
                text = _warning(d, self.state.lab.tz)
                await aio.call(ledger.set_warning, *key, RULE, text, d.holders_by)
                out.warned.append("/".join(key))
        return out

    def _relay(self, d: Decision) -> int:
        """Re-lay the GPU (blocking), then have the service re-read its inventory."""
        said = []
        code = relay(
            self.state.gpulab,
            self.state.ledger,
            d.uuid,
            d.target,
            nvml=self.state.nvml,
            say=said.append,
        )
        for line in said:
            (log.warning if line.startswith("gpulab:") else log.info)("Layout pass: %s", line)
        if code != EXIT["done"]:
            return code
        self.state.refresh_inventory()  # the pages and the culler see the new instances now
        return code

    async def _stop(self, d: Decision, key: tuple[str, str], held: list[int]) -> None:
        user, name = key
        ledger = self.state.ledger
        message = (
            f"Your server was stopped: its GPU changed to the {d.target} MIG layout "
            f"({d.why}); you were warned from when the change was scheduled. Start it again "
            "to get a slice of the new layout or another GPU."
        )

        async def closed():
            def work():
                for aid in held:
                    if not ledger.amend_end_reason(aid, END_REASON):
                        a = ledger.get(aid)
                        if a is not None and a.open:
                            ledger.release(aid, END_REASON)
                ledger.clear_warnings(user, name, RULE)
                ledger.set_warning(user, name, END_REASON, message, clock.utcnow())

            await aio.call(work)
            log.info("Layout pass: stopped %s/%r for GPU %s's change", user, name, d.uuid)

        def not_stopped():
            log.warning("Layout pass: %s/%r did not stop; the next pass tries again", user, name)

        await self.hub.stopper.stop(user, name, closed, if_not_stopped=not_stopped)


def decisions(state, now: datetime | None = None) -> list[tuple[Decision, dict, list]]:
    """``(decision, device row, its open allocations)`` for each MIG GPU of ``state``'s host
    that ``c.GPULab.mig_schedule`` covers (blocking: reads the ledger; ``[]`` without a
    schedule). The pass acts on them; the admin page and API show them."""
    schedule = state.lab.schedule
    if not schedule.entries:
        return []
    now = now or clock.utcnow()
    ledger = state.ledger
    node = state.node
    slices = [s for s in ledger.slices() if s["node"] == node and s["present"]]
    by_slice: dict[str, list] = {}
    for a in ledger.open_allocations():
        by_slice.setdefault(a.slice_id, []).append(a)
    bookings = ledger.bookings(now - timedelta(days=1), now + HORIZON)
    out = []
    for dev in ledger.devices():
        if dev["node"] != node or not dev["present"] or not dev["mig_enabled"]:
            continue
        mine = [s for s in slices if s["device_uuid"] == dev["uuid"] and s["mig_profile"]]
        held = [a for s in mine for a in by_slice.get(s["id"], ())]
        d = decide(
            schedule,
            dev["uuid"],
            now,
            current=format_layout([s["mig_profile"] for s in mine]),
            holders=len(held),
            bookings=bookings,
        )
        if d is not None:
            out.append((d, dev, held))
    return out


def _warning(d: Decision, tz) -> str:
    at = d.holders_by.astimezone(tz).strftime("%H:%M %Z") if d.holders_by else "soon"
    return (
        f"This server's GPU changes to the {d.target} MIG layout ({d.why}). Save your work "
        f"and stop the server before {at}; it is stopped then. Start again afterwards for a "
        "slice of the new layout."
    )

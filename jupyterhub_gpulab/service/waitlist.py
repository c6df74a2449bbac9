"""The waitlist's service loop: lapse unclaimed offers, then offer freed slices to the first in
line (:mod:`jupyterhub_gpulab.ledger.waitlist` holds the rules and the queue).

Every ``waitlist_every`` seconds: :meth:`~..ledger.Ledger.expire_offers`, then
:meth:`~..ledger.Ledger.offer_next` with each queued user's groups read from the hub
(``GET /hub/api/users/<name>``) so that policy and budget are checked again at the offer
(:func:`~..fairuse.offers.offer_limits`), and each profile's request is narrowed to the GPUs its
image can use (:mod:`.imageneeds`), as the spawner's own claim is. An offer leaves a warning with rule
``waitlist-offer``, which the hub's home page (``hub/announce.py``; the rules in ``ledger/notices.py``) and the user's gpulab page
show. A user the hub does not answer for stays queued for the next pass.
"""

from __future__ import annotations

import logging

from traitlets import Bool
from traitlets.config import LoggingConfigurable

from ..fairuse.offers import offer_limits
from ..hubapi.client import HubError
from ..lab.traits import Duration
from ..ledger import aio

log = logging.getLogger("gpulab.waitlist")


class WaitlistTraits(LoggingConfigurable):
    """The waitlist's settings (``c.GPULabService.*``)."""

    waitlist_enabled = Bool(
        True,
        config=True,
        help="""Offer freed slices to users queued for a profile (the waitlist), in order of
        priority then arrival. Off: nobody is offered anything and queued users wait until
        they retry. ``c.GPULabService.waitlist_enabled = True``""",
    )

    waitlist_hold = Duration(
        "5m",
        positive=True,
        config=True,
        help="""How long a freed slice is held for the first in line (a duration, ``"5m"``, or
        seconds) before it passes to the next. ``c.GPULabService.waitlist_hold = "5m"``""",
    )

    preemption = Bool(
        False,
        config=True,
        help="""Let a queued user of higher priority preempt a lower-priority server whose GPU
        has been idle at least ``preempt_min_idle`` (only servers of users whose group policies
        all say ``"preemptible": True``). The server is warned ``cull_warn_before`` ahead, then
        stopped by the culler; the user sees why. ``c.GPULabService.preemption = True``""",
    )

    preempt_min_idle = Duration(
        "30m",
        config=True,
        help="""How long a server's GPU must have been idle (by the culler's measure) before it
        may be preempted (a duration, ``"30m"``, or seconds).
        ``c.GPULabService.preempt_min_idle = "30m"``""",
    )

    waitlist_every = Duration(
        "15s",
        positive=True,
        config=True,
        help="""Seconds between waitlist passes (lapse unclaimed offers, offer freed slices).
        ``c.GPULabService.waitlist_every = "15s"``""",
    )


class WaitlistKeeper:
    """Runs waitlist passes for one service (``state``: its :class:`~.state.LabState`,
    ``hub``: its :class:`~..hubapi.client.HubClient`, ``settings``: :class:`WaitlistTraits`)."""

    def __init__(self, state, hub, settings: WaitlistTraits):
        self.state, self.hub, self.settings = state, hub, settings

    async def run_pass(self) -> list:
        """One pass; returns the entries offered a slice. Never raises (logs instead)."""
        if not self.settings.waitlist_enabled:
            return []
        ledger = self.state.ledger
        try:
            for e in await aio.call(ledger.expire_offers):
                log.info("Offer to %s for %s lapsed; passing it on", e.user, e.profile)
            queue = await aio.call(ledger.waitlist)
            waiting = {e.user for e in queue if e.state == "waiting"}
            if not waiting:
                return []
            models = {}
            for name in sorted(waiting):
                try:
                    models[name] = await self.hub.user_model(name)
                except HubError as err:
                    log.warning("Cannot read %s's groups from the hub: %s", name, err.message)

            def entitle(entry):
                m = models.get(entry.user)
                if m is None:
                    return {"user_limit": 0}  # unknown now: keep them queued, offer nothing
                return offer_limits(
                    self.state.lab,
                    ledger,
                    entry.user,
                    entry.profile,
                    m.get("groups") or [],
                    bool(m.get("admin")),
                )

            profiles = {p.slug: p for p in self.state.lab.profiles}
            needs = self.state.image_needs

            def narrow(entry):
                p = profiles.get(entry.profile)
                return needs.request_for(p) if p is not None else entry.request

            offered = await aio.call(
                ledger.offer_next, entitle, self.settings.waitlist_hold, narrow
            )
            for e in offered:
                log.info("Offered %s a slice for %s (held %gs)", e.user, e.profile,
                         self.settings.waitlist_hold)  # fmt: skip
            return offered
        except Exception:
            log.exception("Waitlist pass failed; the next one tries again")
            return []

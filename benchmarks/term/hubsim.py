"""The simulated hub that the product's code talks to, and the spawner's own reservation path.

A **model** of JupyterHub's REST answers, nothing of gpulab's: :class:`SimHub` answers what the
service's :class:`~jupyterhub_gpulab.service.culling.Culler` and
:class:`~jupyterhub_gpulab.service.waitlist.WaitlistKeeper` ask the real hub
(``GET /hub/api/users?state=active`` as user models, ``GET /hub/api/users/<name>``, the stop
``DELETE /hub/api/users/<u>/servers/<name>``, and for Move to CPU ``GET /hub/api/users/<name>``'s
servers and the start ``POST``), built from the term's running servers; a stop is
what the hub then does, the spawner's ``stop()`` releasing the allocation as ``stopped``. The
service's own :class:`~jupyterhub_gpulab.hubapi.stopper.ServerStopper` drives it.

:class:`TermSpawner` is the spawner core's reservation half
(:class:`~jupyterhub_gpulab.spawner.reserve.ReservationMixin`: GPU-hour budget, image needs,
claim, a refusal's record) with the core's node choice, for servers that the term starts
without a JupyterHub ``Spawner`` object around it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from jupyterhub_gpulab.errors import SpawnRefused
from jupyterhub_gpulab.hubapi.servers import HubServer
from jupyterhub_gpulab.hubapi.stopper import ServerStopper
from jupyterhub_gpulab.lab.choice import choose
from jupyterhub_gpulab.lab.images import requirements_from_labels
from jupyterhub_gpulab.lab.policy import PolicyContext
from jupyterhub_gpulab.lab.profiles import entitled_in
from jupyterhub_gpulab.ledger import Claim
from jupyterhub_gpulab.service.imageneeds import ImageNeeds
from jupyterhub_gpulab.service.presence import Presence
from jupyterhub_gpulab.spawner.core import SliceSpawnerCore
from jupyterhub_gpulab.spawner.reserve import ReservationMixin, _Asker

from .labs import IMAGE_LABELS

log = logging.getLogger("term")


class _Engine:
    """The lab's backend as the service's image-label reader asks it (``image_labels``, the
    backends' vocabulary): every image carries ``IMAGE_LABELS``."""

    @staticmethod
    def image_labels(image: str) -> dict:
        return dict(IMAGE_LABELS)


class SimState:
    """What the service's passes read of its :class:`~jupyterhub_gpulab.service.state.LabState`:
    the ledger, the lab, each slice's utilisation history (``history(slice_id)``, the term's
    samples), each profile's image needs (the product's :class:`ImageNeeds`), and for the layout
    pass the lab's ``c.GPULab``, its node and ``undrain``."""

    def __init__(self, runtime, history: Callable):
        self.ledger = runtime.ledger
        self.lab = runtime.lab
        self.gpulab = runtime.gpulab  # the layout pass re-lays its declared inventory
        self.node = runtime.lab.node
        self.history = history
        self.image_needs = ImageNeeds(backend=_Engine)
        #: the interactions the labs' JupyterLab extensions report (the service's own store)
        self.presence = Presence()

    def undrain(self, device_uuid: str) -> bool:
        return self.ledger.set_drained(device_uuid, False)


class SimHub:
    """The hub's REST answers (module docstring). ``sim`` supplies ``user_models()``,
    ``groups`` and ``hub_stop(user, name)``."""

    token = ""

    def __init__(self, sim):
        self.sim = sim
        self.stopper = ServerStopper(self)

    async def active_users(self) -> list[dict]:
        return self.sim.user_models()

    def remember_active(self, users, asked_at) -> dict:
        return {}

    async def user_model(self, name: str) -> dict:
        return {"name": name, "admin": False, "groups": list(self.sim.groups[name])}

    async def token_scopes(self) -> frozenset[str]:
        return frozenset()

    async def stop(self, user: str, name: str = "") -> bool:
        self.sim.hub_stop(user, name)
        return True

    async def servers_of(self, user: str) -> list[HubServer]:
        models = [u for u in self.sim.user_models() if u["name"] == user]
        return [HubServer.from_model(u, n, s) for u in models for n, s in u["servers"].items()]

    async def start(self, user: str, name: str = "", options: dict | None = None) -> bool:
        """A start with ``options`` (Move to CPU's CPU profile): the server runs without a slice
        (a CPU server holds nothing the term counts)."""
        self.sim.m["cpu_starts"] += (options or {}).get("profile") == "cpu"
        return True

    async def wait_stopped(self, user: str, name: str = "", timeout: float = 120) -> bool:
        return True


class TermSpawner(ReservationMixin):
    """The spawner core's path from a chosen profile to a claimed slice, for ``runtime`` (a
    :class:`~jupyterhub_gpulab.spawner.runtime.LabRuntime`)."""

    log = log
    _claim_node = SliceSpawnerCore._claim_node

    def __init__(self, runtime):
        self.rt = runtime
        self._log_name = "term"

    def start(self, user: str, server_name: str, slug: str, groups) -> tuple[Claim, object]:
        """Start ``user``'s server ``server_name`` with profile ``slug`` as ``start()`` does up
        to the container: profile choice and entitlement (:func:`~..lab.choice.choose`,
        ``PolicyContext.entitlement``), the image's needs, then ``_reserve`` (budget, claim).
        Returns ``(claim, policy context)``; raises :class:`SpawnRefused`."""
        lab = self.rt.lab
        ctx = PolicyContext.for_user(groups, False, lab)
        profile, _ = choose({"profile": slug}, entitled_in(lab.profiles, ctx), lab.profiles)
        ent = ctx.entitlement(profile)
        need = requirements_from_labels(profile.image, IMAGE_LABELS)
        who = _Asker(user, server_name, f"{user}:{server_name}", frozenset(groups), False)
        return self._reserve(self.rt, profile, ctx, ent, who, need), ctx


__all__ = ["SimHub", "SimState", "SpawnRefused", "TermSpawner"]

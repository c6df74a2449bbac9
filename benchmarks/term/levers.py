"""The levers of issue 22 items 2 and 3 that need more than a setting, acted out through the
product's own functions (:mod:`.sim` calls these):

- **Keep** (:func:`react`): a user at the keyboard who sees a GPU-idle warning (probability
  :data:`.data.LEVER_SEEN`, *assumed*: the warning is in JupyterLab's status bar where they
  work) clicks Keep: the service's
  :func:`~jupyterhub_gpulab.service.keeping.keep_server` judges it (``judge_keep``, the
  group's ``keeps_per_day``), records it in the ledger (``take_keep``), and the culler's next
  pass honours it (``cullplan.plan`` reads ``latest_keeps``). Refused (429, the allowance
  spent): with Move to CPU on they move, else they do what they did without Keep.
- **Move to CPU** (:func:`react`): the service's
  :func:`~jupyterhub_gpulab.service.keeping.move_to_cpu` stops the server through the hub,
  ends its allocation ``moved-to-cpu`` and starts the same server with the CPU profile: the
  slice is free, the user goes on without a GPU (*assumed*: for the rest of the sitting), a
  move and not a cull.
- **the MIG layout schedule** (:class:`TermLayouts`): the service's own
  :class:`~jupyterhub_gpulab.service.layouts.LayoutKeeper` pass (``decisions`` →
  ``layoutplan.decide`` on the ledger's slices, holders and bookings; drain, warn, stop holders
  at ``holders_by``, re-lay only when empty). Stood in for: the NVML calls of ``relay()``
  (there is no GPU): the re-lay re-declares the GPU's MIG instances in ``c.GPULab.inventory``
  and syncs the ledger with it, as ``relay()`` does after NVML (new instances, the old ones
  gone, the GPU returned to service).
"""

from __future__ import annotations

from jupyterhub_gpulab.inventory.miglayout import parse_layout
from jupyterhub_gpulab.service.actions import ActionError
from jupyterhub_gpulab.service.keeping import keep_server, move_to_cpu
from jupyterhub_gpulab.service.layouts import LayoutKeeper, LayoutTraits

from .data import LEVER_SEEN
from .labs import NODE


class TermLayouts(LayoutKeeper):
    """The service's layout pass on the term's declared lab (module docstring)."""

    def __init__(self, sim):
        super().__init__(sim.state, sim.hub, LayoutTraits())
        self.sim = sim
        self.relays = 0

    @property
    def active(self) -> bool:
        return bool(self.schedule.entries)

    def _relay(self, d) -> int:
        """``relay()`` after its NVML calls: the GPU's instances are ``d.target``'s."""
        gpulab, ledger = self.sim.rt.gpulab, self.sim.ledger
        self.relays += 1
        devices = [dict(x) for x in gpulab.inventory]
        for dev in devices:
            if dev["uuid"] == d.uuid:
                i = dev["index"]
                dev["mig"] = [
                    {"uuid": f"MIG-{i:08d}-{self.relays:04d}-4000-8000-{j:012d}", "profile": p}
                    for j, p in enumerate(parse_layout(d.target))
                ]
        gpulab.inventory = devices
        ledger.sync_inventory(gpulab.read_inventory(None), node=NODE)
        ledger.set_drained(d.uuid, False)
        return 0


async def react(sim, lv, minute: int) -> str | None:
    """A user at the keyboard who saw a GPU-idle warning of server ``lv`` acts on it: ``"kept"``,
    ``"moved"`` or ``None`` (nothing done: the lab has neither lever, or Keep was refused and
    Move to CPU is off)."""
    spec = sim.spec
    if not (spec.keep or spec.cpu) or sim.rng.random() >= LEVER_SEEN["p"]:
        return None
    user, name = lv.key
    model = {"name": user, "admin": False, "groups": sim.groups[user]}
    if spec.keep:
        try:
            await keep_server(sim.state, sim.hub, sim.culler, model, name)
            sim.m["keeps"] += 1
            return "kept"
        except ActionError as e:
            sim.m["keeps_refused"] += 1
            if e.status != 429 or not spec.cpu:
                return None
    await move_to_cpu(sim.state, sim.hub, model, name)
    await sim.hub.stopper.close()  # its stop-then-start runs in the background: let it finish
    sim.m["moved_to_cpu"] += 1
    return "moved"

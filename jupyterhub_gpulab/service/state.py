"""What the service holds besides the database: the lab's configuration, the latest inventory
read, the latest NVML utilisation sample and the utilisation history the culler reads.

One sampler: :meth:`LabState.take_sample` reads NVML through the fair-use
:class:`~jupyterhub_gpulab.service.monitor.UtilizationMonitor` (GPM for MIG on Hopper,
per-process attribution for shared seats), which keeps each slice's history for the culler; the
pages show the latest of those samples.

Every method here blocks (database, NVML): handlers call them through :func:`jupyterhub_gpulab.ledger.aio.call`.
The service reads the same ``c.GPULab`` configuration and the same ledger database as the hub's
spawner; it writes only what an admin asks for (drain, release, re-read the inventory).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from .. import clock
from ..backends import backend_for
from ..inventory import Inventory, SliceKind, Utilization, discover, load_shared
from ..lab.config import GPULab, Lab
from ..ledger import Allocation, Ledger, SyncReport
from ..ledger.bookingfit import ScheduledHost
from ..ledger.listing import open_slice_presence
from .imageneeds import ImageNeeds
from .monitor import UtilizationMonitor
from .presence import Presence

log = logging.getLogger(__name__)

NO_NVML = "no NVML on this host"


@dataclass(frozen=True)
class Snapshot:
    """One consistent-enough read of the ledger for a page or an API answer."""

    devices: list[dict]
    slices: list[dict]
    allocations: list[Allocation]
    open_by_group: dict[str, int]
    refusals: dict[str, int]
    taken_at: datetime
    nodes: list = field(default_factory=list)


@dataclass
class Sample:
    """The latest utilisation sample: ``{slice_id: Utilization}``, when it was taken, and why
    there are no figures (``problem``) where NVML gives none."""

    by_slice: dict[str, Utilization] = field(default_factory=dict)
    taken_at: datetime | None = None
    problem: str | None = NO_NVML


class LabState:
    """The lab as the service sees it. ``nvml`` is a pynvml-compatible object (tests pass a
    fake); ``None`` uses the real ``pynvml``. ``history_s`` (seconds of utilisation history kept
    per slice), ``interval_s`` (the sampling interval, seconds) and ``proc_root`` (the host's
    ``/proc``) size and feed the utilisation monitor."""

    def __init__(
        self,
        gpulab: GPULab,
        ledger: Ledger,
        *,
        nvml: Any = None,
        history_s: float = 4 * 3600,
        interval_s: float = 10.0,
        proc_root: str = "/proc",
    ):
        self.gpulab = gpulab
        self.ledger = ledger
        #: seconds of utilisation history kept per slice (the pages plot all of it)
        self.history_s = history_s
        self._monitor_args = {"span_s": history_s, "interval_s": interval_s, "proc_root": proc_root}
        self._sample_lock = threading.Lock()
        self.nvml = nvml
        self.node = gpulab.node_name
        self.lab: Lab = gpulab.load(nvml)
        #: bookings are judged against the layouts the schedule will lay (:mod:`.layouts`)
        ledger.layout_plan = ScheduledHost.of(
            self.lab.schedule, self.node, self.lab.inventory.source
        )
        #: each profile's slice request narrowed to the GPUs its image can use (waitlist offers,
        #: the user page's free slices): the spawner's gate, as the service sees it, reading the
        #: labels through the lab's backend (made, and connected, on the first read)
        self.image_needs = ImageNeeds(lambda: backend_for(gpulab.config))
        #: each server's last interaction its JupyterLab extension reported (:mod:`.presence`)
        self.presence = Presence()
        self.inventory: Inventory = self.lab.inventory
        self.nvml_problem: str | None = None
        self._local = Sample()
        self.last_sync: SyncReport | None = None
        self._lock = threading.Lock()
        #: the lab's seat settings, applied to node agents' reports too (:mod:`.nodes`)
        self.shared = load_shared(gpulab.shared_devices) if gpulab.shared_devices else {}
        #: other nodes, as their agents last reported them: inventory, latest figures, history
        self._nodes: dict[str, tuple[Inventory, dict[str, Utilization], UtilizationMonitor]] = {}

    # -- inventory --------------------------------------------------------------------------

    @property
    def agents_only(self) -> bool:
        """Every node's GPUs come from its agent (``c.GPULab.inventory_source = "agents"``):
        this host has none of the lab's."""
        return self.lab.inventory.source == "agents"

    def sync(self) -> SyncReport | None:
        """Record the inventory read at start in the ledger (as after a reboot: slices no longer
        present are never handed out again; allocations on them are reported). ``None`` where
        the nodes' agents report every inventory."""
        if self.agents_only:
            self.nvml_problem = self._probe_nvml(self.inventory)
            return None
        return self._apply(self.inventory)

    def refresh_inventory(self) -> SyncReport:
        """Re-read the inventory (NVML or ``c.GPULab.inventory``) and sync the ledger with it.
        Raises :class:`~jupyterhub_gpulab.errors.ConfigError` for a bad declared inventory."""
        return self._apply(self.gpulab.read_inventory(self.nvml))

    def _apply(self, inventory: Inventory) -> SyncReport:
        with self._lock:
            report = self.ledger.sync_inventory(inventory, node=self.node)
            self.inventory = inventory
            self.last_sync = report
            self.nvml_problem = self._probe_nvml(inventory)
        for w in inventory.warnings:
            log.warning("Inventory: %s", w)
        return report

    def _probe_nvml(self, inventory: Inventory) -> str | None:
        """``None`` when NVML answers on this host, else why not (shown instead of figures)."""
        if inventory.source == "nvml":
            return None
        probe = discover(node=self.node, nvml=self.nvml)
        if probe.source == "none":
            return NO_NVML
        return None

    def present_slice_ids(self) -> set[str]:
        """Ids of the slices in the latest inventory read of this node, and of every other node
        as the ledger holds them (its agent's latest report)."""
        return self.present_among(self.ledger.slices())

    def present_among(self, slice_rows) -> set[str]:
        """The ids among ``slice_rows`` (the ledger's slice dicts) that :meth:`present_slice_ids`
        would hold, without reading every slice (a page of allocations asks about its own)."""
        local = {s.id for s in self.inventory.slices}
        return {
            s["id"]
            for s in slice_rows
            if s["id"] in local or (s["node"] != self.node and s["present"])
        }

    def vanished_open(self) -> list[int]:
        """Ids of the open allocations whose slice :meth:`present_slice_ids` would not hold (the
        admin page's alert), oldest first, from one narrow row per open allocation."""
        local = {s.id for s in self.inventory.slices}
        return sorted(
            aid
            for aid, sid, node, present in open_slice_presence(self.ledger)
            if node is None or not (sid in local or (node != self.node and present))
        )

    # -- other nodes (their agents' reports, :mod:`.nodes`) ---------------------------------

    def record_node(self, node: str, inventory: Inventory, figures: dict[str, Utilization]) -> None:
        """Node ``node``'s agent reported ``inventory`` and ``figures`` (by slice id): its
        latest sample, appended to its slices' history."""
        with self._sample_lock:
            old = self._nodes.get(node)
            history = old[2] if old else UtilizationMonitor(nvml=None, **self._monitor_args)
            history.record(figures, present={s.id for s in inventory.slices})
            self._nodes[node] = (inventory, figures, history)

    def node_inventories(self) -> dict[str, Inventory]:
        """The latest inventory of every node: this host's (when it has the lab's GPUs) and each
        reporting node's."""
        with self._sample_lock:
            found = {n: inv for n, (inv, _, _) in self._nodes.items()}
        if not self.agents_only:
            found[self.node] = self.inventory
        return found

    def undrain(self, device_uuid: str) -> bool:
        """Return a device to service, keeping slices that vanished from the inventory out."""
        with self._lock:
            return self.ledger.set_drained(device_uuid, False)

    # -- utilisation ------------------------------------------------------------------------

    @property
    def nvml(self) -> Any:
        return self._nvml

    @nvml.setter
    def nvml(self, nvml: Any) -> None:
        """A new NVML (tests swap the fake) gets a new monitor: history of another lab is void."""
        with self._sample_lock:
            old = getattr(self, "monitor", None)
            if old is not None:
                old.close()
            self._nvml = nvml
            self.monitor = UtilizationMonitor(nvml=nvml, **self._monitor_args)

    def take_sample(self) -> Sample:
        """Sample NVML for every slice of the current inventory, record it in the monitor's
        history, and keep it as the latest sample (no figures: ``problem`` says why). Where NVML
        is absent the history records unknown figures (``gpu_percent=None``) without asking it."""
        inventory = self.inventory
        problem = self.nvml_problem
        by_slice: dict[str, Utilization] = {}
        with self._sample_lock:
            if problem:
                now = clock.utcnow()
                self.monitor.record({s.id: Utilization(at=now) for s in inventory.slices})
            else:
                samples = self.monitor.sample(inventory, self._containers(inventory))
                by_slice = dict(samples)
        if (
            not problem
            and by_slice
            and not any(
                u.gpu_percent is not None or u.memory_used_bytes is not None
                for u in by_slice.values()
            )
        ):
            problem = "NVML answers but knows none of these devices"
        self._local = Sample(by_slice, clock.utcnow(), problem)
        return self.sample

    @property
    def sample(self) -> Sample:
        """The latest figures of every slice: this host's sample and each node agent's latest
        report. ``problem`` is this host's (why NVML gives nothing) unless agents give figures."""
        local = self._local
        with self._sample_lock:
            remote = [(inv, figs) for inv, figs, _ in self._nodes.values()]
        if not remote:
            return local
        by_slice: dict[str, Utilization] = {}
        times = [local.taken_at] if local.taken_at else []
        for _, figs in remote:
            by_slice.update(figs)
            times.extend(u.at for u in figs.values() if u.at is not None)
        by_slice.update(local.by_slice)
        known = any(
            u.gpu_percent is not None or u.memory_used_bytes is not None for u in by_slice.values()
        )
        return Sample(by_slice, max(times) if times else None, None if known else local.problem)

    def _containers(self, inventory: Inventory) -> dict[str, str]:
        """Held seats' container ids (the monitor maps seat processes to containers)."""
        if not any(s.kind is SliceKind.SHARED for s in inventory.slices):
            return {}
        return {
            a.slice_id: a.container_id for a in self.ledger.open_allocations() if a.container_id
        }

    def history(self, slice_id: str) -> tuple[Utilization, ...]:
        """``slice_id``'s utilisation samples, oldest first (for the culler): this host's
        sampler's, or its node agent's reports'."""
        with self._sample_lock:
            found = self.monitor.history(slice_id)
            if found:
                return found
            for _, _, history in self._nodes.values():
                found = history.history(slice_id)
                if found:
                    return found
        return ()

    def close(self) -> None:
        with self._sample_lock:
            self.monitor.close()

    # -- reads ------------------------------------------------------------------------------

    def snapshot(
        self, *, devices: bool = True, usage: bool = True, window: timedelta = timedelta(hours=24)
    ) -> Snapshot:
        """Slices and open allocations, plus devices and per-group counts and refusals in the
        last ``window`` unless not wanted (left empty)."""
        now = clock.utcnow()
        return Snapshot(
            devices=self.ledger.devices() if devices else [],
            slices=self.ledger.slices(),
            allocations=self.ledger.open_allocations(),
            open_by_group=self.ledger.open_by_group() if usage else {},
            refusals=self.ledger.refusals_since(now - window) if usage else {},
            taken_at=now,
            nodes=self.ledger.nodes() if devices else [],
        )

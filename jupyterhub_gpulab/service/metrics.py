"""The service's Prometheus metrics, read from the ledger at each scrape (a custom collector):
served at ``/services/gpulab/metrics`` to tokens holding ``custom:gpulab:metrics`` (readers and
admins of gpulab hold it too). The hub's own gpulab series (spawns, refusals, claim latency) are
at ``/hub/metrics`` (:mod:`jupyterhub_gpulab.hub.metrics`).

============================================  =================================================
``gpulab_slices``                             slices by ``node``, ``kind``, ``mig_profile``,
                                              ``profile`` (the holder's profile slug, or the
                                              profile a reserved slice is kept for; ``""``
                                              otherwise) and ``state``: ``free``, ``held``,
                                              ``reserved`` (free, but kept for a course
                                              session's roster), ``drained`` (device out of
                                              service), ``vanished`` (not in the latest
                                              inventory read; a held slice counts as ``held``)
``gpulab_reservation_seats``                  seats of the reservations keeping slices now,
                                              by ``phase`` (``lead``: before the session
                                              starts; ``session``: started, within its grace)
                                              and ``state`` (``claimed``, ``unclaimed``)
``gpulab_devices``                            devices by ``node`` and ``state`` (``in_service``,
                                              ``drained``, ``vanished``)
``gpulab_device_memory_bytes``                each device's memory (``node``, ``uuid``,
                                              ``index``, ``name``)
``gpulab_nodes``                              nodes by ``node`` and ``state`` (1 for its state,
                                              0 for the others): ``in_service``, ``drained``,
                                              ``unreachable`` (its agent stopped reporting),
                                              ``engine_out`` (Swarm cannot run tasks there)
``gpulab_node_report_age_seconds``            seconds since each node's agent last reported
``gpulab_slice_utilization_percent``          each slice's latest sample (0-100) from the
                                              service's sampler or its node's agent, where NVML
                                              gives one (``node``,
                                              ``slice``, ``kind``, ``device_index``)
``gpulab_slice_memory_used_bytes``            the same slices' memory in use
                                              (a shared seat's: the sum of its container's
                                              processes' ``usedGpuMemory``, as the host sees it)
``gpulab_seat_memory_cap_bytes``              each shared seat's memory cap (same labels)
``gpulab_seat_host_enforced``                 1 where the host checks the seat's memory against
                                              its cap (NVML lists per-process memory), 0 for a
                                              soft seat (same labels)
``gpulab_group_used_gpu_seconds``             weighted GPU-seconds charged to each ``group``
                                              this ``period`` (``week``, in ``quota_timezone``:
                                              the admin page's figure)
``gpulab_server_cull_total``                  allocations the culler closed, by ``rule``
``gpulab_cull_warnings``                      pending cull warnings by ``rule``
``gpulab_budget_exhaustion_total``            allocations culled because the budget ran out,
                                              by charge ``group``
``gpulab_allocations_without_container``      open allocations older than 2 minutes with no
                                              container recorded (``node``): drift
``gpulab_foreign_containers``                 running containers that are not this lab's but
                                              hold its GPUs (``node``): drift
``gpulab_allocations_stale``                  open allocations whose server the hub does not
                                              list as running or starting (``node``); absent
                                              while the hub's list is unknown
============================================  =================================================

Label values are created up front (every state, rule and configured group at 0); no label names
a user unless ``c.GPULabService.metrics_user_labels`` is on (:class:`UserCollector`).

A scrape reads the ledger (:class:`LedgerCollector`: a few grouped queries, ~200 series); the
per-slice utilisation series (two per slice: 20,000 in a 10,000-slice lab) change only when the
sampler runs, so :class:`Exposition` renders them once per sample, in the sampler's thread, and
a scrape appends that text.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .. import clock
from ..fairuse.culler import RULES
from ..fairuse.quota import period_window
from ..hubapi.client import HubClient
from ..inventory.model import SliceKind
from ..ledger.census import census, gpu_seconds_by_group
from .state import LabState
from .usermetrics import UserCollector

SLICE_STATES = ("free", "held", "reserved", "drained", "vanished")
DEVICE_STATES = ("in_service", "drained", "vanished")


def slice_state(present: bool, available: bool, held: bool) -> str:
    """A slice's ``state`` label (module docstring)."""
    if held:
        return "held"
    if not present:
        return "vanished"
    return "free" if available else "drained"


NODE_STATES = ("in_service", "drained", "unreachable", "engine_out")


def node_state(state: str) -> str:
    """A node's ``state`` label from :attr:`~..ledger.Node.state`."""
    if state.startswith("engine-"):
        return "engine_out"
    return state.replace("-", "_")


def device_state(row: dict) -> str:
    if not row["present"]:
        return "vanished"
    return "drained" if row["drained"] else "in_service"


class SampleCollector:
    """The latest utilisation sample of every slice (``LabState.sample``), as two gauges."""

    def __init__(self, state: LabState):
        self.state = state

    def collect(self) -> Iterator[Metric]:
        labels = ["node", "slice", "kind", "device_index"]
        util = GaugeMetricFamily(
            "gpulab_slice_utilization_percent",
            "Each slice's latest GPU utilisation sample (0-100), where NVML gives one",
            labels=labels,
        )
        used = GaugeMetricFamily(
            "gpulab_slice_memory_used_bytes",
            "Each slice's GPU memory in use at the latest sample, in bytes",
            labels=labels,
        )
        cap = GaugeMetricFamily(
            "gpulab_seat_memory_cap_bytes",
            "Each shared seat's GPU memory cap, in bytes",
            labels=labels,
        )
        enforced = GaugeMetricFamily(
            "gpulab_seat_host_enforced",
            "1 where the host checks a shared seat's GPU memory against its cap, 0 if soft",
            labels=labels,
        )
        by_id = {
            s.id: (node, s)
            for node, inv in self.state.node_inventories().items()
            for s in inv.slices
        }
        for sid, u in sorted(self.state.sample.by_slice.items()):
            if sid not in by_id:
                continue
            node, s = by_id[sid]
            values = [node, sid, str(s.kind), str(s.device_index)]
            if u.gpu_percent is not None:
                util.add_metric(values, u.gpu_percent)
            if u.memory_used_bytes is not None:
                used.add_metric(values, u.memory_used_bytes)
            if s.kind is SliceKind.SHARED:
                cap.add_metric(values, s.memory_bytes)
                enforced.add_metric(values, 1 if u.host_checked else 0)
        yield util
        yield cap
        yield enforced
        yield used


class LedgerCollector:
    """A ``prometheus_client`` collector over the ledger of the service's :class:`LabState` and
    its hub client's latest list of servers. :meth:`collect` blocks (database): scrape in a
    thread."""

    def __init__(self, state: LabState, hub: HubClient | None = None):
        self.state = state
        self.hub = hub
        #: what this thread's latest collect() read that Exposition renders itself
        self.read = threading.local()

    def collect(self) -> Iterator[Metric]:
        state, now = self.state, clock.utcnow()
        c = census(state.ledger, now)
        yield from self._slices(c)
        yield from self._devices(c)
        yield from self._nodes(state.ledger.nodes(), now)
        yield self._gpu_seconds(now)
        yield from self._culls(c)
        yield from self._drift(c)

    def _nodes(self, found, now) -> Iterator[Metric]:
        by_state = GaugeMetricFamily(
            "gpulab_nodes",
            "Nodes by state: in_service, drained, unreachable (its agent stopped reporting), "
            "engine_out (the orchestrator cannot run tasks there)",
            labels=["node", "state"],
        )
        age = GaugeMetricFamily(
            "gpulab_node_report_age_seconds",
            "Seconds since each node's agent last reported",
            labels=["node"],
        )
        for n in found:
            here = node_state(n.state)
            for st in NODE_STATES:
                by_state.add_metric([n.name, st], 1 if st == here else 0)
            if n.agent_seen_at is not None:
                age.add_metric([n.name], max(0.0, (now - n.agent_seen_at).total_seconds()))
        yield by_state
        yield age

    def _slices(self, c) -> Iterator[Metric]:
        g = GaugeMetricFamily(
            "gpulab_slices",
            "Slices by node, kind, MIG profile, holder's profile and state",
            labels=["node", "kind", "mig_profile", "profile", "state"],
        )
        counts: dict[tuple, int] = {}
        for (node, kind, mig, profile, present, available, held), n in c.slices.items():
            for st in SLICE_STATES:  # every state of a kind exists, at 0 when none is in it
                counts.setdefault((node, kind, mig, "", st), 0)
            key = (node, kind, mig, profile, slice_state(present, available, held))
            counts[key] = counts.get(key, 0) + n
        for (node, kind, mig, profile), n in c.reserved.items():
            free = (node, kind, mig, "", "free")
            moved = min(n, counts.get(free, 0))
            counts[free] = counts.get(free, 0) - moved
            key = (node, kind, mig, profile, "reserved")
            counts[key] = counts.get(key, 0) + moved
        for key, n in sorted(counts.items()):
            g.add_metric(list(key), n)
        yield g
        seats = GaugeMetricFamily(
            "gpulab_reservation_seats",
            "Seats of the reservations keeping slices now, by phase and state",
            labels=["phase", "state"],
        )
        for (phase, st), n in sorted(c.seats.items()):
            seats.add_metric([phase, st], n)
        yield seats

    def _devices(self, c) -> Iterator[Metric]:
        by_state = GaugeMetricFamily(
            "gpulab_devices", "Devices by node and state", labels=["node", "state"]
        )
        counts = {(self.state.node, st): 0 for st in DEVICE_STATES}
        for d in c.devices:
            for st in DEVICE_STATES:
                counts.setdefault((d["node"], st), 0)
            counts[(d["node"], device_state(d))] += 1
        for (node, st), n in sorted(counts.items()):
            by_state.add_metric([node, st], n)
        yield by_state
        # gpulab_device_memory_bytes: rendered by Exposition from these rows
        self.read.devices = tuple(
            (d["node"], d["uuid"], str(d["index"]), d["name"], d["memory_bytes"]) for d in c.devices
        )

    def _gpu_seconds(self, now) -> Metric:
        lab = self.state.lab
        start, end = period_window("week", now, tz=lab.tz)
        by_group = gpu_seconds_by_group(self.state.ledger, start, end, now)
        g = GaugeMetricFamily(
            "gpulab_group_used_gpu_seconds",
            "Weighted GPU-seconds charged to each group in this period (quota_timezone)",
            labels=["group", "period"],
        )
        seconds = {group: 0.0 for group in lab.policies}
        seconds.update(by_group)
        for group, s in sorted(seconds.items()):
            g.add_metric([group, "week"], s)
        return g

    def _culls(self, c) -> Iterator[Metric]:
        culls = CounterMetricFamily(
            "gpulab_server_cull", "Allocations the culler closed, by rule", labels=["rule"]
        )
        by_rule = dict.fromkeys(RULES, 0)
        budget = dict.fromkeys(self.state.lab.policies, 0)
        for (rule, group), n in c.culls.items():
            by_rule[rule] = by_rule.get(rule, 0) + n
            if rule == "budget":
                budget[group] = budget.get(group, 0) + n
        for rule, n in sorted(by_rule.items()):
            culls.add_metric([rule], n)
        yield culls
        warns = GaugeMetricFamily(
            "gpulab_cull_warnings", "Pending cull warnings, by rule", labels=["rule"]
        )
        pending = dict.fromkeys(RULES, 0)
        pending.update(c.warnings)
        for rule, n in sorted(pending.items()):
            warns.add_metric([rule], n)
        yield warns
        spent = CounterMetricFamily(
            "gpulab_budget_exhaustion",
            "Allocations culled because their user's GPU-hour budget ran out, by charge group",
            labels=["group"],
        )
        for group, n in sorted(budget.items()):
            spent.add_metric([group], n)
        yield spent

    def _drift(self, c) -> Iterator[Metric]:
        node = self.state.node
        without = GaugeMetricFamily(
            "gpulab_allocations_without_container",
            "Open allocations older than 2 minutes with no container recorded",
            labels=["node"],
        )
        for n_node, n in sorted({node: 0, **c.without_container}.items()):
            without.add_metric([n_node], n)
        yield without
        foreign = GaugeMetricFamily(
            "gpulab_foreign_containers",
            "Running containers not of this lab holding its GPUs",
            labels=["node"],
        )
        for n_node, n in sorted({node: 0, **c.foreign}.items()):
            foreign.add_metric([n_node], n)
        yield foreign
        active = self.hub.active if self.hub is not None else None
        if active is None:
            return
        stale_by_node = {node: 0}
        asked_at = self.hub.active_at.timestamp()
        for user, server, a_node, started in c.open_servers:
            # a server started after the hub's latest list is not in it yet
            if started < asked_at and (user, server) not in active:
                stale_by_node[a_node] = stale_by_node.get(a_node, 0) + 1
        stale = GaugeMetricFamily(
            "gpulab_allocations_stale",
            "Open allocations whose server the hub does not list as running or starting",
            labels=["node"],
        )
        for n_node, n in sorted(stale_by_node.items()):
            stale.add_metric([n_node], n)
        yield stale


class _Families:
    """A collector yielding fixed families (to render them with ``generate_latest``)."""

    def __init__(self, *families: Metric):
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def _memory_text(devices: tuple) -> bytes:
    memory = GaugeMetricFamily(
        "gpulab_device_memory_bytes",
        "Each device's memory in bytes",
        labels=["node", "uuid", "index", "name"],
    )
    for node, uuid, index, name, size in devices:
        memory.add_metric([node, uuid, index, name], size)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(memory))
    return generate_latest(registry)


class Exposition:
    """The service's metrics text: the ledger's, read at each :meth:`render`, then the latest
    sample's, rendered by :meth:`sampled` (call it after each sample) or on first need. Both
    block: call them in a thread. ``user_labels``: add :class:`UserCollector`'s series.

    ``gpulab_device_memory_bytes`` (a series per device, read from the ledger at each scrape
    with the device counts) is formatted again only when the devices read differ from the
    previous scrape's: its text is most of a large lab's formatting time."""

    def __init__(self, state: LabState, hub: HubClient | None = None, *, user_labels=False):
        self.state = state
        self.ledger = CollectorRegistry(auto_describe=False)
        self.collector = LedgerCollector(state, hub)
        self.ledger.register(self.collector)
        self._memory: tuple[tuple, bytes] = ((), _memory_text(()))
        if user_labels:
            self.ledger.register(UserCollector(state))
        self.samples = CollectorRegistry(auto_describe=False)
        self.samples.register(SampleCollector(state))
        self._sample_text: tuple[object, bytes] | None = None

    def sampled(self) -> bytes:
        """Render the latest sample's series (once per sample)."""
        sample = self.state.sample
        cached = self._sample_text
        if cached is None or cached[0] is not sample:
            cached = self._sample_text = (sample, generate_latest(self.samples))
        return cached[1]

    def render(self) -> bytes:
        """The whole exposition text (Prometheus text format)."""
        ledger = generate_latest(self.ledger)
        devices = getattr(self.collector.read, "devices", ())
        memory = self._memory
        if memory[0] != devices:
            memory = self._memory = (devices, _memory_text(devices))
        return ledger + memory[1] + self.sampled()

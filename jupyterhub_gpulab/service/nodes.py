"""Node agents' reports, received by the service: each node's inventory and utilisation, and the
timeout after which a silent node leaves service.

A report (``POST api/nodes/<node>/report``, :mod:`.web.nodeapi`; its body: :mod:`..agent.report`)
is checked against its schema there, then :meth:`NodeReports.receive`:

1. rebuilds the node's inventory with the lab's own seat settings
   (:func:`~..inventory.wire.inventory_from_report`), and refuses it when it names a GPU or MIG
   device the ledger holds under another node (a node's token must not take another's GPUs);
2. syncs the ledger for that node when its hardware changed (or at the first report since the
   service started): new slices added, vanished ones out of service, as for a host's own
   NVML read;
3. records the report (:meth:`~..ledger.Ledger.record_report`: reachable again) and keeps its
   utilisation as that node's latest sample and history (:class:`~.state.LabState`), which the
   pages, metrics and the culler read like the local host's.

Every ``node_check_every`` seconds :meth:`NodeReports.expire` marks nodes whose agent has not
reported for ``node_timeout`` unreachable: their free slices leave service (the spawn form shows
them gone), their open allocations stay while their servers run (the spawner's backend closes
them when the orchestrator reports a task gone).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Mapping

from traitlets.config import LoggingConfigurable

from .. import clock
from ..inventory import Inventory, InventoryError
from ..inventory.wire import inventory_from_report, utilization_by_slice
from ..lab.traits import Duration
from .state import LabState

log = logging.getLogger("gpulab.nodes")


class NodeTraits(LoggingConfigurable):
    """The node agents' settings (``c.GPULabService.*``)."""

    node_timeout = Duration(
        "60s",
        positive=True,
        config=True,
        help="""How long a node's agent may stay silent before the node counts as unreachable
        (a duration, ``"60s"``, or seconds): its free slices are no longer handed out and the
        spawn form stops offering them; its running servers keep theirs. The next report brings
        the node back. At least a few agent intervals (``gpulab node-agent --interval``, 10 s).
        ``c.GPULabService.node_timeout = "60s"``""",
    )

    node_check_every = Duration(
        "5s",
        positive=True,
        config=True,
        help="""How often the service looks for silent node agents (seconds).
        ``c.GPULabService.node_check_every = "5s"``""",
    )


def _fingerprint(inventory: Inventory) -> str:
    """What changes when a node's hardware does (devices, slices), not its utilisation."""
    raw = json.dumps(
        [
            [(d.uuid, d.index, d.name, d.memory_bytes, d.mig_enabled) for d in inventory.devices],
            [(s.id, s.kind.value, s.memory_bytes, s.rank, s.share) for s in inventory.slices],
        ]
    )
    return hashlib.sha256(raw.encode()).hexdigest()


class NodeReports:
    """Takes node agents' reports for one service (module docstring). Thread-safe: reports run
    in worker threads (:func:`~..ledger.aio.call`)."""

    def __init__(self, state: LabState, *, timeout_s: float):
        self.state = state
        self.timeout_s = timeout_s
        self._seen: dict[str, str] = {}
        self._lock = threading.Lock()
        #: a service that was down got no reports: its agents get one timeout to report again
        self._started = clock.utcnow()

    def receive(self, node: str, report: Mapping) -> dict:
        """Take node ``node``'s report (its shape checked already); returns the answer for the
        agent: ``{"status": 200, "message": …, "node": <name>, "state": <the node's state>,
        "slices": <count>}``. Raises :class:`~..inventory.InventoryError` for an inconsistent
        report (nothing is recorded then)."""
        state = self.state
        inventory = inventory_from_report(report, node=node, shared=state.shared)
        ids = [d.uuid for d in inventory.devices] + [s.id for s in inventory.slices]
        taken = state.ledger.held_elsewhere(node, ids)
        if taken:
            raise InventoryError(
                [
                    f"{i} is node {other}'s in the ledger (a GPU that moved is reported gone by "
                    "its old node's agent first)"
                    for i, other in sorted(taken.items())
                ],
                header=f"node {node} reports another node's GPUs",
            )
        now = clock.utcnow()
        fingerprint = _fingerprint(inventory)
        with self._lock:
            synced = None
            if self._seen.get(node) != fingerprint:
                synced = state.ledger.sync_inventory(inventory, node=node)
                self._seen[node] = fingerprint
            came_back = state.ledger.record_report(
                node,
                agent_version=str(report.get("agent", "?")),
                interval_s=report["interval_s"],
                hostname=report.get("hostname"),
                cpus=report.get("cpus"),
                memory_bytes=report.get("memory_bytes"),
                now=now,
            )
            state.record_node(
                node, inventory, utilization_by_slice(inventory, report.get("utilization", {}), now)
            )
        if synced is not None:
            log.info(
                "Node %s: %d GPU(s), %d slice(s) from its agent (added %d, vanished %d)",
                node,
                len(inventory.devices),
                len(inventory.slices),
                len(synced.added),
                len(synced.vanished),
            )
            for w in inventory.warnings:
                log.warning("Node %s inventory: %s", node, w)
            for a in synced.vanished_held:
                log.warning(
                    "Node %s: allocation %d (%s's server %r) holds slice %s, which its agent no "
                    "longer reports",
                    node,
                    a.id,
                    a.user,
                    a.server_name,
                    a.slice_id,
                )
        if came_back:
            log.warning("Node %s: its agent reports again; its GPUs are back in service", node)
        n = state.ledger.node(node)
        return {
            "status": 200,
            "message": f"report of {node} taken: {len(inventory.devices)} GPU(s), "
            f"{len(inventory.slices)} slice(s); node {n.state if n else 'unknown'}",
            "node": node,
            "state": n.state if n else "unknown",
            "slices": len(inventory.slices),
        }

    def expire(self) -> list[str]:
        """Mark nodes silent for ``timeout_s`` unreachable (blocking); returns their names.
        Nothing during the first ``timeout_s`` after the service started: its agents could not
        report while it was down."""
        if (clock.utcnow() - self._started).total_seconds() < self.timeout_s:
            return []
        late = self.state.ledger.expire_agents(self.timeout_s)
        for node in late:
            log.warning(
                "Node %s: no report from its agent for %g s; its free GPUs are out of service "
                "until it reports again (running servers keep theirs)",
                node,
                self.timeout_s,
            )
        return late


__all__ = ["InventoryError", "NodeReports", "NodeTraits"]

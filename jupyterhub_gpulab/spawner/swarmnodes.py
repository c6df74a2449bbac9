"""Docker Swarm's nodes as gpulab names them: the node's hostname (or its label
``org.jupyter.gpulab.node``), its id (what a service is pinned by), state and address.

The node agent reports under the same name (``gpulab node-agent --node``, by default the host's
name), so a slice's node in the ledger is a Swarm node. :func:`engine_nodes` turns ``docker node
ls`` (``APIClient.nodes()``) into :class:`~jupyterhub_gpulab.ledger.EngineNode` records by name,
which the Swarm backend writes to the ledger (:meth:`~jupyterhub_gpulab.ledger.Ledger.record_engine`).
Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..ledger import EngineNode

#: A Swarm node label naming the node in the lab when it is not its hostname.
NODE_LABEL = "org.jupyter.gpulab.node"

__all__ = ["NODE_LABEL", "address_of", "engine_nodes", "name_of"]


def name_of(row: Mapping) -> str:
    """The lab's name of a Swarm node: its ``org.jupyter.gpulab.node`` label, else hostname."""
    labels = (row.get("Spec") or {}).get("Labels") or {}
    return labels.get(NODE_LABEL) or (row.get("Description") or {}).get("Hostname") or row["ID"]


def address_of(row: Mapping) -> str | None:
    """Where the node is reached: its ``Status.Addr``, or for a manager that reports
    ``0.0.0.0`` there, the host of its ``ManagerStatus.Addr``."""
    addr = (row.get("Status") or {}).get("Addr") or ""
    if addr and addr != "0.0.0.0":
        return addr
    manager = (row.get("ManagerStatus") or {}).get("Addr") or ""
    host = manager.rsplit(":", 1)[0] if manager else ""
    return host or None


def engine_nodes(rows: Iterable[Mapping]) -> dict[str, EngineNode]:
    """``{lab name: EngineNode}`` for ``docker node ls`` rows. Where two nodes share a name (a
    node that left and joined again), the one Swarm says is ready wins."""
    found: dict[str, EngineNode] = {}
    for row in rows:
        desc = row.get("Description") or {}
        res = desc.get("Resources") or {}
        nano = res.get("NanoCPUs")
        node = EngineNode(
            id=row["ID"],
            state=((row.get("Status") or {}).get("State") or "unknown").lower(),
            availability=((row.get("Spec") or {}).get("Availability") or "active").lower(),
            address=address_of(row),
            hostname=desc.get("Hostname"),
            cpus=int(nano // 10**9) if nano else None,
            memory_bytes=res.get("MemoryBytes"),
        )
        name = name_of(row)
        if name not in found or (found[name].state != "ready" and node.state == "ready"):
            found[name] = node
    return found

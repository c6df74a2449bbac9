"""A server's object as its labels describe it: a Docker container, or a Swarm service.

Every object a gpulab spawner makes carries the lab's labels (:func:`~.container.labels`: lab,
user, server, profile, node, allocation, slice). :class:`LabObject` reads them back the same way
whichever backend made it, so the continuous reconcile (:mod:`.reconcile`) and the checks before
a start or an adoption (:func:`foreign_reason`) are one rule for both: a Docker container
(``docker ps`` / ``docker inspect``), or a Swarm service (``docker service inspect``, whose task
state the Swarm backend reads: :mod:`.swarmtasks`). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..ledger import Allocation
from .container import LABEL_NODE, LABEL_SERVER, LABEL_SLICE, LABEL_USER
from .engine import allocation_label

__all__ = ["LabObject", "another_hubs", "foreign_reason"]


@dataclass(frozen=True)
class LabObject:
    """An object of this lab as its labels describe it. ``kind`` is ``"container"`` or
    ``"service"``; ``state`` is Docker's for a container (``created``, ``running``,
    ``exited``, ...) and its task's for a service (``running``, ``starting``, ``gone``, ...:
    :func:`~.swarmtasks.service_state`); ``allocation_id`` is ``None`` for a CPU-only server;
    ``node`` is the node its labels name (where a Swarm backend pinned it)."""

    id: str
    name: str
    state: str
    user: str | None
    server_name: str | None
    allocation_id: int | None
    slice_id: str | None
    node: str | None = None
    kind: str = "container"

    @classmethod
    def from_labels(
        cls, oid: str, name: str, state: str, labels: Mapping | None, kind: str = "container"
    ) -> LabObject:
        labels = labels or {}
        return cls(
            id=oid,
            name=name.lstrip("/"),
            state=state,
            user=labels.get(LABEL_USER),
            server_name=labels.get(LABEL_SERVER),
            allocation_id=allocation_label(labels),
            slice_id=labels.get(LABEL_SLICE),
            node=labels.get(LABEL_NODE),
            kind=kind,
        )

    @classmethod
    def from_inspect(cls, obj: Mapping) -> LabObject:
        """A container, from ``docker inspect`` (``APIClient.inspect_container``)."""
        return cls.from_labels(
            obj["Id"],
            obj.get("Name", ""),
            (obj.get("State") or {}).get("Status", ""),
            (obj.get("Config") or {}).get("Labels"),
        )

    @classmethod
    def from_ps(cls, row: Mapping) -> LabObject:
        """A container, from one row of ``docker ps`` (``APIClient.containers``)."""
        names = row.get("Names") or [""]
        return cls.from_labels(row["Id"], names[0], row.get("State", ""), row.get("Labels"))

    @classmethod
    def from_service(cls, obj: Mapping, state: str) -> LabObject:
        """A Swarm service, from ``docker service inspect`` (``APIClient.inspect_service`` or a
        row of ``services()``), in ``state`` (its task's, read by the caller)."""
        spec = obj.get("Spec") or {}
        return cls.from_labels(
            obj["ID"], spec.get("Name", ""), state, spec.get("Labels"), "service"
        )

    def held(self) -> str:
        """What its labels say it holds: ``"allocation 7 (slice GPU-…)"`` or ``"no allocation"``."""
        if self.allocation_id is None:
            return "no allocation"
        return f"allocation {self.allocation_id} (slice {self.slice_id})"

    def describe(self) -> str:
        return f"{self.kind} {self.name} ({self.id[:12]}, {self.state}, {self.held()})"


def foreign_reason(
    c: LabObject,
    *,
    user: str,
    server_name: str,
    allocation_id: int | None,
    slice_id: str | None,
    starting: bool,
) -> str | None:
    """Why user ``user``'s server ``server_name``, holding ``allocation_id`` on ``slice_id``
    (both ``None``: no slice), must not use object ``c`` of this lab; ``None`` when its labels
    say it is that server's object on that slice. (Another lab's object is never used either:
    :mod:`.labguard`.)

    ``starting``: the server is starting ``allocation_id``, so only an object made for that very
    allocation would do. Otherwise (``poll()`` adopting a running object) the slice must match:
    a re-adopted object keeps the labels of the allocation it was made for.
    """
    if c.user is None:
        return "it has no gpulab labels"
    if (c.user, c.server_name) != (user, server_name):
        return f"it is labelled for {c.user!r}'s server {c.server_name!r}"
    want = f"allocation {allocation_id} (slice {slice_id})" if slice_id else "no slice"
    if c.slice_id != slice_id or (starting and c.allocation_id != allocation_id):
        return f"it holds {c.held()}, but this server holds {want}"
    return None


def another_hubs(c: LabObject, node: str | None, allocation: Allocation | None) -> bool:
    """Whether this lab's object ``c`` belongs to another hub of the lab than the hub of
    ``node`` (``None``: one hub runs every node, so never). Several hubs share one ledger, one
    per node name, and maybe one engine: ``allocation`` is the ledger's *open* allocation that
    ``c``'s labels name (``None``: none, or closed). The ledger decides when it holds that
    allocation open (on another node: another hub's; on ``node``: this hub's, even under
    another node label, as after a renamed ``c.GPULab.node_name``); otherwise the node label
    does (none: this hub's, as objects from before node labels)."""
    if node is None:
        return False
    if allocation is not None:
        return allocation.node != node
    return c.node not in (None, "", node)

"""A spawner touches only its own lab's containers, even one found under its own name.

DockerSpawner finds a server's container by name; two labs on one Docker engine with the same
container prefix give a user of the same name the same container name, and so do two hubs of
one lab (one ledger, two node names). Found that way, another lab's container
(:func:`~.engine.owner` says ``OTHER``) or another hub's (:func:`~.labobject.another_hubs`) is
never reused, polled, stopped or removed: a start is refused with the fix for the admin (a
distinct ``c.GPUDockerSpawner.prefix``), and ``poll``/``stop`` see no container of ours.
"""

from __future__ import annotations

from ..errors import SpawnRefused
from ..ledger import Allocation, LabIdentity, aio
from . import engine
from .container import LABEL_LAB, LABEL_LAB_NAME
from .labobject import another_hubs


def _owner(labels, container_id, rt) -> tuple[str, int | None, Allocation | None]:
    """``(engine.owner's answer, the allocation id the labels name or None, that allocation as
    the ledger has it, open or closed, or None)``. Blocking."""
    aid = engine.allocation_label(labels)
    allocations = rt.ledger.allocations_by_id([aid]) if aid is not None else {}
    a = allocations.get(aid) if aid is not None else None
    who = engine.owner(labels, container_id, rt.identity.uuid, allocations)
    return who, aid, a


class LabGuardMixin:
    """Mixed into a backend (before DockerSpawner in the MRO); the backend reads its objects
    (``_lab_object``, ``_labels_of``) and says its node (``_claim_node``)."""

    async def get_object(self):
        obj = await super().get_object()
        if obj is None:
            return None
        rt = self.runtime()
        labels = self._labels_of(obj)
        mine = self._lab_object(obj)
        who, aid, read = await aio.call(_owner, labels, mine.id, rt)
        if aid is not None:
            self._allocation_read = (aid, read)  # poll() needs no second read (core.py)
        allocation = read if read is not None and read.open else None
        node = self._claim_node(rt)
        if who == engine.OTHER:
            other, whose = _other_lab(labels), "another lab"
        elif another_hubs(mine, node, allocation):
            hub_node = allocation.node if allocation is not None else mine.node
            other, whose = f"this lab's hub of node {hub_node!r}", "another hub of this lab"
        else:
            return obj
        # not ours: forget its id, so nothing here stops or removes it
        self.object_id = ""
        name = mine.name or self.object_name
        here = rt.identity.describe() + (f", node {node!r}" if who != engine.OTHER else "")
        detail = (
            f"{mine.kind.title()} {name} ({mine.id[:12]}) on this Docker engine belongs to "
            f"{other}, not to this {here}"
        )
        if self._start_done:
            self.log.warning("%s; %s's own container is gone, that one is left alone", detail, name)
            return None
        err = SpawnRefused(
            f"Your server cannot start: {whose} on this host uses the same container name. "
            "The administrators have been told; please try again later.",
            reason="container-name-taken",
            status_code=503,
            log_message=(
                f"{detail}. Two labs, or two hubs of one lab, on one Docker engine need "
                "different container names: set c.GPUDockerSpawner.prefix (e.g. 'staging') in "
                "one of them."
            ),
        )
        self.log.error(err.log_message)
        await self._refuse(rt, self.profile_slug or None, err)
        raise err


def _other_lab(labels) -> str:
    if labels.get(LABEL_LAB):
        return LabIdentity(labels[LABEL_LAB], labels.get(LABEL_LAB_NAME)).describe()
    return "another lab (a gpulab hub from before lab ids)"

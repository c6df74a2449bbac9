"""A spawner touches only its own lab's containers, even one found under its own name.

DockerSpawner finds a server's container by name; two labs on one Docker engine with the same
container prefix give a user of the same name the same container name. Found that way, another
lab's container (:func:`~.engine.owner` says ``OTHER``) is never reused, polled, stopped or
removed: a start is refused with the fix for the admin (a distinct
``c.GPUDockerSpawner.prefix``), and ``poll``/``stop`` see no container of ours.
"""

from __future__ import annotations

from ..errors import SpawnRefused
from ..ledger import LabIdentity, aio
from . import engine
from .container import LABEL_LAB, LABEL_LAB_NAME


def _owner(labels, container_id, rt) -> str:
    aid = engine.allocation_label(labels)
    allocations = rt.ledger.allocations_by_id([aid]) if aid is not None else {}
    return engine.owner(labels, container_id, rt.identity.uuid, allocations)


class LabGuardMixin:
    """Mixed into a backend (before DockerSpawner in the MRO); the backend reads its objects
    (``_lab_object``, ``_labels_of``)."""

    async def get_object(self):
        obj = await super().get_object()
        if obj is None:
            return None
        rt = self.runtime()
        labels = self._labels_of(obj)
        mine = self._lab_object(obj)
        if await aio.call(_owner, labels, mine.id, rt) != engine.OTHER:
            return obj
        # not ours: forget its id, so nothing here stops or removes it
        self.object_id = ""
        other = (
            LabIdentity(labels[LABEL_LAB], labels.get(LABEL_LAB_NAME)).describe()
            if labels.get(LABEL_LAB)
            else "another lab (a gpulab hub from before lab ids)"
        )
        name = mine.name or self.object_name
        detail = (
            f"{mine.kind.title()} {name} ({mine.id[:12]}) on this Docker engine belongs to "
            f"{other}, not to this {rt.identity.describe()}"
        )
        if self._start_done:
            self.log.warning("%s; %s's own container is gone, that one is left alone", detail, name)
            return None
        err = SpawnRefused(
            "Your server cannot start: another lab on this host uses the same container name. "
            "The administrators have been told; please try again later.",
            reason="container-name-taken",
            status_code=503,
            log_message=(
                f"{detail}. Two labs on one Docker engine need different container names: set "
                "c.GPUDockerSpawner.prefix (e.g. 'staging') in one of them."
            ),
        )
        self.log.error(err.log_message)
        await self._refuse(rt, self.profile_slug or None, err)
        raise err

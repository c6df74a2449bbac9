"""The recovery half of GPUDockerSpawner: poll, re-adoption, and the reconcile pass at hub start.

Invariant 3 of the design: every allocation ends. ``poll()`` releases the allocation of a container
that is gone; a running container whose allocation was closed elsewhere is re-adopted on the same
slice, or stopped; the first spawner activity in a hub process reconciles the ledger with the
labelled containers Docker reports.
"""

from __future__ import annotations

import asyncio
import weakref

from ..ledger import LedgerRefusal
from .runtime import LabRuntime

# Every spawner of this hub process. JupyterHub creates the spawner of each server it believes
# running before any poll (``JupyterHub.init_spawners``), and one for each spawn.
_spawners: weakref.WeakSet = weakref.WeakSet()


class RecoveryMixin:
    """Mixed into :class:`~.gpudocker.GPUDockerSpawner` (before DockerSpawner in the MRO)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _spawners.add(self)

    async def poll(self):
        rt = self.runtime()
        await self._reconcile_once(rt)
        status = await super().poll()
        if status is not None:
            await self._release(rt, "container-gone" if status == 0 else "exited")
            return status
        if self.allocation_id is not None and self._start_done:
            a = await asyncio.to_thread(rt.ledger.get, self.allocation_id)
            if a is not None and not a.open:
                return await self._readopt(rt)
        return status

    async def _readopt(self, rt: LabRuntime):
        """The container runs but its allocation was closed (an admin released it, or a
        reconcile ran without seeing it): hold the same slice again, or stop the container."""
        profile = rt.lab.profile(self.profile_slug)
        if profile is not None and profile.wants_gpu and self.slice_id:
            try:
                claim = await self._claim(rt, profile, only_slice=self.slice_id)
                self.allocation_id = claim.allocation.id
                await asyncio.to_thread(
                    rt.ledger.set_container, claim.allocation.id, self.object_id, self.object_name
                )
                self.log.warning(
                    "Re-adopted %s's running container on %s", self._log_name, self.slice_id
                )
                return None
            except LedgerRefusal:
                pass
        self.log.warning(
            "Stopping %s: its slice %s is held by another allocation", self._log_name, self.slice_id
        )
        self.allocation_id = None
        await self.stop(now=True)
        return "gpulab: slice no longer held"

    async def _reconcile_once(self, rt: LabRuntime) -> None:
        if rt.reconciled:
            return
        rt.reconciled = True
        try:
            report = await asyncio.to_thread(
                rt.reconcile, self.client, grace_s=self.reconcile_grace
            )
        except Exception:
            self.log.exception("gpulab reconcile failed; will not retry in this process")
            return
        known = self._hub_container_ids()
        for cid in report.orphan_containers:
            if cid in known:
                continue  # its spawner's poll re-adopts it
            self.log.warning(
                "gpulab reconcile: removing container %s, which holds no allocation", cid[:12]
            )
            try:
                await self.docker("remove_container", cid, force=True)
            except Exception:
                self.log.exception("Could not remove orphan container %s", cid[:12])

    def _hub_container_ids(self) -> set[str]:
        """Container ids of servers JupyterHub runs or is starting in this process (without the
        deprecated ``Spawner.db``)."""
        return {sp.object_id for sp in list(_spawners) if sp.object_id}

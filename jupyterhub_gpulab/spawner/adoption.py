"""Adoption, the backend-neutral half of recovery (part of :class:`~.core.SliceSpawnerCore`).

- :meth:`AdoptionMixin._adopt`: a server whose state the hub lost (killed while the server
  started) takes over the allocation its object's labels name, when the ledger says that
  allocation is open and this server's.
- :meth:`AdoptionMixin._readopt`: a running server whose allocation was closed elsewhere holds
  the same slice again, or is stopped.

The backend finds the object and reads its labels (:mod:`.recovery` for Docker).
"""

from __future__ import annotations

from sqlalchemy import inspect as sa_inspect

from ..ledger import LedgerRefusal, aio
from .runtime import LabRuntime


class AdoptionMixin:
    """Needs the core's ``_claim``, ``stop``, state traits and the backend's ``object_id`` /
    ``object_name``."""

    async def _adopt(
        self,
        rt: LabRuntime,
        allocation_id: int,
        slice_id: str | None,
        name: str,
        node: str | None = None,
    ):
        """This server holds no allocation but its object's labels name one: the hub was
        killed while the server started, before JupyterHub saved its state. Take the allocation
        over when the ledger says it is open and this server's, on the object's slice and node
        (``node``: the one its labels name, where the backend runs servers on several nodes;
        else this hub's)."""
        a = await aio.call(rt.ledger.get, allocation_id)
        mine = (self.user.name, self.name or "", node or rt.lab.node, slice_id)
        if a is None or not a.open or (a.user, a.server_name, a.node, a.slice_id) != mine:
            return False  # (another lab's container never gets here: labguard.py)
        self.allocation_id = a.id
        self.slice_id = a.slice_id
        self.profile_slug = self.last_profile = a.profile
        self.user_options = {"profile": a.profile}  # what the server model shows
        session = sa_inspect(self.orm_spawner).session if self.orm_spawner is not None else None
        if session is not None:
            # saved now, as JupyterHub saves it after a start (its session, not Spawner.db)
            self.orm_spawner.state = self.get_state()
            session.commit()
        self.log.warning(
            "gpulab: %s's container %s holds allocation %d on %s, which its lost state did not "
            "name; adopted it",
            self._log_name,
            name,
            a.id,
            a.slice_id,
        )
        return True

    async def _readopt(self, rt: LabRuntime):
        """The container runs but its allocation was closed (an admin released it, or a
        reconcile ran without seeing it): hold the same slice again, or stop the container."""
        profile = rt.lab.profile(self.profile_slug)
        if profile is not None and profile.wants_gpu and self.slice_id:
            try:
                claim = await self._claim(rt, profile, only_slice=self.slice_id)
                self.allocation_id = claim.allocation.id
                await aio.write(
                    rt.ledger,
                    rt.ledger.set_container,
                    claim.allocation.id,
                    self.object_id,
                    self.object_name,
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

"""The recovery half of GPUDockerSpawner: poll, the container check, adoption, the reconcile task.

Invariant 3 of the design: every allocation ends. ``poll()`` releases the allocation of a container
that is gone; a running container whose allocation was closed elsewhere is re-adopted on the same
slice, or stopped.

No container ever holds a slice the ledger did not give it: every container the spawner would
start or adopt passes :meth:`RecoveryMixin.get_object` (after :mod:`.labguard` turned away
other labs' containers): its labels must name this server and the slice it holds
(:func:`~.reconcile.foreign_reason`). The one exception is a server whose
state the hub lost (killed while the server started): it adopts its container's allocation when
the ledger says that allocation is open and this server's. Any other container is removed, never
started or adopted.

The spawner also starts the process's continuous reconcile (:mod:`.reconcile`) on the hub's loop.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit, urlunsplit

from docker.errors import APIError
from sqlalchemy import inspect as sa_inspect

from ..ledger import LedgerRefusal
from .reconcile import LabContainer, foreign_reason
from .runtime import LabRuntime


class RecoveryMixin:
    """Mixed into :class:`~.gpudocker.GPUDockerSpawner` (before DockerSpawner in the MRO)."""

    _removed_foreign: bool = False

    def _start_reconciler(self, rt: LabRuntime) -> None:
        """Start the process's reconcile on the running loop; no-op outside a hub (no
        ``app.users``) or outside the event loop's thread."""
        users = (getattr(getattr(self, "user", None), "settings", None) or {}).get("users")
        if users is None:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        rt.start_reconciler(
            docker=self.docker,
            docker_client=self.client,
            users=users.values,
            interval_s=self.reconcile_interval,
            log=self.log,
        )

    async def poll(self):
        rt = self.runtime()
        self._removed_foreign = False
        status = await super().poll()
        if status is not None:
            if self._removed_foreign:
                reason = "container-mismatch"
            else:
                reason = "container-gone" if status == 0 else "exited"
            await self._release(rt, reason)
            return status
        if self.allocation_id is not None and self._start_done:
            a = await asyncio.to_thread(rt.ledger.get, self.allocation_id)
            if a is not None and not a.open:
                return await self._readopt(rt)
        return status

    async def get_object(self):
        """DockerSpawner's lookup of this server's container (by name), for ``start()`` and
        ``poll()``: a container whose labels do not match this server and its allocation is
        removed and reported gone (``None``), so it is never started or adopted."""
        obj = await super().get_object()
        if obj is None or self.object_type != "container":
            return obj
        rt = self.runtime()
        c = LabContainer.from_inspect(obj)
        why = foreign_reason(
            c,
            user=self.user.name,
            server_name=self.name or "",
            allocation_id=self.allocation_id,
            slice_id=self.slice_id or None,
            starting=not self._start_done,
        )
        if why is None:
            return obj
        lost_state = self.allocation_id is None and c.allocation_id is not None
        if lost_state and self._start_done and await self._adopt(rt, c):
            return obj
        if self._start_done and c.user is None:
            # not gpulab's: not adopted, and left alone (a start takes the name, as DockerSpawner
            # does)
            self.log.warning(
                "gpulab: not adopting %s under %s's container name: %s",
                c.describe(),
                self._log_name,
                why,
            )
            self.object_id = ""
            self._removed_foreign = True
            return None
        self.log.warning(
            "gpulab: removing %s of %s instead of %s it: %s",
            c.describe(),
            self._log_name,
            "adopting" if self._start_done else "starting",
            why,
        )
        try:
            await self.docker("remove_container", c.id, force=True, v=True)
        except APIError as e:
            if e.status_code not in (404, 409):
                raise
        self.object_id = ""
        self._removed_foreign = True
        return None

    async def get_url(self):
        """Where the server really listens, asked by a restarted hub of a server that ``poll()``
        says runs (JupyterHub's ``Spawner.get_url`` contract).

        A hub killed while a server started never stored the address ``start()`` returned: its
        database still holds the placeholder (a random port) made before the spawn, and the new
        hub would wait ``http_timeout`` on it, then shut the working server down. The address is
        read from the engine (``DockerSpawner.get_ip_and_port``, the container's published or
        internal address); the hub's path is kept. Falls back to the stored URL when the engine
        cannot say. Returns a URL string such as ``http://127.0.0.1:49153/user/ann/``.
        """
        url = self.server.url
        try:
            ip, port = await self.get_ip_and_port()
        except Exception as e:  # the engine answers poll() but not this: keep what the hub has
            self.log.warning("Could not read %s's address from Docker: %s", self._log_name, e)
            return url
        parts = urlsplit(url)
        return urlunsplit(parts._replace(netloc=f"{ip}:{port}"))

    async def _adopt(self, rt: LabRuntime, c: LabContainer) -> bool:
        """This server holds no allocation but its container's labels name one: the hub was
        killed while the server started, before JupyterHub saved its state. Take the allocation
        over when the ledger says it is open and this server's, on the container's slice."""
        a = await asyncio.to_thread(rt.ledger.get, c.allocation_id)
        mine = (self.user.name, self.name or "", rt.lab.node, c.slice_id)
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
            c.name,
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

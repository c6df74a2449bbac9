"""The Docker half of recovery in GPUDockerSpawner: the container check, and the reconcile task.

Invariant 3 of the design: every allocation ends. The core's ``poll()`` (:mod:`.core`) releases
the allocation of a container that is gone; a running container whose allocation was closed
elsewhere is re-adopted on the same slice, or stopped (:mod:`.adoption`).

No container ever holds a slice the ledger did not give it: every container the spawner would
start or adopt passes :meth:`RecoveryMixin.get_object` (after :mod:`.labguard` turned away
other labs' containers): its labels must name this server and the slice it holds
(:func:`~.reconcile.foreign_reason`). The one exception is a server whose state the hub lost
(killed while the server started): it adopts its container's allocation when the ledger says
that allocation is open and this server's (:meth:`~.adoption.AdoptionMixin._adopt`). Any other
container is removed, never started or adopted.

For the continuous reconcile (:mod:`.reconcile`, started by the core) it lists this lab's
containers and removes them.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from docker.errors import APIError

from ..ledger import aio
from .reconcile import LabContainer, foreign_reason


class RecoveryMixin:
    """Mixed into :class:`~.gpudocker.GPUDockerSpawner` (before DockerSpawner in the MRO)."""

    async def _list_lab_objects(self) -> list[LabContainer]:
        """This lab's containers on the engine, in any state (``docker ps -a``, sorted by
        :meth:`~.runtime.LabRuntime.our_containers`), for the reconcile."""
        rows = await self.docker("containers", all=True)
        ours = await aio.call(self.runtime().our_containers, self.client, rows)
        return [LabContainer.from_ps(r) for r in ours]

    async def _remove_object(self, object_id: str) -> None:
        """Remove a container and its anonymous volumes, running or not."""
        await self.docker("remove_container", object_id, force=True, v=True)

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
        if (
            lost_state
            and self._start_done
            and await self._adopt(rt, c.allocation_id, c.slice_id, c.name)
        ):
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

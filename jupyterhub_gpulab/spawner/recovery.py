"""Recovery in a backend of the spawner core: the check of every object a server would start or
adopt, and the address of a server a restarted hub finds running.

Invariant 3 of the design: every allocation ends. The core's ``poll()`` (:mod:`.core`) releases
the allocation of a container that is gone; a running container whose allocation was closed
elsewhere is re-adopted on the same slice, or stopped (:mod:`.adoption`).

No object ever holds a slice the ledger did not give it: every container (or Swarm service)
the spawner would start or adopt passes :meth:`RecoveryMixin.get_object` (after
:mod:`.labguard` turned away other labs' objects): its labels must name this server and the
slice it holds (:func:`~.labobject.foreign_reason`). The one exception is a server whose state
the hub lost (killed while the server started): it adopts its object's allocation when the
ledger says that allocation is open and this server's, on its node
(:meth:`~.adoption.AdoptionMixin._adopt`). Any other object is removed, never started or
adopted.

The backend says how its objects read (``_lab_object(obj) -> LabObject``) and removes one
(``_remove_object(id)``, which the continuous reconcile uses too).
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from .labobject import foreign_reason


class RecoveryMixin:
    """Mixed into a backend (:class:`~.gpudocker.GPUDockerSpawner`,
    :class:`~.gpuswarm.GPUSwarmSpawner`) before DockerSpawner in the MRO."""

    async def get_object(self):
        """DockerSpawner's lookup of this server's object (by name), for ``start()`` and
        ``poll()``: an object whose labels do not match this server and its allocation is
        removed and reported gone (``None``), so it is never started or adopted."""
        obj = await super().get_object()
        if obj is None:
            return obj
        rt = self.runtime()
        c = self._lab_object(obj)
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
            and await self._adopt(
                rt,
                c.allocation_id,
                c.slice_id,
                c.name,
                c.node if self._claim_node(rt) is None else None,
            )
        ):
            return obj
        if self._start_done and c.user is None:
            # not gpulab's: not adopted, and left alone (a start takes the name, as DockerSpawner
            # does)
            self.log.warning(
                "gpulab: not adopting %s under %s's object name: %s",
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
        await self._remove_object(c.id)
        self.object_id = ""
        self._removed_foreign = True
        return None

    async def get_url(self):
        """Where the server really listens, asked by a restarted hub of a server that ``poll()``
        says runs (JupyterHub's ``Spawner.get_url`` contract).

        A hub killed while a server started never stored the address ``start()`` returned: its
        database still holds the placeholder (a random port) made before the spawn, and the new
        hub would wait ``http_timeout`` on it, then shut the working server down. The address is
        read from the engine; the hub's path is kept. Falls back to the stored URL when the engine
        cannot say (the backend's ``get_ip_and_port``: a container's published or internal
        address, a Swarm task's node and published port). Returns a URL string such as
        ``http://127.0.0.1:49153/user/ann/``.
        """
        url = self.server.url
        try:
            ip, port = await self.get_ip_and_port()
        except Exception as e:  # the engine answers poll() but not this: keep what the hub has
            self.log.warning("Could not read %s's address from the engine: %s", self._log_name, e)
            return url
        parts = urlsplit(url)
        return urlunsplit(parts._replace(netloc=f"{ip}:{port}"))

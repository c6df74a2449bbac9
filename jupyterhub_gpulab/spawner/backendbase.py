"""What the Docker and the Swarm spawner backends share (mixed in before the core by both,
:mod:`.gpudocker`, :mod:`.gpuswarm`): one vocabulary, DockerSpawner's where it has the name.

- :meth:`EngineBackend._image_labels`: an image's labels from the backend's engine
  (``docker()``'s ``inspect_image``; on a Swarm, the manager's copy), cached 30 s;
- :meth:`EngineBackend._discard_object`: a failed start's object removed through
  DockerSpawner's ``remove_object`` (a container, or a service with its task);
- :meth:`EngineBackend._lab_labels`: the lab's labels naming a server and its allocation;
- :meth:`EngineBackend.lab_backend`: the lab's engine seam for everything else the hub asks of an
  engine (a course server's storage: :mod:`jupyterhub_gpulab.backends`).
"""

from __future__ import annotations

import asyncio
import time

from docker.errors import ImageNotFound

from ..backends import Backend, backend_for
from . import container as ct


class EngineBackend:
    """Needs the core's ``runtime()``, ``allocation_id``, ``profile_slug`` and DockerSpawner's
    ``docker()``, ``remove_object()``, ``object_id``, ``object_type``."""

    #: ``{image: (read at, labels)}``: image labels change only with a rebuild, and the form
    #: asks for every profile's at each render.
    _label_cache: dict[str, tuple[float, dict | None]] = {}
    LABEL_CACHE_S = 30
    #: ``{image: the read in flight}`` (an ``asyncio.Task`` of :meth:`_read_labels`)
    _label_reads: dict[str, asyncio.Task] = {}
    #: the engine seam of this spawner class's configuration (one per hub process)
    _lab_backends: dict[int, Backend] = {}

    async def _image_labels(self, image: str) -> dict | None:
        """The image's labels from the engine (``docker image inspect``), cached 30 s; ``None``
        for an image not on the host (it may be pulled at create: needs nothing then).

        Starts that miss the cache together share one read: DockerSpawner runs every engine
        call on one thread, so a burst of 40 spawns made 40 inspects queue there (ahead of and
        behind the winners' creates), and each refusal waited for all of them."""
        hit = self._label_cache.get(image)
        if hit and time.monotonic() - hit[0] < self.LABEL_CACHE_S:
            return hit[1]
        loop = asyncio.get_running_loop()
        reading = self._label_reads.get(image)
        if reading is None or reading.done() or reading.get_loop() is not loop:
            reading = self._label_reads[image] = loop.create_task(self._read_labels(image))
        # shielded: a start cancelled while waiting leaves the others' read running
        return await asyncio.shield(reading)

    async def _read_labels(self, image: str) -> dict | None:
        try:
            info = await self.docker("inspect_image", image)
            labels = dict((info.get("Config") or {}).get("Labels") or {})
        except ImageNotFound:
            labels = None
        self._label_cache[image] = (time.monotonic(), labels)
        return labels

    async def _discard_object(self) -> None:
        """Remove what a failed start left (DockerSpawner's ``remove_object``), logging a
        failure: the start's own error is what the user sees."""
        if self.object_id:
            try:
                await self.remove_object()
            except Exception:
                self.log.warning(
                    "Could not remove the %s of a failed start", self.object_type, exc_info=True
                )
            self.object_id = ""

    def _lab_labels(self, s, node: str) -> dict[str, str]:
        """The lab's labels of this server's object holding slice ``s`` (``None``: no GPU) on
        ``node`` (:func:`.container.labels`)."""
        rt = self.runtime()
        return ct.labels(
            allocation_id=self.allocation_id,
            user=self.user.name,
            server_name=self.name or "",
            profile=self.profile_slug,
            slice_id=s.id if s else None,
            node=node,
            lab=rt.identity.uuid,
            lab_name=rt.identity.name,
        )

    def lab_backend(self) -> Backend:
        """The lab's engine seam (:func:`jupyterhub_gpulab.backends.backend_for` of this
        spawner's configuration), made once per configuration; it connects on first use."""
        key = id(self.config)
        found = self._lab_backends.get(key)
        if found is None:
            found = self._lab_backends[key] = backend_for(self.config)
        return found

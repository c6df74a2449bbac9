"""What the Docker and the Swarm spawner backends share (mixed in before the core by both,
:mod:`.gpudocker`, :mod:`.gpuswarm`): the lab's engine seam (:mod:`jupyterhub_gpulab.backends`),
spoken in DockerSpawner's vocabulary.

DockerSpawner's flow stays DockerSpawner's (``start()``: pull, look up, ``create_object``,
``start_object``, ``get_ip_and_port``; ``stop()``: ``stop_object``, ``remove_object``), and so do
its templates; every engine call of that flow passes through DockerSpawner's one seam,
``docker(method, …)``, which sends a server object's create, start and removal to the lab's
backend object (:data:`SERVER_CALLS`: ``create_server``, ``start_server``, ``remove_server``),
after putting the slice and the lab's labels into the create request (``_attach_slice``, the one
place they join). The backend runs on the spawner's own client and engine thread.

- :meth:`EngineBackend.lab_backend`: the lab's backend object (also a course server's storage);
- :meth:`EngineBackend._image_labels`: an image's labels (``image_labels``; on a Swarm, the
  manager's copy), cached 30 s;
- :meth:`EngineBackend._discard_object`: a failed start's object removed (DockerSpawner's
  ``remove_object``); :meth:`EngineBackend._remove_object`: the reconcile's removal by id;
- :meth:`EngineBackend._lab_labels`: the lab's labels naming a server and its allocation.
"""

from __future__ import annotations

import asyncio
import time

from ..backends import Backend, backend_for
from . import container as ct

#: DockerSpawner's engine calls that make, start and remove a server's object (its
#: ``docker(method, …)``), and the backend word each one is.
SERVER_CALLS = {
    "create_container": "create_server",
    "create_service": "create_server",
    "start": "start_server",
    "remove_container": "remove_server",
    "remove_service": "remove_server",
}


class EngineBackend:
    """Needs the core's ``runtime()``, ``allocation_id``, ``profile_slug``, the backend's
    ``_attach_slice`` and DockerSpawner's ``docker()``, ``executor``, ``client``,
    ``remove_object()``, ``object_id``, ``object_type``."""

    #: ``{image: (read at, labels)}``: image labels change only with a rebuild, and the form
    #: asks for every profile's at each render.
    _label_cache: dict[str, tuple[float, dict | None]] = {}
    LABEL_CACHE_S = 30
    #: an entry older than :data:`LABEL_CACHE_S` but younger than this (seconds) is answered at
    #: once while one new read runs for the next start: a start never waits for the engine's
    #: thread unless the labels are older than this (or were never read)
    LABEL_STALE_S = 300
    #: ``{image: the read in flight}`` (an ``asyncio.Task`` of :meth:`_read_labels`)
    _label_reads: dict[str, asyncio.Task] = {}
    #: the engine seam of each spawner class and configuration (one per hub process)
    _lab_backends: dict[tuple[type, int], Backend] = {}
    #: the course whose server this start is (set by the courses' pre-spawn hook at each start,
    #: :mod:`jupyterhub_gpulab.courses.hubhook`): labelled on the server's object
    #: (:data:`.container.LABEL_COURSE`); ``None``: not a course server
    course_slug: str | None = None

    def docker(self, method, *args, **kwargs):
        """DockerSpawner's seam for every engine call (a future, on its one engine thread): a
        server object's create, start and removal go to the lab's backend (:data:`SERVER_CALLS`),
        a create with this server's slice and labels attached; every other call to the client.
        The removal is forced and takes the object's anonymous volumes (DockerSpawner's ``v``)."""
        word = SERVER_CALLS.get(method)
        if word is None or (word == "create_server" and args):
            # not a server's object (a create with a positional image is DockerSpawner's
            # internal-SSL helper container, which holds no slice)
            return super().docker(method, *args, **kwargs)
        backend = self.lab_backend()
        if word == "create_server":
            # after DockerSpawner rendered its templates: user-controlled names are never templated
            self._attach_slice(kwargs, self._current_slice)
            return self._on_engine_thread(backend.create_server, kwargs)
        return self._on_engine_thread(getattr(backend, word), args[0])

    def _on_engine_thread(self, fn, *args):
        return asyncio.wrap_future(self.executor.submit(fn, *args))

    async def _image_labels(self, image: str) -> dict | None:
        """The image's labels from the engine (``docker image inspect``), cached 30 s; ``None``
        for an image not on the host (it may be pulled at create: needs nothing then).

        Starts that miss the cache together share one read: DockerSpawner runs every engine
        call on one thread, so a burst of 40 spawns made 40 inspects queue there (ahead of and
        behind the winners' creates), and each refusal waited for all of them. Labels read
        between 30 s and :data:`LABEL_STALE_S` ago are answered at once while that one read
        runs for the next start: a class's burst that came a minute after the last start waited
        3.6-4.1 s for the inspect behind the winners' creates (``benchmarks/spawn.py --steps``).
        A rebuilt image's new labels are seen within :data:`LABEL_STALE_S` at most."""
        hit = self._label_cache.get(image)
        age = time.monotonic() - hit[0] if hit else None
        if hit and age < self.LABEL_CACHE_S:
            return hit[1]
        loop = asyncio.get_running_loop()
        reading = self._label_reads.get(image)
        if reading is None or reading.done() or reading.get_loop() is not loop:
            reading = self._label_reads[image] = loop.create_task(self._read_labels(image))
            reading.add_done_callback(self._label_read_done)
        if hit and age < self.LABEL_STALE_S:
            return hit[1]
        # shielded: a start cancelled while waiting leaves the others' read running
        return await asyncio.shield(reading)

    def _label_read_done(self, reading: asyncio.Task) -> None:
        # a read nobody awaited (its labels were answered from the cache) logs its failure
        if not reading.cancelled() and reading.exception() is not None:
            self.log.warning("Could not read an image's labels: %s", reading.exception())

    async def _read_labels(self, image: str) -> dict | None:
        labels = await self._on_engine_thread(self.lab_backend().image_labels, image)
        self._label_cache[image] = (time.monotonic(), labels)
        return labels

    async def _remove_object(self, object_id: str) -> None:
        """Remove a server's object by id, running or not (gone already: done): the reconcile's
        and the recovery's removal of an object that is not this server's."""
        await self._on_engine_thread(self.lab_backend().remove_server, object_id)

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
            course=self.course_slug,
        )

    def lab_backend(self) -> Backend:
        """The lab's engine seam (:func:`jupyterhub_gpulab.backends.backend_for` of this
        spawner's configuration, on DockerSpawner's client: one client per engine in the hub),
        made once per spawner class and configuration; it connects on first use."""
        cls = type(self)
        key = (cls, id(self.config))
        found = self._lab_backends.get(key)
        if found is None:
            spawner = self  # DockerSpawner's client is its class's: any instance makes the same
            found = self._lab_backends[key] = backend_for(self.config, lambda: spawner.client)
        return found

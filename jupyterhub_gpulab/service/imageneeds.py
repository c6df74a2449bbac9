"""What each profile's image needs of its GPU, as the service sees it.

The spawner narrows every claim it makes to the GPUs a profile's image can use
(:mod:`..spawner.imagegate`, from the image's labels: CUDA major, minimum driver and compute
capability, :mod:`..lab.images`). The service claims too — a waitlist offer is a hold on a slice
(:meth:`~..ledger.Ledger.offer_next`) — and shows each profile's free slices on the user page;
both ask :meth:`ImageNeeds.request_for` for the profile's slice request narrowed the same way, so
an offer never holds a slice that the spawn would then refuse, and "2 free" means two the user
could start on.

Labels are read through the lab's backend (:class:`~.state.LabState` passes
:func:`~jupyterhub_gpulab.backends.backend_for` of the lab's configuration: the spawner's engine,
``DOCKER_HOST`` with ``c.DockerSpawner.tls_config`` / ``client_kwargs``; on a Swarm, the manager,
which holds the images), cached ``CACHE_S`` seconds. An image that engine lacks, or an engine that does not answer, needs nothing
(as the spawner treats an image it cannot inspect); labels that are not versions are logged and
need nothing here (the spawner refuses such a profile as ``misconfigured``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..inventory import Inventory, SliceKind, SliceRequest
from ..inventory.model import profile_seat_check
from ..lab.images import requirements_from_labels
from ..lab.profile import Profile

log = logging.getLogger("gpulab.imageneeds")


class ImageNeeds:
    """``backend``: a callable returning the lab's engine seam (:mod:`jupyterhub_gpulab.backends`;
    default: the local engine's, ``DOCKER_HOST``), made on first use. Methods block: call them
    through :func:`..ledger.aio.call`, together with the ledger work they serve."""

    #: seconds an image's labels are trusted (they change only with a rebuild)
    CACHE_S = 30.0

    def __init__(self, backend: Callable | None = None):
        self._backend_factory = backend
        self._backend = None
        self._cache: dict[str, tuple[float, dict | None]] = {}
        self._lock = threading.Lock()

    def _engine(self):
        if self._backend is None:
            if self._backend_factory is None:
                from ..backends.dockerengine import DockerBackend, Engine, api_client

                self._backend_factory = lambda: DockerBackend(Engine(api_client))
            self._backend = self._backend_factory()
        return self._backend

    def labels(self, image: str) -> dict | None:
        """``image``'s labels, ``None`` where the engine lacks it or does not answer."""
        with self._lock:
            hit = self._cache.get(image)
            if hit and time.monotonic() - hit[0] < self.CACHE_S:
                return hit[1]
        try:
            labels = self._engine().image_labels(image)
        except Exception as e:  # an engine that does not answer (EngineError)
            log.debug("No labels for %s: %s", image, e)
            labels = None
        with self._lock:
            self._cache[image] = (time.monotonic(), labels)
        return labels

    def request_for(self, profile: Profile) -> SliceRequest:
        """``profile.slice`` narrowed to the GPUs its image can use; unchanged for a CPU profile
        or an image that states no needs."""
        if not profile.wants_gpu or not profile.image:
            return profile.slice
        try:
            needs = requirements_from_labels(profile.image, self.labels(profile.image))
        except ValueError as e:
            log.warning("Profile %r: %s", profile.slug, e)
            return profile.slice
        return needs.restrict(profile.slice)

    def seat_check(self, profile: Profile, inventory: Inventory) -> str | None:
        """What holds the cap of the seats ``profile`` gives, as the spawn form says it
        (:func:`~..inventory.model.profile_seat_check`): ``None`` unless they are shared seats;
        soft where the image states no framework cap or its labels are unreadable."""
        if profile.slice.kind is not SliceKind.SHARED:
            return None
        try:
            capped = requirements_from_labels(profile.image, self.labels(profile.image)).seat_cap
        except ValueError:
            capped = False
        return profile_seat_check(inventory, self.request_for(profile), capped)

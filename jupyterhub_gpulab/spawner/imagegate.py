"""The image half of the spawner core (:mod:`.core`): what a profile's image needs of its GPU,
and the environment gpulab gives every server besides its slice's.

A backend may supply :meth:`ImageMixin._image_labels` (the backends on a Docker engine read
``docker image inspect``: :class:`EngineImageLabels`; on a Swarm, the manager's copy); the core
then narrows every claim to the GPUs the image can run on (:mod:`..lab.images`: CUDA major,
minimum driver and compute capability from its labels).
"""

from __future__ import annotations

import time

from docker.errors import ImageNotFound
from traitlets import HasTraits, Unicode

from ..errors import SpawnRefused
from ..lab.images import ImageRequirements, requirements_from_labels
from ..lab.profile import Profile


class ImageMixin(HasTraits):
    """Part of :class:`~.core.SliceSpawnerCore`."""

    async def _image_labels(self, image: str) -> dict | None:
        """``image``'s labels, or ``None`` where the backend cannot read them (then the image is
        taken to need nothing of its GPU)."""
        return None

    async def image_requirements(self, profile: Profile) -> ImageRequirements:
        """What ``profile``'s image needs of its GPU, from its labels (:mod:`..lab.images`).
        Raises :class:`SpawnRefused` (``misconfigured``) for labels that are not versions."""
        try:
            return requirements_from_labels(profile.image, await self._image_labels(profile.image))
        except ValueError as e:
            raise SpawnRefused(
                "This profile's image is labelled wrongly, so it cannot start. An administrator "
                "has been told (hub log).",
                reason="misconfigured",
                log_message=str(e),
            ) from None

    service_api_url = Unicode(
        "",
        config=True,
        help="""The gpulab service's API as the servers reach it (``http://<host>:<port>/services/
        gpulab/api/``), given to every server as ``GPULAB_API_URL``: JupyterLab's status bar
        entry (the ``jupyterlab-gpulab`` extension in gpulab's images) reads the slice and the
        GPU-hours left there with the server's own token. ``configure_service`` sets it from the
        service's ``url``, which must then be an address the containers reach (the docker
        bridge's, as the hub API's). Empty: not given.

        ``c.GPUDockerSpawner.service_api_url = "http://172.17.0.1:10101/services/gpulab/api/"``
        """,
    )

    def gpulab_env(self) -> dict[str, str]:
        """Environment gpulab gives every server besides its slice's: ``GPULAB_API_URL``."""
        return {"GPULAB_API_URL": self.service_api_url} if self.service_api_url else {}


class EngineImageLabels:
    """``_image_labels`` from the backend's Docker engine (its ``docker()`` seam); mixed in
    before the core by the Docker and the Swarm backends."""

    #: ``{image: (read at, labels)}``: image labels change only with a rebuild, and the form
    #: asks for every profile's at each render.
    _label_cache: dict[str, tuple[float, dict | None]] = {}
    LABEL_CACHE_S = 30

    async def _image_labels(self, image: str) -> dict | None:
        """The image's labels from the engine (``docker image inspect``), cached 30 s; ``None``
        for an image not on the host (it may be pulled at create: needs nothing then)."""
        hit = self._label_cache.get(image)
        if hit and time.monotonic() - hit[0] < self.LABEL_CACHE_S:
            return hit[1]
        try:
            info = await self.docker("inspect_image", image)
            labels = dict((info.get("Config") or {}).get("Labels") or {})
        except ImageNotFound:
            labels = None
        self._label_cache[image] = (time.monotonic(), labels)
        return labels

"""The image half of the spawner core (:mod:`.core`): what a profile's image needs of its GPU,
and the environment gpulab gives every server besides its slice's.

A backend may supply :meth:`ImageMixin._image_labels` (the backends on a Docker engine read
``docker image inspect``: :class:`~.backendbase.EngineBackend`; on a Swarm, the manager's copy); the core
then narrows every claim to the GPUs the image can run on (:mod:`..lab.images`: CUDA major,
minimum driver and compute capability from its labels).
"""

from __future__ import annotations

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

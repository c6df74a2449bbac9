"""What every backend's server object gets from its profile and its slice, and what its user is
told when it is gone (part of :class:`~.core.SliceSpawnerCore`).

- its name: ``<prefix>-<user>[-<server>]``, DNS-safe and unique (:mod:`~jupyterhub_gpulab.lab.names`),
  and its volumes' (``{username}`` in ``c.DockerSpawner.volumes``), by the same module;
- :meth:`ObjectSpecMixin._apply_profile`: the profile's image and CPU and memory limits, on
  DockerSpawner's traits, which the backend's create reads (a container's HostConfig, a Swarm
  service's resources);
- ``shm_size``: ``/dev/shm``'s size (a profile's, else the lab's);
- :meth:`ObjectSpecMixin.get_env`: the environment, with the slice's variables last
  (:func:`~.container.slice_env`: ``NVIDIA_VISIBLE_DEVICES`` is the slice's UUID, ``void`` for a
  CPU profile), which neither a profile, the admin's ``environment`` nor a user can change;
- :meth:`ObjectSpecMixin._notify_gone`: a notice to the user whose server stopped without anyone
  asking (its node went down), on the hub's home page and their gpulab page.
"""

from __future__ import annotations

from traitlets import HasTraits, Unicode, default, validate

from .. import clock
from ..lab.names import check_prefix, container_name, volume_name
from ..lab.profile import Profile
from ..ledger import aio
from ..ledger.notices import STOPPED_PREFIX
from ..units import UnitError, parse_bytes
from . import container as ct


class ObjectSpecMixin(HasTraits):
    """Needs the core's ``_current_profile``, ``_current_slice``, ``_current_need``, ``mps``
    and ``gpulab_env()`` (:mod:`.imagegate`)."""

    @default("prefix")
    def _default_prefix(self):
        return "jupyter"

    @validate("prefix")
    def _check_prefix(self, proposal):
        return check_prefix(proposal.value)

    def _object_name_default(self):
        """Deterministic, DNS-safe, <= 63 characters, unique per (user, server): see names.py.
        (A container's name, or a Swarm service's.)"""
        return container_name(self.prefix, self.user.name, self.name or "")

    @default("object_name")
    def _default_object_name(self):
        return self._object_name_default()

    @default("format_volume_name")
    def _default_format_volume_name(self):
        """DockerSpawner's hook naming volumes: :func:`~..lab.names.volume_name`, the function
        courses and the ``gpulab`` command name homes with (same escaping as DockerSpawner's)."""
        return _format_volume_name

    def _apply_profile(self, profile: Profile) -> None:
        """The profile's image and CPU and memory limits (the admin's lab-wide ones where the
        profile sets none)."""
        if not hasattr(self, "_base_limits"):
            self._base_limits = {"mem_limit": self.mem_limit, "cpu_limit": self.cpu_limit}
        base = self._base_limits
        self.image = profile.image
        self.mem_limit = profile.mem_limit if profile.mem_limit is not None else base["mem_limit"]
        self.cpu_limit = profile.cpu_limit if profile.cpu_limit is not None else base["cpu_limit"]

    shm_size = Unicode(
        "1GiB",
        config=True,
        help="""Size of every server's ``/dev/shm`` (Docker's default is 64 MiB): PyTorch's
        DataLoader workers pass batches through shared memory and fail with "bus error" in 64
        MiB. Bytes or ``"1GiB"``, ``"2G"``; a profile's ``shm_size`` overrides it. Shared memory
        that is used counts against the container's ``mem_limit``. Default ``"1GiB"``. (A
        container's ``ShmSize``; a Swarm service's ``tmpfs`` mount on ``/dev/shm``.)

        ``c.GPUDockerSpawner.shm_size = "2GiB"``
        """,
    )

    @validate("shm_size")
    def _check_shm_size(self, proposal):
        try:
            parse_bytes(proposal.value, "shm_size")
        except UnitError as e:
            raise ValueError(f"c.{type(self).__name__}.shm_size: {e}; write e.g. '1GiB'") from None
        return proposal.value

    def _shm_bytes(self) -> int:
        """``/dev/shm``'s size for the current profile (bytes)."""
        profile = self._current_profile
        if profile is not None and profile.shm_size:
            return int(profile.shm_size)
        return parse_bytes(self.shm_size, "shm_size")

    def get_env(self):
        """DockerSpawner's environment, the profile's and gpulab's own (``GPULAB_API_URL``),
        without any variable only gpulab may set, then the slice's, which nothing can change
        (with the frameworks' seat caps where the image enforces them)."""
        env = super().get_env()
        profile_env = dict(self._current_profile.env) if self._current_profile else {}
        need = self._current_need
        protected = ct.slice_env(
            self._current_slice, mps=self.mps, framework_cap=bool(need and need.seat_cap)
        )
        return ct.merge_env(env, profile_env, self.gpulab_env(), protected=protected)

    async def _notify_gone(self, rt, reason: str, message: str) -> None:
        """Tell the user their server stopped without them: rule ``stopped:<reason>``, kept until
        they start it again or for a day (the service's culler clears it then)."""
        await aio.write(
            rt.ledger,
            rt.ledger.set_warning,
            self.user.name,
            self.name or "",
            f"{STOPPED_PREFIX}{reason}"[:32],
            message,
            clock.utcnow(),
        )


def _format_volume_name(template: str, spawner) -> str:
    """``template`` (a key or value of ``c.DockerSpawner.volumes``) for ``spawner``'s user and
    server, named by :func:`~..lab.names.volume_name`; DockerSpawner's other fields
    (``{servername}``, ``{imagename}``, ``{prefix}``) as it gives them."""
    return volume_name(template, spawner.user.name, fields=spawner.template_namespace())

"""``GPUDockerSpawner``: the Docker backend of the spawner core; each container holds one GPU
slice from the ledger.

Contract, in JupyterHub's terms:

- ``start()``: resolve the profile (server-side, from ``user_options``, whether they came from
  the REST API, the spawn form or a spawn link), check entitlement and policy, claim a slice in
  the ledger, then create and start a container that holds exactly that slice. Any failure after
  the claim releases it and re-raises. Refusals raise
  :class:`~jupyterhub_gpulab.errors.SpawnRefused` within a second, with a message for the user.
- The saved choice: a start without options means the profile this server last started with
  (``last_profile``, kept in the state across stops and hub restarts) if the user may still pick
  it, else the default; when it no longer applies, the progress stream and the ready event say
  so. JupyterHub saves every start's options as the next default before ``start()`` runs, even a
  refused request; ``start()`` clears that copy, so only ``last_profile`` is ever reused.
- ``stop()``: stop the container (DockerSpawner), then release the allocation (``stopped``).
- ``poll()``: a container that is gone or exited releases its allocation; a running container
  whose allocation was closed elsewhere is re-adopted if its slice is free, else stopped.
- A container whose labels do not name this server and its slice is never started or adopted:
  it is removed (recovery.py).
- State (``get_state``) carries the allocation id, so a restarted hub keeps every allocation; a
  continuous reconcile closes the allocations of servers that are neither running nor starting
  (reconcile.py).

Everything above but the container is the backend-neutral core (:mod:`.core`,
:mod:`.adoption`); this module supplies the container: ``create_container`` with the slice's
device request and labels (:meth:`GPUDockerSpawner._attach_slice`), DockerSpawner's start and
removal (what it shares with the Swarm backend: :mod:`.backendbase`), and (:mod:`.recovery`, :mod:`.labguard`) the container checks and the reconcile's
listing and removal of this lab's labelled containers. Only containers: a Swarm service
(``SwarmSpawner``'s ``create_service``) would get no slice, so such a class is refused.
"""

from __future__ import annotations

from dockerspawner import DockerSpawner
from traitlets import Bool, validate

from ..errors import SpawnRefused
from ..lab.profile import Profile
from ..lab.traits import ChoiceEnum
from ..ledger import aio
from . import container as ct
from .backendbase import EngineBackend
from .core import SliceSpawnerCore
from .formmixin import ProfileFormMixin
from .hardenmixin import HardeningMixin
from .labguard import LabGuardMixin
from .labobject import LabObject
from .recovery import RecoveryMixin
from .runtime import LabRuntime


class GPUDockerSpawner(
    ProfileFormMixin,
    RecoveryMixin,
    LabGuardMixin,
    HardeningMixin,
    EngineBackend,
    SliceSpawnerCore,
    DockerSpawner,
):
    """Spawn each user's server in a Docker container holding one GPU slice (or none, for a
    CPU profile), confined (:mod:`..lab.hardening`). Profiles, inventory, policies and the ledger
    come from ``c.GPULab``."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.object_type != "container":
            raise TypeError(
                f"{cls.__name__}: GPUDockerSpawner attaches GPU slices to containers only; its "
                f"{cls.object_type}s would start with no slice attached"
            )

    attach_mode = ChoiceEnum(
        ct.ATTACH_MODES,
        "device_request",
        config=True,
        help="""How a slice reaches the container.

        - ``"device_request"`` (default): a Docker device request for the slice's UUID
          (``--gpus device=<uuid>``); needs the NVIDIA Container Toolkit on the host.
        - ``"cdi"``: a CDI device ``nvidia.com/gpu=<uuid>`` (Docker >= 25 with a CDI spec from
          ``nvidia-ctk cdi generate --device-name-strategy=uuid``).
        - ``"env"``: only ``NVIDIA_VISIBLE_DEVICES``; for hosts whose default Docker runtime is
          ``nvidia``, and for demos on hosts without GPUs.

        ``c.GPUDockerSpawner.attach_mode = "cdi"``
        """,
    )

    # -- state: in core.py; the name, the form and the choice: objectspec.py, formmixin.py;
    # -- the image's labels and /dev/shm's size: imagegate.py, objectspec.py ----------------

    remove = Bool(
        True,
        config=True,
        help="""Remove a server's container when it stops. Must stay ``True``.

        A stopped container keeps the device request it was created with: restarting it could
        attach a slice the ledger has since given to someone else. Containers are always created
        afresh; keep user files in volumes (``c.DockerSpawner.volumes``).
        ``c.DockerSpawner.remove = False`` is refused when the spawner loads its configuration,
        and by ``gpulab check-config``.
        """,
    )

    @validate("remove")
    def _check_remove(self, proposal):
        if not proposal.value:
            raise ValueError(
                "remove = False is refused (whether set on c.DockerSpawner, c.GPUDockerSpawner or c.Spawner): a restarted container would keep the "
                "GPU slice it was created with, which the ledger may have given to someone else. "
                "Remove the setting (gpulab removes every container when its server stops) and "
                "keep user files in volumes (c.DockerSpawner.volumes) instead."
            )
        return True

    # -- the backend (core.py) ----------------------------------------------------------------

    async def _start_object(self, rt: LabRuntime, profile: Profile):
        if self.object_type != "container":
            raise NotImplementedError(
                f"{type(self).__name__} attaches GPU slices to Docker containers only, not to "
                f"{self.object_type}s"
            )
        self._apply_profile(profile)
        self._emit(50, f"Creating container {self.object_name}")
        return await super(SliceSpawnerCore, self).start()  # DockerSpawner's, which the core wraps

    def _start_refusal(self, e: BaseException) -> SpawnRefused | None:
        if not ct.is_gpu_runtime_missing(str(e)):
            return None
        return SpawnRefused(
            "This server's host cannot attach GPUs right now: its GPU runtime is missing. "
            "The administrators have been told; meanwhile you can pick a CPU-only profile.",
            reason="gpu-runtime-missing",
            log_message=(
                f"Docker refused the GPU for {self._log_name} ({self.attach_mode} mode): "
                f"{e}. Install the NVIDIA Container Toolkit and run `nvidia-ctk runtime "
                "configure --runtime=docker` then restart dockerd (device_request mode), "
                "generate a CDI spec (cdi mode), or set c.GPUDockerSpawner.attach_mode."
            ),
        )

    # -- its objects: containers (recovery.py, labguard.py and the reconcile read them) ----------

    def _lab_object(self, obj) -> LabObject:
        return LabObject.from_inspect(obj)

    def _labels_of(self, obj) -> dict:
        return (obj.get("Config") or {}).get("Labels") or {}

    async def _list_lab_objects(self) -> list[LabObject]:
        """This lab's containers on the engine, in any state (``docker ps -a``, sorted by
        :meth:`~.runtime.LabRuntime.our_containers`, which inspects others' containers through
        the lab's backend), for the reconcile."""
        rows = await self.docker("containers", all=True)
        ours = await aio.call(self.runtime().our_containers, self.lab_backend(), rows)
        return [LabObject.from_ps(r) for r in ours]

    def _attach_slice(self, create_kwargs: dict, s) -> None:
        """Put slice ``s`` (``None``: no GPU) into docker-py ``create_container`` keyword
        arguments: its device request (``attach_mode``), the profile's hardening, and the lab's
        labels naming this server and its allocation."""
        kwargs = create_kwargs
        rt = self.runtime()
        host_config = kwargs.setdefault("host_config", {})
        requests = ct.device_requests(s, self.attach_mode)
        host_config["DeviceRequests"] = requests or None
        host_config.update(
            self.hardening_for(self._current_profile, host_config.get("SecurityOpt") or ())
        )
        profile = self._current_profile
        if (profile is not None and profile.shm_size) or not host_config.get("ShmSize"):
            # a profile's size, else the lab's; an admin's extra_host_config shm_size stays
            host_config["ShmSize"] = self._shm_bytes()
        kwargs["labels"] = {**(kwargs.get("labels") or {}), **self._lab_labels(s, rt.lab.node)}

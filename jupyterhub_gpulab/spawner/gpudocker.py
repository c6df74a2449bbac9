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
removal, and (:mod:`.recovery`, :mod:`.labguard`) the container checks and the reconcile's
listing and removal of this lab's labelled containers. Only containers: a Swarm service
(``SwarmSpawner``'s ``create_service``) would get no slice, so such a class is refused.
"""

from __future__ import annotations

import time

from docker.errors import ImageNotFound
from dockerspawner import DockerSpawner
from tornado.log import app_log
from traitlets import Bool, Unicode, default, validate

from ..errors import SpawnRefused
from ..lab.profile import Profile
from ..lab.traits import ChoiceEnum
from ..units import UnitError, parse_bytes
from . import container as ct
from .core import SliceSpawnerCore
from .formmixin import ProfileFormMixin, chain_ready_hook, ready_with_notice
from .hardenmixin import HardeningMixin
from .labguard import LabGuardMixin
from .logs import install_refusal_filter
from .names import check_prefix, container_name
from .recovery import RecoveryMixin
from .runtime import LabRuntime


class GPUDockerSpawner(
    ProfileFormMixin, RecoveryMixin, LabGuardMixin, HardeningMixin, SliceSpawnerCore, DockerSpawner
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

    shm_size = Unicode(
        "1GiB",
        config=True,
        help="""Size of every container's ``/dev/shm`` (Docker's default is 64 MiB): PyTorch's
        DataLoader workers pass batches through shared memory and fail with "bus error" in 64
        MiB. Bytes or ``"1GiB"``, ``"2G"``; a profile's ``shm_size`` overrides it. Shared memory
        that is used counts against the container's ``mem_limit``. Default ``"1GiB"``.

        ``c.GPUDockerSpawner.shm_size = "2GiB"``
        """,
    )

    @validate("shm_size")
    def _check_shm_size(self, proposal):
        try:
            parse_bytes(proposal.value, "shm_size")
        except UnitError as e:
            raise ValueError(f"c.GPUDockerSpawner.shm_size: {e}; write e.g. '1GiB'") from None
        return proposal.value

    #: ``{image: (read at, labels)}``: image labels change only with a rebuild, and the form
    #: asks for every profile's at each render.
    _label_cache: dict[str, tuple[float, dict | None]] = {}
    LABEL_CACHE_S = 30

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        install_refusal_filter(self.log, app_log)  # app_log: JupyterHub's User.spawn

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

    # -- form; options and the saved choice are in formmixin.py ------------------------------

    @default("options_form")
    def _default_options_form(self):
        return self._render_options_form

    @default("options_from_form")
    def _default_options_from_form(self):
        return self._options_from_form

    @default("progress_ready_hook")
    def _default_progress_ready_hook(self):
        return ready_with_notice

    @validate("progress_ready_hook")
    def _check_progress_ready_hook(self, proposal):
        # an admin's own hook is kept, and the user still hears about their saved choice
        return chain_ready_hook(proposal.value)

    @default("apply_user_options")
    def _default_apply_user_options(self):
        # user_options ({"profile": slug}) are validated and applied in start(), where a refusal
        # keeps its own HTTP status and is recorded for the admin page.
        return lambda spawner, user_options: None

    # -- state: in core.py; the container's name ------------------------------------------

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

    @default("prefix")
    def _default_prefix(self):
        return "jupyter"

    @validate("prefix")
    def _check_prefix(self, proposal):
        return check_prefix(proposal.value)

    def _object_name_default(self):
        """Deterministic, DNS-safe, <= 63 characters, unique per (user, server): see names.py."""
        return container_name(self.prefix, self.user.name, self.name or "")

    @default("object_name")
    def _default_object_name(self):
        return self._object_name_default()

    # -- the backend (core.py) ----------------------------------------------------------------

    async def _start_object(self, rt: LabRuntime, profile: Profile):
        if self.object_type != "container":
            raise NotImplementedError(
                f"{type(self).__name__} attaches GPU slices to Docker containers only, not to "
                f"{self.object_type}s"
            )
        self.image = profile.image
        base = self._base_limits()
        self.mem_limit = profile.mem_limit if profile.mem_limit is not None else base["mem_limit"]
        self.cpu_limit = profile.cpu_limit if profile.cpu_limit is not None else base["cpu_limit"]
        self._emit(50, f"Creating container {self.object_name}")
        return await super(SliceSpawnerCore, self).start()  # DockerSpawner's, which the core wraps

    async def _discard_object(self) -> None:
        if self.object_id:
            try:
                await self.remove_object()
            except Exception:
                self.log.warning("Could not remove the container of a failed start", exc_info=True)
            self.object_id = ""

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

    def _base_limits(self) -> dict:
        if not hasattr(self, "_base"):
            self._base = {"mem_limit": self.mem_limit, "cpu_limit": self.cpu_limit}
        return self._base

    def get_env(self):
        env = super().get_env()
        profile_env = dict(self._current_profile.env) if self._current_profile else {}
        need = self._current_need
        protected = ct.slice_env(
            self._current_slice, mps=self.mps, framework_cap=bool(need and need.seat_cap)
        )
        return ct.merge_env(env, profile_env, self.gpulab_env(), protected=protected)

    def docker(self, method, *args, **kwargs):
        # The one seam where gpulab's device request and labels join the container, after
        # DockerSpawner has rendered its templates (so user-controlled names are never templated).
        if method == "create_container":
            self._attach_slice(kwargs, self._current_slice)
        return super().docker(method, *args, **kwargs)

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
        if profile is not None and profile.shm_size:
            host_config["ShmSize"] = profile.shm_size
        elif not host_config.get("ShmSize"):  # an admin's extra_host_config shm_size stays
            host_config["ShmSize"] = parse_bytes(self.shm_size, "shm_size")
        kwargs["labels"] = {
            **(kwargs.get("labels") or {}),
            **ct.labels(
                allocation_id=self.allocation_id,
                user=self.user.name,
                server_name=self.name or "",
                profile=self.profile_slug,
                slice_id=s.id if s else None,
                node=rt.lab.node,
                lab=rt.identity.uuid,
                lab_name=rt.identity.name,
            ),
        }

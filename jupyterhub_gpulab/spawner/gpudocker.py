"""``GPUDockerSpawner``: a DockerSpawner whose containers each hold one GPU slice from the ledger.

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
"""

from __future__ import annotations

import asyncio
from typing import NamedTuple

from dockerspawner import DockerSpawner
from tornado.log import app_log
from traitlets import Bool, Integer, Unicode, default, validate

from .. import clock
from ..errors import ConfigError, SpawnRefused
from ..fairuse.quota import budget_window, check_spawn
from ..lab.config import GPULab
from ..lab.policy import Entitlement, PolicyContext
from ..lab.profile import Profile
from ..lab.profiles import entitled_in
from ..lab.traits import ChoiceEnum, Duration
from ..ledger import Claim, LedgerRefusal
from . import container as ct
from .formmixin import ProfileFormMixin, chain_ready_hook, ready_with_notice
from .hardenmixin import HardeningMixin
from .labguard import LabGuardMixin
from .logs import install_refusal_filter
from .names import check_prefix, container_name
from .recovery import RecoveryMixin
from .runtime import LabRuntime, get_runtime


class _Asker(NamedTuple):
    """Who asks for a server, read from the hub's objects on the event loop so that code running
    in a thread never touches JupyterHub's database session."""

    user: str
    server_name: str
    log_name: str
    groups: frozenset[str]
    is_admin: bool


class GPUDockerSpawner(
    ProfileFormMixin, RecoveryMixin, LabGuardMixin, HardeningMixin, DockerSpawner
):
    """Spawn each user's server in a Docker container holding one GPU slice (or none, for a
    CPU profile), confined (:mod:`..hardening`). Profiles, inventory, policies and the ledger
    come from ``c.GPULab``."""

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

    mps = Bool(
        False,
        config=True,
        help="""The host runs an NVIDIA MPS control daemon shared with the containers: shared seats
        then get hard caps (``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``,
        ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``). Without it seats are soft (allow-growth only) and
        the pages say so.""",
    )

    reconcile_interval = Duration(
        60,
        positive=True,
        config=True,
        help="""Seconds between passes of the continuous reconcile, which closes every allocation
        whose server is neither running nor starting (a hub killed mid-spawn, a stop that lost
        track) and removes this lab's containers that hold no open allocation. A pass reads the
        ledger once and lists the engine's containers once (a few ms). Default 60.

        ``c.GPUDockerSpawner.reconcile_interval = 60``
        """,
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        install_refusal_filter(self.log, app_log)  # app_log: JupyterHub's User.spawn

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

    # -- state ----------------------------------------------------------------------------------
    allocation_id = Integer(None, allow_none=True)
    profile_slug = Unicode("")
    last_profile = Unicode("")
    slice_id = Unicode("")

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

    # -- lab ------------------------------------------------------------------------------------

    _events: list[dict]
    _start_done: bool = True
    #: True from the start of start() until a container is asked for: a refused spawn made none,
    #: so poll() answers without the engine (see poll()).
    _no_container: bool = False
    _current_profile: Profile | None = None
    _current_slice = None

    _runtime: LabRuntime | None = None

    def runtime(self) -> LabRuntime:
        """The process's lab runtime; on the hub's loop, also makes sure its reconcile runs."""
        if self._runtime is None:
            self._runtime = self._load_runtime()
        self._start_reconciler(self._runtime)
        return self._runtime

    def _load_runtime(self) -> LabRuntime:
        try:
            return get_runtime(GPULab(config=self.config))
        except ConfigError as e:
            self.log.error("gpulab configuration is invalid:\n%s", e)
            raise SpawnRefused(
                "The GPU lab is misconfigured, so no server can start. An administrator has "
                "been told (hub log); please try again later.",
                reason="misconfigured",
                log_message=str(e),
            ) from None

    def _groups(self) -> set[str]:
        return {g.name for g in self.user.groups}

    def policy_context(self, rt: LabRuntime | None = None) -> PolicyContext:
        """This user's standing under the lab's policies; computed once per request."""
        rt = rt or self.runtime()
        return PolicyContext.for_user(self._groups(), bool(self.user.admin), rt.lab)

    def entitled(
        self, rt: LabRuntime | None = None, ctx: PolicyContext | None = None
    ) -> tuple[Profile, ...]:
        rt = rt or self.runtime()
        return entitled_in(rt.lab.profiles, ctx or self.policy_context(rt))

    # -- state ----------------------------------------------------------------------------------

    def load_state(self, state):
        super().load_state(state)
        self.allocation_id = state.get("gpulab_allocation")
        self.profile_slug = state.get("gpulab_profile", "")
        self.slice_id = state.get("gpulab_slice", "")
        self.last_profile = state.get("gpulab_last_profile", "") or self.last_profile
        if self.profile_slug and not self.user_options:
            # a running server after a hub restart: JupyterHub's saved options were cleared
            # (formmixin.py), and the server model (read by the culler) shows what it runs
            self.user_options = {"profile": self.profile_slug}

    def get_state(self):
        state = super().get_state()
        if self.allocation_id is not None:
            state["gpulab_allocation"] = self.allocation_id
        if self.profile_slug:
            state["gpulab_profile"] = self.profile_slug
        if self.slice_id:
            state["gpulab_slice"] = self.slice_id
        if self.last_profile:
            # kept across stops: an admin starting this server later gets the same profile
            state["gpulab_last_profile"] = self.last_profile
        return state

    def clear_state(self):
        super().clear_state()
        self.allocation_id = None
        self.profile_slug = ""
        self.slice_id = ""

    # -- progress -------------------------------------------------------------------------------

    def _emit(self, progress: int, message: str) -> None:
        self._events.append({"progress": progress, "message": message})
        self.log.info("%s: %s", self._log_name, message)

    async def progress(self):
        """Real steps of this start: profile, slice reserved, container created, started."""
        i = 0
        while True:
            events = getattr(self, "_events", [])
            while i < len(events):
                yield events[i]
                i += 1
            if self._start_done:
                return
            await asyncio.sleep(0.2)

    # -- start ----------------------------------------------------------------------------------

    def _asker(self) -> _Asker:
        return _Asker(
            self.user.name,
            self.name or "",
            self._log_name,
            frozenset(self._groups()),
            bool(self.user.admin),
        )

    def _record_refusal(
        self, rt: LabRuntime, who: _Asker, profile: str | None, err: SpawnRefused
    ) -> None:
        """Log a refusal and record it for the admin page (blocks: writes the ledger)."""
        self.log.info(
            "Refused spawn of %s (%s): %s",
            who.log_name,
            err.reason,
            err.log_message or err.message,
        )
        try:
            rt.ledger.record_refusal(who.user, profile, err.reason, err.message)
        except Exception:
            self.log.exception("Could not record a refused spawn")

    async def _refuse(self, rt: LabRuntime, profile: str | None, err: SpawnRefused) -> None:
        await asyncio.to_thread(self._record_refusal, rt, self._asker(), profile, err)

    async def start(self):
        self._events = []
        self._start_done = False
        self._stopped_during_start = False
        self.choice_notice = None
        self._forget_saved_options()
        self._no_container = True
        claim: Claim | None = None
        try:
            rt = self.runtime()
            slug = None
            try:
                ctx = self.policy_context(rt)
                profile = self._pick_profile(rt, ctx)
                slug = profile.slug
                ent = ctx.entitlement(profile)
            except SpawnRefused as e:
                await self._refuse(rt, slug, e)
                raise
            self.user_options = {"profile": profile.slug}  # what the server model shows
            self._emit(10, f"Profile: {profile.display_name}")
            if self.choice_notice:
                self._events.append({"progress": 10, "message": self.choice_notice})
            if profile.wants_gpu:
                # One trip to a thread for the budget, the claim and a refusal's record: under a
                # burst every extra await queues behind the hub's own work for the other spawns.
                claim = await asyncio.to_thread(self._reserve, rt, profile, ctx, ent, self._asker())
                self.allocation_id = claim.allocation.id
                self.slice_id = claim.slice.id
                self._emit(30, f"Reserved {claim.slice.explain(self.mps)}")
            else:
                self._emit(30, "No GPU for this profile (CPU only)")
            return await self._start_container(rt, profile, claim)
        finally:
            self._start_done = True

    def _reserve(
        self, rt: LabRuntime, profile: Profile, ctx: PolicyContext, ent: Entitlement, who: _Asker
    ) -> Claim:
        """Check the GPU-hour budget, then claim a slice (blocks: runs in a thread).

        A refusal is recorded before it is raised: :class:`SpawnRefused` with reason ``quota``
        (budget spent, or the user's or group's slice limit) or ``no-free-slice``.
        """
        budget = self._budget_refusal(rt, profile, ctx, who)
        if budget:
            err = SpawnRefused(budget, reason="quota")
            self._record_refusal(rt, who, profile.slug, err)
            raise err
        try:
            return rt.ledger.claim(
                profile.slice,
                user=who.user,
                profile=profile.slug,
                server_name=who.server_name,
                node=rt.lab.node,
                user_limit=ent.user_limit,
                charge_groups=ent.charge_groups,
            )
        except LedgerRefusal as e:
            reason = "quota" if e.reason == "quota" else "no-free-slice"
            err = SpawnRefused(e.message, reason=reason)
            self._record_refusal(rt, who, profile.slug, err)
            raise err from None

    def _budget_refusal(
        self, rt: LabRuntime, profile: Profile, ctx: PolicyContext, who: _Asker
    ) -> str | None:
        """The GPU-hour budget's refusal, or ``None`` (blocks: reads the ledger)."""
        now = clock.utcnow()
        start = budget_window(ctx, now)
        if start >= now:
            return None  # no budget applies to this user
        allocations = rt.ledger.allocations_between(start, now, user=who.user)
        return check_spawn(who.user, ctx, allocations, now, profile=profile)

    async def _claim(self, rt: LabRuntime, profile: Profile, **limits) -> Claim:
        """Claim a slice for this server in a thread (the ledger is synchronous)."""
        return await asyncio.to_thread(
            rt.ledger.claim,
            profile.slice,
            user=self.user.name,
            profile=profile.slug,
            server_name=self.name or "",
            node=rt.lab.node,
            **limits,
        )

    async def _start_container(self, rt: LabRuntime, profile: Profile, claim: Claim | None):
        self._current_profile = profile
        self._current_slice = claim.slice if claim else None
        self.profile_slug = profile.slug
        self.last_profile = profile.slug
        self.image = profile.image
        base = self._base_limits()
        self.mem_limit = profile.mem_limit if profile.mem_limit is not None else base["mem_limit"]
        self.cpu_limit = profile.cpu_limit if profile.cpu_limit is not None else base["cpu_limit"]
        try:
            self._no_container = False
            self._emit(50, f"Creating container {self.object_name}")
            result = await super().start()
            if claim is not None:
                if self._stopped_during_start:
                    raise RuntimeError("the server was stopped while it was starting")
                await asyncio.to_thread(
                    rt.ledger.set_container, claim.allocation.id, self.object_id, self.object_name
                )
            self._emit(90, "Container started; waiting for the server to answer")
            return result
        except BaseException as e:
            await self._release(rt, "failed")
            if self.object_id:
                try:
                    await self.remove_object()
                except Exception:
                    self.log.warning(
                        "Could not remove the container of a failed start", exc_info=True
                    )
                self.object_id = ""
            if isinstance(e, Exception) and ct.is_gpu_runtime_missing(str(e)):
                err = SpawnRefused(
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
                self.log.error(err.log_message)
                await self._refuse(rt, profile.slug, err)
                raise err from None
            raise

    def _base_limits(self) -> dict:
        if not hasattr(self, "_base"):
            self._base = {"mem_limit": self.mem_limit, "cpu_limit": self.cpu_limit}
        return self._base

    def get_env(self):
        env = super().get_env()
        profile_env = dict(self._current_profile.env) if self._current_profile else {}
        return ct.merge_env(
            env, profile_env, protected=ct.slice_env(self._current_slice, mps=self.mps)
        )

    def docker(self, method, *args, **kwargs):
        # The one seam where gpulab's device request and labels join the container, after
        # DockerSpawner has rendered its templates (so user-controlled names are never templated).
        if method == "create_container":
            s = self._current_slice
            rt = self.runtime()
            host_config = kwargs.setdefault("host_config", {})
            requests = ct.device_requests(s, self.attach_mode)
            host_config["DeviceRequests"] = requests or None
            host_config.update(
                self.hardening_for(self._current_profile, host_config.get("SecurityOpt") or ())
            )
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
        return super().docker(method, *args, **kwargs)

    # -- stop / poll ----------------------------------------------------------------------------

    async def poll(self):
        """``0`` (not running) at once for a start that was refused before any container was
        asked for, else :meth:`RecoveryMixin.poll` (which asks the engine).

        JupyterHub polls every failed start before answering it. DockerSpawner runs every engine
        call on one shared thread, so under a burst each refusal would queue behind the winners'
        container creates and starts (seconds); a refusal must not wait for slow work it did not
        cause.
        """
        if self._no_container and not self.object_id:
            return 0
        return await super().poll()

    async def _release(self, rt: LabRuntime | None, reason: str, aid: int | None = None) -> None:
        aid = self.allocation_id if aid is None else aid
        if aid is None:
            return
        rt = rt or self.runtime()
        closed = await asyncio.to_thread(rt.ledger.release, aid, reason)
        if closed:
            self.log.info("Released allocation %d of %s (%s)", aid, self._log_name, reason)
        self.allocation_id = None
        self.slice_id = ""

    async def stop(self, now=False):
        self._stopped_during_start = True
        aid = self.allocation_id  # DockerSpawner.stop() clears the state
        try:
            await super().stop(now=now)
        finally:
            await self._release(None, "stopped", aid)

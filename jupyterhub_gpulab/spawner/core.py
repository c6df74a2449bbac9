"""The backend-neutral half of the spawner: what a server's start, stop and poll do with the lab.

:class:`SliceSpawnerCore` holds everything that does not depend on how a server runs: the
profile choice, entitlement and policy, the GPU-hour budget, the claim and its release on every
exit path, the progress events, the state, re-adoption of a running server whose allocation was
closed (and adoption after a lost state), the start of the process's reconcile. It knows no Docker
container: a *backend* supplies the server's object (:class:`~.gpudocker.GPUDockerSpawner`: Docker).

A backend implements (the core calls them, in this order for a start):

- :meth:`_start_object` ``(rt, profile) -> (ip, port)``: create and start the object holding
  ``self._current_slice`` (set by the core before), setting ``object_id`` / ``object_name``;
- :meth:`_attach_slice` ``(create_kwargs, slice)``: put the slice (or none) and the lab's labels
  into the backend's create request (its create path calls it: :mod:`.backendbase`);
- :meth:`_discard_object` ``()``: remove what a failed start left;
- :meth:`_list_lab_objects` ``() -> [LabObject]``, :meth:`_remove_object` ``(id)``: this lab's
  labelled objects, in any state, and their removal, for the reconcile (:mod:`.reconcile`);
- optionally :meth:`_start_refusal` ``(exc)`` (a failed start's refusal for the user),
  :meth:`_image_labels` ``(image)`` (so no slice is claimed whose GPU cannot run the image:
  :mod:`..lab.images`), :meth:`_claim_node` ``(rt)`` (the claims' node; ``None``: every node's, as
  on Swarm), and in ``poll()`` ``self._gone = (reason, message)`` (why the object is gone);

and the Spawner's own ``poll()`` / ``stop()`` (the core wraps them), ``object_id`` and
``object_name``, and the form's ``_pick_profile``. A concrete class
leaving any out is refused when defined (``TypeError`` naming them): a backend that cannot attach
a slice must never start a server with nothing attached, nor a start fail after its claim.
"""

from __future__ import annotations

import asyncio
import logging

from jupyterhub.spawner import Spawner
from traitlets import Bool, HasTraits, Integer, TraitError, Unicode

from ..errors import ConfigError, SpawnRefused
from ..hub import hublog, metrics
from ..lab.images import ImageRequirements
from ..lab.policy import PolicyContext
from ..lab.profile import Profile
from ..lab.profiles import entitled_in
from ..lab.traits import Duration
from ..ledger import Allocation, Claim, aio
from .adoption import AdoptionMixin
from .configcheck import RefusedSettingsMixin
from .imagegate import ImageMixin
from .labobject import LabObject
from .objectspec import ObjectSpecMixin
from .reserve import ReservationMixin
from .runtime import LabRuntime, runtime_for

#: What a backend supplies, in place of the core's refusals (module docstring).
BACKEND_METHODS = (
    "_attach_slice",
    "_start_object",
    "_discard_object",
    "_list_lab_objects",
    "_remove_object",
)

#: What ``start()`` uses that neither the core nor JupyterHub's ``Spawner`` defines (a test reads
#: its source): the spawn form's choice (:mod:`.formmixin`), the object's names (DockerSpawner's).
START_USES = ("_pick_profile", "object_id", "object_name")


class SliceSpawnerCore(
    RefusedSettingsMixin, ReservationMixin, AdoptionMixin, ImageMixin, ObjectSpecMixin, HasTraits
):
    """Mixed in before the backend's Spawner class (e.g. DockerSpawner) in the MRO."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if not issubclass(cls, Spawner):
            return  # a mixin, not a spawner yet
        missing = [m for m in BACKEND_METHODS if getattr(cls, m) is getattr(SliceSpawnerCore, m)]
        if missing:
            raise TypeError(
                f"{cls.__name__} uses the gpulab spawner core without a backend for "
                f"{', '.join(missing)}: its servers would start with no GPU slice attached"
            )
        missing = [m for m in START_USES if not hasattr(cls, m)]
        if missing:
            raise TypeError(
                f"{cls.__name__} uses the gpulab spawner core without {', '.join(missing)}, "
                "which its start() needs (ProfileFormMixin: the spawn form's choice; the "
                "backend's Spawner: the server's object_id and object_name)"
            )

    # -- the backend (module docstring) ---------------------------------------------------------

    def _attach_slice(self, create_kwargs: dict, slice) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot attach a GPU slice")

    async def _start_object(self, rt: LabRuntime, profile: Profile):
        raise NotImplementedError(f"{type(self).__name__} cannot start a server")

    async def _discard_object(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot remove a failed start's object")

    async def _list_lab_objects(self) -> list[LabObject]:
        raise NotImplementedError(f"{type(self).__name__} cannot list its servers' objects")

    async def _remove_object(self, object_id: str) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot remove an object")

    def _start_refusal(self, exc: BaseException) -> SpawnRefused | None:
        """The refusal a failed start becomes for the user (logged, recorded), or ``None``."""
        return None

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
        ``c.GPUDockerSpawner.reconcile_interval = 60``""",
    )

    # -- state ----------------------------------------------------------------------------------
    allocation_id = Integer(None, allow_none=True)
    profile_slug = Unicode("")
    last_profile = Unicode("")
    slice_id = Unicode("")

    # -- lab ------------------------------------------------------------------------------------
    _events: list[dict]
    _start_done: bool = True
    #: True from start() until a container is asked for: poll() answers a refusal engine-free
    _no_container: bool = False
    #: set by the backend's lookup when it removed an object that was not this server's
    _removed_foreign: bool = False
    #: set by the backend's poll when its object is gone for a reason of its own: ``(end
    #: reason, message for the user or None)``, e.g. ``("node-lost", "Your server was …")``
    _gone: tuple[str, str | None] | None = None
    #: ``(id, Allocation or None)`` the backend's lookup read for its object's labels: poll() reuses it
    _allocation_read: tuple[int, Allocation | None] | None = None
    _current_profile: Profile | None = None
    _current_slice = None
    _current_need: ImageRequirements | None = None
    _runtime: LabRuntime | None = None

    def runtime(self) -> LabRuntime:
        """The process's lab runtime; on the hub's loop, also makes sure its reconcile runs."""
        if self._runtime is None:
            self._runtime = self._load_runtime()
        self._start_reconciler(self._runtime)
        return self._runtime

    def _start_reconciler(self, rt: LabRuntime) -> None:
        """Start the process's reconcile on the running loop; no-op outside a hub (no
        ``app.users``) or outside the event loop's thread."""
        users = (getattr(getattr(self, "user", None), "settings", None) or {}).get("users")
        if users is None:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        rt.start_reconciler(
            node=self._claim_node(rt),
            list_objects=self._list_lab_objects,
            remove_object=self._remove_object,
            users=users.values,
            interval_s=self.reconcile_interval,
            log=self.log,
        )

    def _load_runtime(self) -> LabRuntime:
        hublog.log_through()  # the lab's module loggers write through the hub's log
        try:
            return runtime_for(self.config)
        except (ConfigError, TraitError) as e:
            self._misconfigured(
                SpawnRefused(
                    "The GPU lab is misconfigured, so no server can start. An administrator has "
                    "been told (hub log); please try again later.",
                    reason="misconfigured",
                    log_message=f"gpulab configuration is invalid:\n{e}",
                )
            )

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

    def _claim_node(self, rt: LabRuntime) -> str | None:
        """The node a claim's allocation is on: this hub's (one Docker host); ``None`` for a
        backend that runs servers on every node, where the slice's node is the allocation's."""
        return rt.lab.node

    # -- progress -------------------------------------------------------------------------------

    def _emit(self, progress: int, message: str, *, info: bool = False) -> None:
        """A progress event, logged at DEBUG, or INFO for a start's one line of its own (the
        slice reserved, or none): each line is a write on the hub's one loop."""
        self._events.append({"progress": progress, "message": message})
        self.log.log(logging.INFO if info else logging.DEBUG, "%s: %s", self._log_name, message)

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

    async def start(self):
        self._events = []
        self._start_done = False
        self._stopped_during_start = False
        self.choice_notice = None
        self._no_container = True
        self._current_need = None
        claim: Claim | None = None
        slug, outcome = None, "failure"
        try:
            refused = self._settings_refusal()
            if refused is not None:
                self._misconfigured(refused)
            rt = self.runtime()
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
                need = self._current_need = await self.image_requirements(profile)
                claim = await self._claim_slice(rt, profile, ctx, ent, self._asker(), need)
                self.allocation_id = claim.allocation.id
                self.slice_id = claim.slice.id
                where = claim.slice.explain(self.mps, need.seat_cap)
                self._emit(30, f"Reserved {where}", info=True)
            else:
                self._emit(30, "No GPU for this profile (CPU only)", info=True)
            result = await self._launch(rt, profile, claim)
            outcome = "success"
            return result
        except SpawnRefused:
            outcome = "refused"
            raise
        finally:
            self._start_done = True
            metrics.spawn_finished(slug or self._asked_slug(), outcome)

    def _asked_slug(self) -> str | None:
        """The profile slug this start asked for when it is one of the lab's, else ``None``: the
        metrics label of a choice refused before it became the profile (never a user's text)."""
        asked = (self.user_options or {}).get("profile")
        rt = self._runtime
        if rt is None or not isinstance(asked, str):
            return None
        return asked if rt.lab.profile(asked) is not None else None

    async def _launch(self, rt: LabRuntime, profile: Profile, claim: Claim | None):
        """Start the backend's object holding ``claim``'s slice; on any failure (cancellation
        included) release the allocation, remove what was made, and raise."""
        self._current_profile = profile
        self._current_slice = claim.slice if claim else None
        self.profile_slug = profile.slug
        self.last_profile = profile.slug
        try:
            self._no_container = False
            result = await self._start_object(rt, profile)
            if claim is not None:
                if self._stopped_during_start:
                    raise RuntimeError("the server was stopped while it was starting")
                record = (claim.allocation.id, self.object_id, self.object_name)
                await aio.write_batched(rt.ledger, rt.ledger.set_containers, record)
            kind = getattr(self, "object_type", "container").title()
            self._emit(90, f"{kind} started; waiting for the server to answer")
            return result
        except BaseException as e:
            await self._release(rt, "failed")
            await self._discard_object()
            err = self._start_refusal(e) if isinstance(e, Exception) else None
            if err is not None:
                self.log.error(err.log_message)
                await self._refuse(rt, profile.slug, err)
                raise err from None
            raise

    # -- stop / poll ----------------------------------------------------------------------------

    async def poll(self):
        """``0`` at once for a start refused before any container was asked for (JupyterHub
        polls every failed start; under a burst a refusal must not queue behind the winners'
        engine calls); ``None`` while this process's ``start()`` is in flight (JupyterHub polls a
        start slower than ``slow_spawn_timeout``: ``benchmarks/scale.py``); else the backend's
        poll: an object gone or exited releases its allocation, a running one whose allocation
        was closed elsewhere is re-adopted (:meth:`_readopt`). One ledger read: the lookup's."""
        if not self._start_done:
            return None
        if self._no_container and not self.object_id:
            return 0
        rt = self.runtime()
        self._removed_foreign = False
        self._gone = None
        self._allocation_read = None
        status = await super().poll()
        if status is not None:
            if self._removed_foreign:
                reason = "container-mismatch"
            elif self._gone is not None:
                reason = self._gone[0]
            else:
                reason = "container-gone" if status == 0 else "exited"
            if self._gone is not None and self._gone[1] and self.allocation_id is not None:
                await self._notify_gone(rt, reason, self._gone[1])
            await self._release(rt, reason)
            return status
        if self.allocation_id is not None:
            aid, a = self._allocation_read or (None, None)  # the lookup's read, this poll
            if aid != self.allocation_id:
                a = await aio.call(rt.ledger.get, self.allocation_id)
            if a is not None and not a.open:
                return await self._readopt(rt)
        return status

    async def _release(self, rt: LabRuntime | None, reason: str, aid: int | None = None) -> None:
        aid = self.allocation_id if aid is None else aid
        if aid is None:
            return
        rt = rt or self.runtime()
        closed = await aio.write(rt.ledger, rt.ledger.release, aid, reason)
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

"""One lab through the term, on one demand: :meth:`Simulation.run` returns what it measured.

Every decision of a gpulab lab is the product's own code, called as the product calls it:

- **spawns**: :meth:`.hubsim.TermSpawner.start` (profile choice, entitlement, image needs, then
  the spawner core's ``_reserve``: GPU-hour budget, the ledger's claim with reservations, the
  waitlist's queue gate and held offers); a refused user joins the queue through the queue
  API's :func:`~jupyterhub_gpulab.service.web.queueapi.join_queue`;
- **the culler**: the service's :class:`~jupyterhub_gpulab.service.culling.Culler` and its
  ``run_pass`` (``cullplan.plan``, preemption, ``rounds.cull_round``, warnings in the ledger,
  the stop through :class:`~jupyterhub_gpulab.hubapi.stopper.ServerStopper`, the end reason
  ``culled:<rule>``), built from a default :class:`~jupyterhub_gpulab.service.app.GPULabService`
  (its own ``cull_every``, ``cull_warn_before``, ``max_sample_gap``, ``gpu_idle_threshold``,
  ``preempt_min_idle``), every ``cull_every``;
- **the waitlist**: the service's :class:`~jupyterhub_gpulab.service.waitlist.WaitlistKeeper`
  ``run_pass`` (lapse, offer, policy and budget re-checked, image needs), every minute (the
  service's ``waitlist_every`` is 15 s: the term's resolution is a minute);
- **reservations**: each section's course record booked by ``courses.reserve.book_course``;
- **the interaction report** (``signal``, ``all``): each minute its user is at the keyboard, a
  server's JupyterLab extension reports that minute to the service's
  :class:`~jupyterhub_gpulab.service.presence.Presence`, which the culler's pass reads;
- **Keep, Move to CPU, the MIG layout schedule**: the service's ``keep_server``,
  ``move_to_cpu`` and ``LayoutKeeper`` pass (``layoutplan.decide``), every minute
  (:mod:`.levers`: what a user does with a warning, and the one stand-in, NVML's re-lay).

The ledger stamps simulated time through ``jupyterhub_gpulab.clock.utcnow`` (the one time seam).
Plain JupyterHub (``static``, ``plain``) takes the first free GPU of the server's kind and culls
with :func:`.stock.idle_culler_stops`. The users are :mod:`.demand`'s model.
"""

from __future__ import annotations

import asyncio
import heapq
import random
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from jupyterhub_gpulab import clock
from jupyterhub_gpulab.courses.reserve import book_course
from jupyterhub_gpulab.errors import SpawnRefused
from jupyterhub_gpulab.fairuse.offers import spent_now
from jupyterhub_gpulab.inventory.model import Utilization
from jupyterhub_gpulab.lab.policy import PolicyContext
from jupyterhub_gpulab.ledger import LedgerRefusal
from jupyterhub_gpulab.service.app import GPULabService
from jupyterhub_gpulab.service.culling import Culler
from jupyterhub_gpulab.service.waitlist import WaitlistKeeper
from jupyterhub_gpulab.service.web.queueapi import join_queue
from jupyterhub_gpulab.spawner.runtime import LabRuntime

from .demand import PATIENCE, RESEARCHERS, TERM_START, Intent, sections, student_runs
from .figures import figures
from .hubsim import SimHub, SimState, TermSpawner
from .labs import NODE, SPARE, UTC, LabSpec, gpulab_config, section_course
from .levers import TermLayouts, react
from .stock import idle_culler_stops

HUB_ACTIVITY_MIN = 5  # JupyterHub.last_activity_interval (``hub_activity``)
KEYBOARD_MIN = 5  # a cull "at the keyboard": its user active in the last 5 minutes
BUSY, IDLE = 60.0, 0.0  # percent (``utilisation_samples``)


@dataclass
class Live:
    """A running server: its intent's timeline in minutes, and the hub's view of it."""

    intent: Intent
    key: tuple[str, str]
    alloc: object
    start: int
    slug: str
    present_until: int = 0
    tab_until: int = 0
    run_until: int = 0
    runs: list = field(default_factory=list)
    busy_until: int = 0
    active_at: int = 0
    hub_activity: int = 0

    def busy(self, t: int) -> bool:
        if self.busy_until > t or self.present_until <= t < self.run_until:
            return True
        return any(s <= t < e for s, e in self.runs)

    def active(self, t: int) -> bool:
        """Activity as the hub counts it: an open tab or a running kernel."""
        return t < self.tab_until or self.busy(t)


class InlineExecutor(ThreadPoolExecutor):
    """The loop's executor for the term: ``ledger.aio.call``'s work runs at once in the loop's
    thread (the same calls in the same order; a term has one actor at a time, and a thread hop
    per ledger call would make the term's minute-by-minute loop wait on the GIL)."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        f: Future = Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except BaseException as err:  # noqa: BLE001 - handed to the awaiting caller
            f.set_exception(err)
        return f


class Simulation:
    """One lab (``spec``) through ``weeks`` on ``intents`` (copied), ledger at ``db_url``."""

    def __init__(self, spec: LabSpec, intents, seed, db_url, weeks, layout, warning_seen):
        self.spec, self.weeks, self.warning_seen = spec, weeks, warning_seen
        self.rng = random.Random(seed)
        self.intents = [replace(q, runs=list(q.runs)) for q in intents]
        self.attempts = [(q.at, q.id, q) for q in self.intents]
        heapq.heapify(self.attempts)
        self.seq = len(self.intents) + 1
        self.now = TERM_START
        clock.utcnow = lambda: self.now  # the one time seam: the ledger stamps simulated time
        self.rt = LabRuntime(gpulab_config(spec, db_url, *layout))
        self.ledger = self.rt.ledger
        self.groups: dict[str, list[str]] = {r: ["researchers"] for r in RESEARCHERS}
        for group, day, hour, roster in sections():
            for user in roster:
                self.groups[user] = ["students", group]
            if spec.reservations:
                book_course(
                    self.ledger, section_course(group, day, hour, weeks),
                    self.rt.lab.profile("student-1g"), now=TERM_START, tz=UTC,
                    horizon_days=7 * weeks + 7,
                )  # fmt: skip
        self.live: dict[tuple[str, str], Live] = {}
        self.by_user: dict[str, Live] = {}
        self.samples: dict[str, deque] = {}
        self.waiting: dict[str, list[Intent]] = {}
        self.stopped: dict[tuple[str, str], Live] = {}
        self.m = dict.fromkeys(
            ("held", "idle_held", "present_idle", "culls", "culled_at_keyboard", "preemptions",
             "budget_refusals", "budget_culls", "reused", "doubles", "minutes", "idle_minutes",
             "warnings", "warnings_at_keyboard", "keeps", "keeps_refused", "moved_to_cpu",
             "relayouts", "layout_stops", "research_on_mig", "cpu_starts"), 0,
        )  # fmt: skip
        self.cull_rules: dict[str, int] = {}
        self.keyboard_rules: dict[str, int] = {}  # the culls at the keyboard, by rule
        # the service's own defaults, with the lab's levers
        spare = SPARE["s"] if spec.spare else 0
        self.settings = GPULabService(
            preemption=spec.priority,
            gpu_idle_spare_active=spare,
            gpu_idle_spare_longest=SPARE["longest"],
        )
        self.layouts = None
        if spec.stock is None:
            self.hub = SimHub(self)
            self.state = SimState(self.rt, self.history)
            self.spawner = TermSpawner(self.rt)
            self.culler = Culler(self.state, self.hub, self.settings)
            self.keeper = WaitlistKeeper(self.state, self.hub, self.settings)
            self.cull_every = max(1, round(self.settings.cull_every / 60))
            self.layouts = TermLayouts(self) if spec.research_layout else None
        else:
            self.cull_every = spec.stock[1] // 60
        # samples kept per slice: the service's utilization_history at one a minute
        self.keep = round(self.settings.utilization_history / 60)

    # -- what the service reads ---------------------------------------------------------

    def _dt(self, minute: int) -> datetime:
        return TERM_START + timedelta(minutes=minute)

    def history(self, slice_id: str) -> tuple[Utilization, ...]:
        return tuple(self.samples.get(slice_id, ()))

    def user_models(self) -> list[dict]:
        """The hub's ``GET /users?state=active`` answer for the running servers."""
        users: dict[str, dict] = {}
        for (user, name), lv in self.live.items():
            u = users.setdefault(
                user, {"name": user, "admin": False, "groups": self.groups[user], "servers": {}}
            )
            u["servers"][name] = {
                "name": name, "ready": True, "pending": None, "url": f"/user/{user}/{name}",
                "started": self._dt(lv.start).isoformat(), "user_options": {"profile": lv.slug},
                "last_activity": self._dt(lv.hub_activity).isoformat(),
            }  # fmt: skip
        return list(users.values())

    def hub_stop(self, user: str, name: str) -> None:
        """The hub stops a server the service asked it to: the spawner releases its slice."""
        lv = self.live.get((user, name))
        if lv is not None:
            self._end(lv, "stopped")
            self.stopped[lv.key] = lv

    # -- spawning -----------------------------------------------------------------------

    def _push(self, minute: int, q: Intent) -> None:
        self.seq += 1
        heapq.heappush(self.attempts, (minute, self.seq, q))

    async def _spawn(self, q: Intent, minute: int) -> None:
        if q.served_at >= 0 and not q.respawn or q.gave_up or q.budget_refused:
            return
        user = q.user
        if user in self.by_user:
            if not q.respawn:  # their server still runs: they use it
                q.served_at = minute
                self.m["reused"] += 1
                self._extend(self.by_user[user], q, minute)
            return
        name = q.section if q.kind == "class" and self.spec.reservations else ""
        slug = self.spec.profile_for(q.kind)
        try:
            if self.spec.stock is None:
                claim, _ = self.spawner.start(user, name, slug, self.groups[user])
                alloc = claim.allocation
            else:  # plain JupyterHub: the first free GPU of the kind, nothing else
                profile = self.rt.lab.profile(slug)
                alloc = self.ledger.claim(
                    profile.slice, user=user, profile=slug, server_name=name, node=NODE
                ).allocation
        except (SpawnRefused, LedgerRefusal) as err:
            alloc = self._on_mig(q, user, name, err)
            if alloc is None:
                await self._refused(q, minute, slug, err)
                return
            slug = "research-mig"
        self._started(q, name, alloc, slug, minute)

    def _started(self, q: Intent, name: str, alloc, slug: str, minute: int) -> None:
        user = q.user
        if q.served_at < 0:
            q.served_at = minute
        for other in self.waiting.pop(user, []):
            if other.served_at < 0:
                other.served_at = minute
        if self.spec.waitlist:
            self.ledger.leave_waitlist(user)  # they started: they leave the queue page
        lv = Live(q, (user, name), alloc, minute, slug, active_at=minute, hub_activity=minute)
        self.samples.setdefault(alloc.slice_id, deque(maxlen=self.keep))
        self.live[lv.key] = lv
        self.by_user[user] = lv
        self._extend(lv, q, minute)

    def _on_mig(self, q: Intent, user: str, name: str, err=None):
        """A researcher refused a whole GPU (``err``), or queued for one (``err`` ``None``),
        chooses the MIG research profile (``mig-research``, ``layout``, ``all``): its
        allocation, or ``None``."""
        if q.kind != "research" or not self.spec.research_mig:
            return None
        if err is not None and getattr(err, "reason", "") != "no-free-slice":
            return None
        try:
            claim, _ = self.spawner.start(user, name, "research-mig", self.groups[user])
        except (SpawnRefused, LedgerRefusal):
            return None
        self.m["research_on_mig"] += 1
        return claim.allocation

    async def _refused(self, q: Intent, minute: int, slug: str, err) -> None:
        if isinstance(err, SpawnRefused) and err.reason == "quota":
            ctx = PolicyContext.for_user(self.groups[q.user], False, self.rt.lab)
            if spent_now(self.ledger, q.user, ctx, self.rt.lab.profile(slug)) is not None:
                self.m["budget_refusals"] += 1
                q.budget_refused = q.served_at < 0
                return
        if q.respawn:
            return
        if self.spec.waitlist and getattr(err, "reason", "") == "no-free-slice":
            model = {"name": q.user, "admin": False, "groups": self.groups[q.user]}
            await join_queue(self.state, model, slug)
            self.waiting.setdefault(q.user, []).append(q)
            return
        q.retries += 1
        if q.retries <= (2 if q.group == "students" else 16):
            self._push(minute + 15, q)
        else:
            q.gave_up = True

    def _extend(self, lv: Live, q: Intent, minute: int) -> None:
        lv.intent = q
        lv.present_until = minute + q.present
        lv.tab_until = lv.present_until + q.open_for
        lv.run_until = lv.present_until + q.run_after
        lv.runs = [(minute + s, minute + s + n) for s, n in q.runs]

    def _end(self, lv: Live, reason: str) -> None:
        del self.live[lv.key]
        del self.by_user[lv.key[0]]
        self.ledger.release(lv.alloc.id, reason)

    # -- each minute --------------------------------------------------------------------

    def _observe(self, minute: int) -> None:
        """Users' activity, utilisation samples, the hub's ``last_activity``, users' stops."""
        for lv in list(self.live.values()):
            busy = lv.busy(minute)
            if lv.active(minute):
                lv.active_at = minute
            if minute % HUB_ACTIVITY_MIN == 0:
                lv.hub_activity = lv.active_at
            self.samples[lv.alloc.slice_id].append(
                Utilization(BUSY if busy else IDLE, 2**30, at=self.now)
            )
            present = lv.present_until > minute
            if present and self.spec.signal:  # the page reports the keystrokes of the minute
                self.state.presence.report(*lv.key, self.now)
            share = lv.alloc.share
            self.m["held"] += share
            self.m["minutes"] += 1
            if not busy:
                self.m["idle_minutes"] += 1
                self.m["idle_held" if not present else "present_idle"] += share
            if not present and lv.intent.leave == "stop" and lv.run_until <= minute:
                self._end(lv, "stopped")

    def _at_keyboard(self, lv: Live, minute: int) -> bool:
        return lv.present_until > minute - KEYBOARD_MIN and lv.start < minute

    def _culled(self, lv: Live, rule: str, minute: int) -> None:
        self.m["culls"] += 1
        self.cull_rules[rule] = self.cull_rules.get(rule, 0) + 1
        self.m["preemptions"] += rule == "preempt"
        self.m["budget_culls"] += rule == "budget"
        if self._at_keyboard(lv, minute):
            self.m["culled_at_keyboard"] += 1
            self.keyboard_rules[rule] = self.keyboard_rules.get(rule, 0) + 1
            left = lv.present_until - minute
            if left >= 30 and rule in ("gpu-idle", "idle"):  # they start it again
                again = replace(lv.intent, present=left, respawn=True)
                again.runs = student_runs(self.rng, left)
                self._push(minute + 1, again)

    async def _cull(self, minute: int) -> None:
        if self.spec.stock is not None:
            timeout = self.spec.stock[0] // 60
            for lv in idle_culler_stops(self.live.values(), minute, timeout):
                self._end(lv, "stopped")
                self._culled(lv, "idle", minute)
            return
        report = await self.culler.run_pass()
        for d in report.decisions if report else ():
            lv = self.live.get((d.user, d.server_name)) or self.stopped.pop(
                (d.user, d.server_name), None
            )
            if lv is None:
                continue
            if d.action == "warn":
                self.m["warnings"] += 1
                if lv.present_until > minute:
                    self.m["warnings_at_keyboard"] += 1
                    acts = d.rule == "gpu-idle" and lv.key in self.live
                    if acts and await react(self, lv, minute) is not None:
                        continue  # kept (the culler's next pass honours it) or moved
                    if self.rng.random() < self.warning_seen:
                        lv.busy_until = minute + 5  # they run something on the GPU
            elif d.action == "cull":
                self._culled(lv, d.rule, minute)
        self.stopped.clear()

    async def _layouts(self, minute: int) -> None:
        """The service's layout pass; a holder it stops counts as a cull (rule ``mig-layout``)."""
        for done in await self.layouts.run_pass():
            self.m["relayouts"] += done.relaid == 0
            for key in done.stopped:
                lv = self.stopped.pop(tuple(key.split("/", 1)), None)
                if lv is not None:
                    self.m["layout_stops"] += 1
                    self._culled(lv, "mig-layout", minute)

    async def _waitlist(self, minute: int) -> None:
        for user, qs in list(self.waiting.items()):
            if all(minute >= q.at + PATIENCE[qs[0].group] for q in qs):
                self.ledger.leave_waitlist(user)
                for q in qs:
                    q.gave_up = q.served_at < 0
                del self.waiting[user]
        for user, qs in list(self.waiting.items()):  # a queued researcher sees a free instance
            alloc = self._on_mig(qs[0], user, "")
            if alloc is not None:
                self._started(qs[0], "", alloc, "research-mig", minute)
        for e in await self.keeper.run_pass():
            for q in self.waiting.get(e.user, [])[:1]:
                self._push(minute + 1, q)  # they see the banner and start within a minute

    async def run(self) -> dict:
        asyncio.get_running_loop().set_default_executor(InlineExecutor())
        end = self.weeks * 7 * 24 * 60
        for minute in range(end + 1):
            self.now = self._dt(minute)
            while self.attempts and self.attempts[0][0] <= minute:
                _, _, q = heapq.heappop(self.attempts)
                await self._spawn(q, minute)
            self._observe(minute)
            if minute % self.cull_every == 0:
                await self._cull(minute)
            if self.spec.waitlist:
                await self._waitlist(minute)
            if self.layouts is not None:
                await self._layouts(minute)
            if minute % 15 == 0:
                self.m["doubles"] += len(self.ledger.double_allocations())
        for lv in list(self.live.values()):
            self._end(lv, "stopped")
        return figures(self)

"""The GPU-aware culler, run by the service every ``c.GPULabService.cull_every``.

Each pass (:meth:`Culler.run_pass`):

1. lists every running server from the hub (named servers included, with ``last_activity`` and
   the user's groups) with the service's own token;
2. matches them with the ledger's open allocations, reads each slice's utilisation history (the
   service's one sampler, :meth:`~.state.LabState.take_sample`), each user's GPU-hour budget
   over the ledger's allocations of the period (read in full once, then only the rows that
   changed: :mod:`~jupyterhub_gpulab.fairuse.period`), and the warnings already given (kept in the
   ledger, so a restarted service neither forgets them nor warns twice);
3. decides with :func:`~jupyterhub_gpulab.fairuse.rounds.cull_round`: a warning is written to the
   ledger (``set_warning``; the hub's home page and the gpulab user page show it); a stop goes
   through the hub API (``DELETE /hub/api/users/<user>/servers/<name>``), which makes the spawner
   close the allocation (``stopped``); the culler then amends its end reason to
   ``culled:<rule>`` (or closes it so if the spawner could not) and leaves the user a notice;
4. clears warnings whose condition cleared or whose server stopped (a **Keep**, read from the
   ledger with each pass, moves a GPU-idle stop out: :mod:`.keeping`; with
   ``c.GPULabService.gpu_idle_spare_active``, a user at the keyboard whose slice nobody needs
   is spared the GPU-idle rule: :mod:`~jupyterhub_gpulab.fairuse.spare`; "at the keyboard" is
   the last interaction the server's JupyterLab extension reported, :mod:`.presence`, where it
   reports one).

``c.GPULabService.cull_dry_run`` logs every decision (``[dry-run] …``) and changes nothing. A
failure on one server (the hub refuses its stop, the database is busy) is logged and the pass
goes on; the server is tried again next pass.

Busy kernels
------------
The culler asks a server for busy kernels (``GET /user/<u>/<server>/api/kernels`` through the
proxy) only when the ``idle`` rule is about to stop it, and only when the service's token holds
``access:servers`` and ``c.GPULabService.proxy_url`` is set. ``configure_service`` grants
neither, so by default that signal is skipped, for two reasons:

- ``access:servers`` lets its holder use every user's server (run code, read files): more than a
  monitoring service should hold;
- the proxy stamps every answered request as activity on the server's route, and the hub copies
  that into the server's ``last_activity``: polling kernels every pass would itself keep every
  server "active". Asking only at the moment of a cull keeps that harmless (a busy kernel keeps
  the server, as activity should; an idle one is stopped anyway).

Without it, a busy *GPU* still counts as activity (the utilisation history), which covers a
training run in a GPU server with its tab closed; the single-user server's own activity reports
(kernel messages included) reach the hub's ``last_activity``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import replace

from tornado.httpclient import HTTPClientError, HTTPRequest

from .. import clock
from ..fairuse.culler import Decision, Server, Settings, decide, gpu_idle_since
from ..fairuse.cullplan import (
    budget_window_start,
    plan,
    running_servers,
    to_clear,
    warnings_map,
)
from ..fairuse.offers import free_for_newcomer, starved
from ..fairuse.period import PeriodReader
from ..fairuse.preempt import choose
from ..fairuse.rounds import RoundReport, cull_round
from ..fairuse.spare import Demand, Spare, spare_idle
from ..hubapi.client import HubClient, HubError
from ..hubapi.servers import HubServer
from ..ledger import Allocation, aio
from .cullconfig import CullerTraits
from .state import LabState

log = logging.getLogger("gpulab.culler")

#: The scope a token needs to ask a single-user server for its kernels.
KERNELS_SCOPE = "access:servers"


def kernels_busy(models: object) -> bool | None:
    """Whether any kernel in ``GET …/api/kernels``'s answer is executing (``None``: not a list
    of kernel models)."""
    if not isinstance(models, list):
        return None
    return any(isinstance(k, dict) and k.get("execution_state") == "busy" for k in models)


class KernelProbe:
    """Asks a server whether a kernel is busy, where the service's token may (module docstring)."""

    def __init__(self, hub: HubClient, proxy_url: str):
        self.hub = hub
        self.proxy_url = proxy_url.rstrip("/")
        self._allowed: bool | None = None

    async def allowed(self) -> bool:
        if self._allowed is not None:
            return self._allowed
        if not self.proxy_url:
            self._allowed = False
            return False
        try:
            scopes = await self.hub.token_scopes()
        except HubError as e:
            log.warning("culler: cannot read the service token's scopes: %s", e.message)
            return False
        self._allowed = KERNELS_SCOPE in scopes
        if not self._allowed:
            log.info(
                "culler: not reading kernels: the service's token lacks %s (see the docs' "
                "admin guide, 'Fair use')",
                KERNELS_SCOPE,
            )
        return self._allowed

    async def busy(self, url_path: str) -> bool | None:
        """Whether the server at ``url_path`` (``/user/alice/``) runs a busy kernel; ``None``
        when it cannot tell."""
        req = HTTPRequest(
            f"{self.proxy_url}{url_path.rstrip('/')}/api/kernels?no_track_activity=1",
            headers={"Authorization": f"token {self.hub.token}"},
            request_timeout=10,
        )
        try:
            resp = await self.hub.http.fetch(req)
            return kernels_busy(json.loads(resp.body))
        except (HTTPClientError, OSError, ValueError) as e:
            log.info("culler: cannot read kernels of %s: %s", url_path, e)
            return None


class Culler:
    """One culler per service; :meth:`run_pass` is called every ``cull_every``."""

    def __init__(self, state: LabState, hub: HubClient, traits: CullerTraits):
        self.state = state
        self.hub = hub
        self.dry_run = traits.cull_dry_run
        self.every_s = traits.cull_every
        self.settings = Settings(
            threshold_percent=traits.gpu_idle_threshold,
            warn_before_s=traits.cull_warn_before,
            max_sample_gap_s=traits.max_sample_gap,
            tz=state.lab.tz,
        )
        self.unknown_idle = traits.unknown_utilization == "idle"
        self.kernels = KernelProbe(hub, traits.proxy_url)
        #: warnings "given" in a dry run (never written to the ledger)
        self._dry_warnings: dict = {}
        self._held: dict[tuple[str, str], tuple[Allocation, ...]] = {}
        self.last_report: RoundReport | None = None
        self.preemption = getattr(traits, "preemption", False)
        self.preempt_min_idle = getattr(traits, "preempt_min_idle", 1800)
        #: ``gpu_idle_spare_active`` and ``_longest`` (:mod:`..fairuse.spare`; 0: off)
        self.spare = Spare(traits.gpu_idle_spare_active, traits.gpu_idle_spare_longest)
        #: (user, server) → the queued user a preempted server's slice goes to, this pass
        self._preempt_for: dict[tuple[str, str], str] = {}
        #: the budget window's allocations, re-read only where they changed (:mod:`..fairuse.period`)
        self.period = PeriodReader(state.ledger)

    async def run_pass(self) -> RoundReport | None:
        """One pass over every running server (module docstring); ``None`` when the hub could
        not be asked (nothing is decided without it)."""
        now = clock.utcnow()
        try:
            users = await self.hub.active_users()
        except HubError as e:
            log.warning(
                "culler: cannot list servers from the hub, skipping this pass: %s", e.message
            )
            return None
        self.hub.remember_active(users, now)
        running = [r for r in running_servers(users) if r.key not in self.hub.stopper.stopping]
        planned, given = await aio.call(self._gather, running, now)
        self._held = {r.key: held for r, _, held in planned}
        urls = {r.key: r.url or "" for r in running}
        warnings = self._dry_warnings if self.dry_run else warnings_map(given)
        servers = [s for _, s, _ in planned]
        if self.preemption:
            servers = await aio.call(self._preempt, servers, warnings, now)
        if self.spare.active_within_s:
            servers = await aio.call(self._spare, servers, now)
        servers = await self._ask_kernels(servers, warnings, now, urls)
        report = await cull_round(
            servers,
            warnings,
            now,
            self.settings,
            warn=self._warn,
            stop=self._stop,
            dry_run=self.dry_run,
            logger=log,
        )
        if self.dry_run:
            for d in report.decisions:
                if d.action == "keep":
                    log.info(d.log_line(True))
        else:
            await aio.call(self._tidy, given, warnings, running, now)
        acted = report.decisions and any(d.action != "keep" for d in report.decisions)
        log.log(
            logging.INFO if acted or report.failures or self.dry_run else logging.DEBUG,
            "culler%s: %d server(s), %d warned, %d culled, %d failed",
            " [dry-run]" if self.dry_run else "",
            len(servers),
            report.count("warn"),
            report.count("cull"),
            len(report.failures),
        )
        self.last_report = report
        return report

    # -- reads (in a thread) ------------------------------------------------------------------

    def _gather(self, running: list[HubServer], now):
        ledger, lab = self.state.ledger, self.state.lab
        start = budget_window_start(lab, now)
        period = self.period.read(start, now)
        kept = ledger.idle_clocks()
        planned = plan(
            running,
            ledger.open_allocations(),
            lab,
            self.state.history,
            period,
            now,
            within_s=self.settings.warn_before_s,
            unknown_idle=self.unknown_idle,
            idle_clocks=kept,
            keeps=ledger.latest_keeps(),
            interactions=self.state.presence.snapshot(),
        )
        clocks = {}
        for _hub, server, allocations in planned:
            since = gpu_idle_since(server, now, self.settings)
            if since is not None and allocations:
                clocks[allocations[0].id] = since
        if not self.dry_run and clocks != kept:  # a restarted service continues these clocks
            ledger.set_idle_clocks(clocks)
        return planned, ledger.warnings()

    def _preempt(self, servers, warnings, now):
        """Mark the servers chosen to give their slice to a queued higher-priority user
        (:mod:`..fairuse.preempt`; reads the ledger)."""
        ledger = self.state.ledger
        waiting = [e for e in ledger.waitlist() if e.state == "waiting" and starved(ledger, e)]
        if not waiting:
            return servers
        matches = self._queue_matcher(waiting)
        already = {k: w["preempt"] for k, w in warnings.items() if "preempt" in w}
        out = choose(
            servers, waiting, matches, now, self.settings,
            min_idle_s=self.preempt_min_idle, already=already,
        )  # fmt: skip
        self._preempt_for = {(s.user, s.name): s.preempt_for for s in out if s.preempt_at}
        return out

    def _spare(self, servers: list[Server], now) -> list[Server]:
        """Mark the servers the demand-aware GPU-idle rule spares (:mod:`..fairuse.spare`):
        their profile's free slices, and who is queued for their slice (reads the ledger)."""
        ledger, lab = self.state.ledger, self.state.lab
        waiting = [e for e in ledger.waitlist() if e.state == "waiting"]
        matches = self._queue_matcher(waiting)
        free: dict[str, int] = {}

        def demand(s: Server) -> Demand:
            if s.profile not in free:
                profile = lab.profile(s.profile)
                wants = profile is not None and profile.wants_gpu
                free[s.profile] = (
                    free_for_newcomer(ledger, profile.slice, s.profile) if wants else 0
                )
            return Demand(free[s.profile], sum(1 for e in waiting if matches(s, e)))

        return spare_idle(servers, demand, now, self.spare, self.settings)

    def _queue_matcher(self, waiting):
        """``matches(server, entry)``: whether the slice ``server`` holds satisfies queued
        ``entry``'s request (what preemption and the spare ask; reads the held slices once,
        only when someone waits)."""
        held = {k: v[0].slice_id for k, v in self._held.items() if v}
        objs = self.state.ledger.slice_objects(held.values()) if waiting else {}

        def matches(server, entry) -> bool:
            sid = held.get((server.user, server.name))
            return sid in objs and entry.request.matches(objs[sid])

        return matches

    async def _ask_kernels(self, servers: Sequence[Server], warnings, now, urls) -> list[Server]:
        """Servers the ``idle`` rule would stop now, with ``kernels_busy`` where they tell."""
        found = []
        for s in servers:
            key = (s.user, s.name)
            d = decide(s, warnings.get(key, {}), now, self.settings)
            if d.action == "cull" and d.rule == "idle" and await self.kernels.allowed():
                busy = await self.kernels.busy(urls.get(key, ""))
                if busy is not None:
                    s = replace(s, kernels_busy=busy)
            found.append(s)
        return found

    # -- actions ------------------------------------------------------------------------------

    async def _warn(self, d: Decision) -> None:
        ledger = self.state.ledger
        await aio.call(ledger.set_warning, d.user, d.server_name, d.rule, d.message, d.at)

    async def _stop(self, d: Decision) -> None:
        held = [a.id for a in self._held.get((d.user, d.server_name), ())]

        def not_stopped():
            log.warning("culler: %s/%r did not stop; will try again", d.user, d.server_name)

        await self.hub.stopper.stop(
            d.user, d.server_name, lambda: self._close(d, held), if_not_stopped=not_stopped
        )

    async def _close(self, d: Decision, held: list[int]) -> None:
        """The server is stopped: its allocations end as ``culled:<rule>`` (amending the
        spawner's ``stopped``, or closing them if the spawner could not), and its user gets a
        notice."""
        ledger = self.state.ledger

        def work():
            for aid in held:
                if not ledger.amend_end_reason(aid, d.end_reason):
                    a = ledger.get(aid)
                    if a is not None and a.open:
                        ledger.release(aid, d.end_reason)
            ledger.set_warning(d.user, d.server_name, d.end_reason, d.message, d.now)
            if d.rule == "preempt":
                for_user = self._preempt_for.get((d.user, d.server_name), "")
                ledger.record_preemption(
                    d.user, d.server_name, held[0] if held else None, for_user, d.message
                )

        await aio.call(work)
        log.info(
            "culler: stopped %s/%r (%s), allocations %s ended %s",
            d.user,
            d.server_name,
            d.profile,
            held,
            d.end_reason,
        )

    def _tidy(self, given, warnings, running, now) -> None:
        for user, name, rule in to_clear(given, warnings, running, now):
            self.state.ledger.clear_warnings(user, name, rule)

    async def close(self) -> None:
        """Let background stops (the culler's and the admin's: :mod:`.stopper`) finish, at most
        a few seconds, before the service exits."""
        await self.hub.stopper.close()

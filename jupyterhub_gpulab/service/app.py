"""The gpulab service: a Tornado application the hub starts as a managed service.

    python -m jupyterhub_gpulab.service --config /srv/jupyterhub/jupyterhub_config.py

It reads ``c.GPULab`` (inventory, profiles, policies, ``db_url``) and ``c.GPULabService`` from
the hub's own config file (the process and its command line: :mod:`.launcher`), opens the same ledger, records the inventory it reads at start, and
listens where ``$JUPYTERHUB_SERVICE_URL`` says (the Tornado application itself, its routes and
templates: :mod:`.web.application`). The hub's spawner never calls it: spawns keep working while
it is down.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from jupyterhub.services.auth import HubOAuth
from tornado.ioloop import PeriodicCallback
from traitlets import Bool, Integer, Unicode

from ..hubapi.client import HubClient, HubError
from ..hubapi.secret import SECRET_FILE, read_cookie_secret
from ..inventory import gpu_instance_ids
from ..lab.config import GPULab
from ..lab.traits import Duration
from ..ledger import Ledger, aio
from ..ledger.jobmap import JobMap
from .cullconfig import CullerTraits
from .culling import Culler
from .layouts import LayoutKeeper, LayoutTraits
from .lifetime import listen_when_free
from .nodes import NodeReports, NodeTraits
from .seatguard import SeatGuard
from .state import LabState
from .waitlist import WaitlistKeeper, WaitlistTraits
from .web.application import make_app
from .web.grants import RoleGrants
from .web.inputs import MAX_BODY_READ

log = logging.getLogger("gpulab.service")


class GPULabService(CullerTraits, WaitlistTraits, NodeTraits, LayoutTraits):
    """Settings of the gpulab service (``c.GPULabService.*`` in ``jupyterhub_config.py``); the
    culler's are in :class:`~.cullconfig.CullerTraits`, the waitlist's in
    :class:`~.waitlist.WaitlistTraits`, the node agents' in :class:`~.nodes.NodeTraits`, the MIG
    layout pass's in :class:`~.layouts.LayoutTraits`."""

    cookie_secret_file = Unicode(
        SECRET_FILE,
        config=True,
        help="""File holding the service's cookie secret (hex), created (mode 0600) if missing.

        Kept across restarts so users stay logged in to the service. Relative to the service's
        working directory (the hub's). ``c.GPULabService.cookie_secret_file =
        "/srv/jupyterhub/gpulab_cookie_secret"``
        """,
    )

    auth_cache_max_age = Integer(
        5,
        config=True,
        help="""Seconds the service trusts the hub's answer about a token (who it is, which
        scopes it holds).

        A revoked token, a user removed from a group or a role, stops working in the service
        within this time. Each signed-in user's first request after it asks the hub again (one
        API call of a few milliseconds). ``c.GPULabService.auth_cache_max_age = 5``
        """,
    )

    hub_poll_interval = Duration(
        30,
        positive=True,
        config=True,
        help="""Seconds between reads of the hub's running servers (last activity, stale
        allocations on the admin page). ``c.GPULabService.hub_poll_interval = 30``""",
    )

    listen_timeout = Duration(
        30,
        config=True,
        help="""Seconds to wait for the service's port when another process holds it, before
        giving up. A service left running by a hub killed with SIGKILL notices its hub is gone
        and exits within about a second, so the next hub's service waits instead of
        crash-looping on "Address already in use". ``c.GPULabService.listen_timeout = 30``""",
    )

    metrics_user_labels = Bool(
        False,
        config=True,
        help="""Add per-user series to ``/services/gpulab/metrics``: who holds each slice
        (``gpulab_slice_holder_info``) and each user's GPU-seconds this week
        (``gpulab_user_used_gpu_seconds``).

        Off by default, as JupyterHub's own metrics: user names become label values (one
        series per open allocation and per active user), and every holder of
        ``custom:gpulab:metrics`` (Prometheus, whoever reads its dashboards) sees who uses what.
        ``c.GPULabService.metrics_user_labels = True``""",
    )

    sample_interval = Duration(
        10,
        positive=True,
        config=True,
        help="""Seconds between NVML utilisation samples: shown on the pages, and kept as the
        history the culler reads (``utilization_history``). ``c.GPULabService.sample_interval =
        10``""",
    )


def make_course_manager(gpulab: GPULab, ledger: Ledger, hub: HubClient, lab, secret: bytes):
    """The courses of this lab (:mod:`jupyterhub_gpulab.courses`), on the service's hub client;
    ``secret``: the service's cookie secret, from which each course's pre-start token is derived
    (:func:`jupyterhub_gpulab.courses.hubhook.prestart_token`)."""
    from ..auth.groupsowner import groups_owner
    from ..courses.config import GPULabCourses
    from ..courses.manager import CourseManager
    from ..courses.store import CourseStore
    from ..hub.hubconfig import config_value

    config = gpulab.config
    settings = GPULabCourses(config=config)
    hubcfg = config.JupyterHub if "JupyterHub" in config else {}
    return CourseManager(
        CourseStore(ledger.engine),
        settings,
        hub,
        tz=lab.tz,
        secret=secret,
        ledger=ledger,
        spawn_limit=int(config_value(hubcfg, "concurrent_spawn_limit", 100) or 100),
        lab_profiles={p.slug: p for p in lab.profiles},
        images={p.slug: p.image for p in lab.profiles if p.image},
        lab_id=ledger.identity().uuid,
        groups_owner=groups_owner(config),
        lab=lab,
    )


class Service:
    """The running service: state, hub client, app, and the periodic refreshes."""

    def __init__(
        self,
        gpulab: GPULab,
        settings: GPULabService,
        *,
        hub_auth: HubOAuth,
        ledger: Ledger | None = None,
        nvml: Any = None,
        cookie_secret: bytes | None = None,
        grants: RoleGrants | None = None,
    ):
        """``grants``: who holds which gpulab scope (default: from the roles in the config
        ``gpulab`` was loaded from, the hub's own file)."""
        self.settings = settings
        # never upgrades the schema: the hub does (gpulab upgrade-db, or c.GPULab.db_auto_upgrade)
        self.ledger = ledger or Ledger(gpulab.db_url)
        self.ledger.fairshare_half_life = gpulab.fairshare_half_life  # the waitlist's order
        self.state = LabState(
            gpulab,
            self.ledger,
            nvml=nvml,
            history_s=settings.utilization_history,
            interval_s=settings.sample_interval,
            proc_root=settings.proc_root,
        )
        self.jobmap: JobMap | None = None
        if gpulab.dcgm_job_mapping_dir:
            # the service's releases (admin, culler) rewrite dcgm-exporter's files too
            self.jobmap = JobMap(
                gpulab.dcgm_job_mapping_dir,
                self.ledger,
                self.state.node,
                lambda uuids: gpu_instance_ids(uuids, self.state.nvml),
            )
            self.ledger.listeners.append(self.jobmap)
        self.hub_auth = hub_auth
        self.hub = HubClient(hub_auth.api_url, hub_auth.api_token)
        self.culler = Culler(self.state, self.hub, settings)
        self.seatguard = SeatGuard(
            self.state, self.hub, grace_s=gpulab.seat_overuse_grace,
            action=gpulab.seat_overuse_action, proc_root=settings.proc_root,
            dry_run=settings.cull_dry_run,
        )  # fmt: skip
        self.nodes = NodeReports(self.state, timeout_s=settings.node_timeout)
        self.waitlist = WaitlistKeeper(self.state, self.hub, settings)
        self.layouts = LayoutKeeper(self.state, self.hub, settings)
        secret = cookie_secret or read_cookie_secret(settings.cookie_secret_file)
        self.courses = make_course_manager(gpulab, self.ledger, self.hub, self.state.lab, secret)
        self.app = make_app(
            self.state,
            self.hub,
            hub_auth,
            cookie_secret=secret,
            prefix=hub_auth.base_url,
            hub_base=hub_auth.hub_prefix.rsplit("hub/", 1)[0] or "/",
            grants=grants or RoleGrants.from_config(gpulab.config),
            courses=self.courses,
            nodes=self.nodes,
            metrics_user_labels=settings.metrics_user_labels,
            culler=self.culler,
        )
        self._periodic: list[PeriodicCallback] = []
        self.server = None

    async def start(self, address: str, port: int) -> None:
        """Sync the inventory, take a first sample, listen, and start the periodic refreshes."""
        report = await aio.call(self.state.sync)
        for a in report.vanished_held if report else ():
            log.warning(
                "Allocation %d (%s's server %r) holds slice %s, which is no longer in the inventory",
                a.id,
                a.user,
                a.server_name,
                a.slice_id,
            )
        await self.sample()
        await self.courses.declare()
        await self.sync_job_map()
        self.server = await listen_when_free(
            self.app,
            address,
            port,
            timeout_s=self.settings.listen_timeout,
            xheaders=True,
            max_body_size=MAX_BODY_READ,
        )
        for job, seconds in (
            (self.refresh_hub, self.settings.hub_poll_interval),
            (self.sample, self.settings.sample_interval),
            (self.cull, self.culler.every_s),
            (self.courses_due, self.courses.settings.check_interval),
            (self.waitlist.run_pass, self.settings.waitlist_every),
            (self.expire_nodes, self.settings.node_check_every),
            (self.layouts.run_pass, self.settings.layout_every),
        ):
            pc = PeriodicCallback(job, 1000 * seconds)
            pc.start()
            self._periodic.append(pc)
        asyncio.ensure_future(self.refresh_hub())
        log.info("gpulab service listening on %s:%d%s", address, port, self.hub_auth.base_url)
        c = self.culler
        log.info(
            "culler: a pass every %g s, warnings %g s ahead, GPU idle below %g %%, unknown "
            "utilisation counts as %s%s",
            c.every_s,
            c.settings.warn_before_s,
            c.settings.threshold_percent,
            "idle" if c.unknown_idle else "busy",
            "; DRY RUN: nothing is warned or stopped" if c.dry_run else "",
        )

    async def refresh_hub(self) -> None:
        try:
            await self.hub.refresh_active()
        except HubError as e:
            log.warning("Cannot list servers from the hub: %s", e.message)
        await self.sync_job_map()

    async def sync_job_map(self) -> None:
        """Rewrite dcgm-exporter's job-mapping files from the ledger (a claim or release whose
        process died before writing them is repaired within ``hub_poll_interval``)."""
        if self.jobmap is None:
            return
        try:
            await aio.call(self.jobmap.sync)
        except OSError as e:
            log.error("Cannot write dcgm-exporter's job-mapping files: %s", e)

    async def sample(self) -> None:
        try:
            sample = await aio.call(self.state.take_sample)
            # the per-slice metrics text, off the scrape's path (service/metrics.py)
            await aio.call(self.app.settings["gpulab_metrics"].sampled)
        except Exception:
            log.exception("NVML sampling failed")
            return
        try:
            if not sample.problem:  # seats over their cap, as the host sees them
                await self.seatguard.run()
        except Exception:
            log.exception("Seat guard pass failed")

    async def expire_nodes(self) -> None:
        try:
            await aio.call(self.nodes.expire)
        except Exception:
            log.exception("Checking the node agents failed")

    async def courses_due(self) -> None:
        try:
            await self.courses.check_due()
        except Exception:
            log.exception("Course pre-start check failed")

    async def cull(self) -> None:
        try:
            await self.culler.run_pass()
        except Exception:
            log.exception("Culler pass failed")

    def stop(self) -> None:
        for pc in self._periodic:
            pc.stop()
        if self.server is not None:
            self.server.stop()
        self.state.close()
        self.ledger.close()

"""The gpulab service: a Tornado application the hub starts as a managed service.

    python -m jupyterhub_gpulab.service --config /srv/jupyterhub/jupyterhub_config.py

It reads ``c.GPULab`` (inventory, profiles, policies, ``db_url``) and ``c.GPULabService`` from
the hub's own config file (``--config``, else ``$GPULAB_CONFIG``, else ``jupyterhub_config.py``
in the working directory), opens the same ledger, records the inventory it reads at start, and
listens where ``$JUPYTERHUB_SERVICE_URL`` says. The hub's spawner never calls it: spawns keep
working while it is down.
"""

from __future__ import annotations

import argparse
import asyncio
import binascii
import errno
import gc
import logging
import os
import secrets
import signal
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from jinja2 import ChoiceLoader, Environment, FileSystemLoader
from jupyterhub._data import DATA_FILES_PATH
from jupyterhub.services.auth import HubOAuth
from tornado import web
from tornado.ioloop import PeriodicCallback
from traitlets import Integer, TraitError, Unicode
from traitlets.config import Config

from ..errors import ConfigError
from ..lab.config import GPULab, load_config_file
from ..lab.traits import Duration
from ..ledger import Ledger, SchemaOutOfDate
from .cullconfig import CullerTraits
from .culling import Culler
from .hubclient import HubClient, HubError
from .lifetime import listen_when_free, watch_hub
from .state import LabState
from .web.api import api_handlers
from .web.base import OAuthCallback
from .web.filters import FILTERS
from .web.grants import RoleGrants
from .web.inputs import MAX_BODY_READ
from .web.pages import ActionPage, AdminPage, UserPage

log = logging.getLogger("gpulab.service")

TEMPLATES = Path(__file__).parent / "web" / "templates"
DEFAULT_CONFIG = "jupyterhub_config.py"


class GPULabService(CullerTraits):
    """Settings of the gpulab service (``c.GPULabService.*`` in ``jupyterhub_config.py``); the
    culler's are in :class:`~.cullconfig.CullerTraits`."""

    cookie_secret_file = Unicode(
        "gpulab_cookie_secret",
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

    sample_interval = Duration(
        10,
        positive=True,
        config=True,
        help="""Seconds between NVML utilisation samples: shown on the pages, and kept as the
        history the culler reads (``utilization_history``). ``c.GPULabService.sample_interval =
        10``""",
    )


def jinja_env() -> Environment:
    """One environment for the service's life: our templates, then JupyterHub's (for
    ``page.html``); autoescaped, as JupyterHub's are."""
    env = Environment(
        loader=ChoiceLoader(
            [
                FileSystemLoader(str(TEMPLATES)),
                FileSystemLoader(os.path.join(DATA_FILES_PATH, "templates")),
            ]
        ),
        autoescape=True,
    )
    env.filters.update(FILTERS)
    return env


def make_app(
    state: LabState,
    hub: HubClient,
    hub_auth: HubOAuth,
    *,
    cookie_secret: bytes,
    prefix: str,
    hub_base: str = "/",
    grants: RoleGrants | None = None,
) -> web.Application:
    """The Tornado application under ``prefix`` (``/services/gpulab/``); ``grants``: the gpulab
    scopes the hub's roles give each user, asked for at page logins (none by default)."""
    handlers = [
        (prefix, AdminPage),
        (prefix + "me", UserPage),
        (prefix + "actions/(?P<action>[a-z]+)", ActionPage),
        (prefix + "oauth_callback", OAuthCallback),
        *api_handlers(prefix),
    ]
    return web.Application(
        handlers,
        cookie_secret=cookie_secret,
        xsrf_cookies=True,
        hub_auth=hub_auth,
        gpulab_state=state,
        gpulab_hub=hub,
        gpulab_prefix=prefix,
        gpulab_hub_base=hub_base,
        gpulab_grants=grants or RoleGrants(),
        gpulab_jinja=jinja_env(),
        log_function=_log_request,
    )


def _log_request(handler: web.RequestHandler) -> None:
    status = handler.get_status()
    level = logging.INFO if status < 400 else logging.WARNING if status < 500 else logging.ERROR
    # the path only: query strings may carry tokens or OAuth codes
    log.log(
        level,
        "%d %s %s %.1fms",
        status,
        handler.request.method,
        handler.request.path,
        1000 * handler.request.request_time(),
    )


def read_cookie_secret(path: str | os.PathLike) -> bytes:
    """The secret in ``path`` (hex), created with mode 0600 when missing."""
    path = Path(path).expanduser().resolve()
    try:
        text = path.read_text().strip()
        if text:
            return binascii.a2b_hex(text)
    except FileNotFoundError:
        pass
    except (binascii.Error, ValueError):
        raise ConfigError(
            f"{path} does not hold a hex cookie secret; delete it to make a new one"
        ) from None
    secret = secrets.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(binascii.b2a_hex(secret).decode() + "\n")
    log.info("Wrote a new cookie secret to %s", path)
    return secret


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
        self.state = LabState(
            gpulab,
            self.ledger,
            nvml=nvml,
            history_s=settings.utilization_history,
            interval_s=settings.sample_interval,
            proc_root=settings.proc_root,
        )
        self.hub_auth = hub_auth
        self.hub = HubClient(hub_auth.api_url, hub_auth.api_token)
        self.culler = Culler(self.state, self.hub, settings)
        secret = cookie_secret or read_cookie_secret(settings.cookie_secret_file)
        self.app = make_app(
            self.state,
            self.hub,
            hub_auth,
            cookie_secret=secret,
            prefix=hub_auth.base_url,
            hub_base=hub_auth.hub_prefix.rsplit("hub/", 1)[0] or "/",
            grants=grants or RoleGrants.from_config(gpulab.config),
        )
        self._periodic: list[PeriodicCallback] = []
        self.server = None

    async def start(self, address: str, port: int) -> None:
        """Sync the inventory, take a first sample, listen, and start the periodic refreshes."""
        report = await asyncio.to_thread(self.state.sync)
        for a in report.vanished_held:
            log.warning(
                "Allocation %d (%s's server %r) holds slice %s, which is no longer in the inventory",
                a.id,
                a.user,
                a.server_name,
                a.slice_id,
            )
        await self.sample()
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

    async def sample(self) -> None:
        try:
            await asyncio.to_thread(self.state.take_sample)
        except Exception:
            log.exception("NVML sampling failed")

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


def _config_path(arg: str | None) -> str:
    return arg or os.environ.get("GPULAB_CONFIG") or DEFAULT_CONFIG


def _listen_address() -> tuple[str, int]:
    url = os.environ.get("JUPYTERHUB_SERVICE_URL")
    if not url:
        raise ConfigError(
            "JUPYTERHUB_SERVICE_URL is not set: run the service from the hub "
            "(configure_service in jupyterhub_config.py), or set it to http://127.0.0.1:10101"
        )
    parsed = urlparse(url)
    return parsed.hostname or "127.0.0.1", parsed.port or 80


async def _serve(config: Config, hub_pid: int | None = None) -> None:
    gpulab = GPULab(config=config)
    settings = GPULabService(config=config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if hub_pid:
        watch_hub(hub_pid, loop, stop)
    hub_auth = HubOAuth(config=config, cache_max_age=settings.auth_cache_max_age)
    service = Service(gpulab, settings, hub_auth=hub_auth)
    address, port = _listen_address()
    starting = asyncio.ensure_future(service.start(address, port))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait([starting, stopping], return_when=asyncio.FIRST_COMPLETED)
    if starting.done():
        starting.result()
        # what start built (modules, config, templates) lives as long as the process: keep the
        # collector from re-scanning it on every full collection (latency spikes on big pages)
        gc.collect()
        gc.freeze()
        await stopping
    else:
        starting.cancel()  # told to stop (its hub went away) while waiting for the port
    log.info("Stopping the gpulab service")
    await service.culler.close()
    service.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jupyterhub_gpulab.service", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--config",
        "-f",
        help=f"the hub's config file (default: $GPULAB_CONFIG or {DEFAULT_CONFIG})",
    )
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument(
        "--hub-pid",
        type=int,
        help="exit when this process (the hub that starts the service; configure_service "
        "passes it) is no longer the parent",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="[%(levelname).1s %(asctime)s %(name)s] %(message)s",
        stream=sys.stderr,
    )
    try:
        config = load_config_file(_config_path(args.config))
        asyncio.run(_serve(config, args.hub_pid))
    except (ConfigError, FileNotFoundError, SchemaOutOfDate, TraitError) as e:
        log.error("gpulab service cannot start: %s", e)
        return 1
    except OSError as e:
        if e.errno != errno.EADDRINUSE:
            raise
        log.error(
            "gpulab service cannot start: its port is still in use by another process after "
            "c.GPULabService.listen_timeout (%s); stop that process",
            e,
        )
        return 1
    return 0

"""The service's process: a traitlets ``Application`` (command line, config file, signals).

    python -m jupyterhub_gpulab.service --config /srv/jupyterhub/jupyterhub_config.py
    python -m jupyterhub_gpulab.service --help-all          # every c.GPULabService setting
    python -m jupyterhub_gpulab.service --generate-config   # them all, commented, on stdout

The config file is the hub's own ``jupyterhub_config.py`` (``--config``, else
``$GPULAB_CONFIG``, else ``jupyterhub_config.py`` in the working directory); settings given on
the command line (``--GPULabService.cull_dry_run=True``) win over it. ``configure_service``
starts it with ``--config <file> --hub-pid <the hub's pid>``.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import os
import signal
import sys
from urllib.parse import urlparse

from jupyterhub.services.auth import HubOAuth
from traitlets import Bool, Enum, Integer, TraitError, Unicode, default
from traitlets.config import Application, Config

from .._version import __version__
from ..errors import ConfigError
from ..lab.config import GPULab, load_config_file
from ..ledger import SchemaOutOfDate
from .app import GPULabService, Service
from .lifetime import watch_hub

log = logging.getLogger("gpulab.service")

DEFAULT_CONFIG = "jupyterhub_config.py"


class _LogLevel(Enum):
    """Application's log level, also in lower case (``--log-level=debug``, as before)."""

    def validate(self, obj, value):
        return super().validate(obj, value.upper() if isinstance(value, str) else value)


class GPULabServiceApp(Application):
    """``python -m jupyterhub_gpulab.service``: the gpulab service the hub starts."""

    name = "gpulab-service"
    version = __version__
    description = """The gpulab service: admin and user pages, JSON API and GPU-aware culler.
    The hub starts it (configure_service in jupyterhub_config.py); it reads c.GPULab and
    c.GPULabService from the hub's config file."""
    examples = """
    python -m jupyterhub_gpulab.service --config /srv/jupyterhub/jupyterhub_config.py
    python -m jupyterhub_gpulab.service --generate-config >> jupyterhub_config.py
    """
    classes = [GPULabService]

    aliases = {
        ("f", "config"): "GPULabServiceApp.config_file",
        "hub-pid": "GPULabServiceApp.hub_pid",
        "log-level": "Application.log_level",
    }
    flags = {
        "generate-config": (
            {"GPULabServiceApp": {"generate_config": True}},
            "Print every c.GPULabService setting, commented, with its help and default; start "
            "nothing.",
        ),
        "debug": ({"Application": {"log_level": logging.DEBUG}}, "Log at DEBUG level."),
    }

    config_file = Unicode(
        config=True,
        help="""The hub's config file, read for c.GPULab and c.GPULabService (default:
        $GPULAB_CONFIG, else jupyterhub_config.py in the working directory).
        ``--config /srv/jupyterhub/jupyterhub_config.py``""",
    )

    @default("config_file")
    def _default_config_file(self) -> str:
        return os.environ.get("GPULAB_CONFIG") or DEFAULT_CONFIG

    hub_pid = Integer(
        None,
        allow_none=True,
        config=True,
        help="""Exit when this process (the hub that starts the service; configure_service
        passes it) is no longer the parent. ``--hub-pid 1234``""",
    )

    generate_config = Bool(
        False, config=True, help="Print the settings' config section and exit (see the flag)."
    )

    log_level = _LogLevel(
        (0, 10, 20, 30, 40, 50, "DEBUG", "INFO", "WARN", "ERROR", "CRITICAL"),
        default_value=logging.INFO,
        config=True,
        help="Log at this level and above, by value or name (any case). ``--log-level=debug``",
    )

    def _classes_with_config_traits(self, classes=None):
        # --help-all and --generate-config show the settings an admin puts in the hub's
        # config file; the process's own options are the flags and aliases above
        yield GPULabService

    def initialize(self, argv: list[str] | None = None) -> None:
        """Parse the command line, then (unless only printing) load the hub's config file under
        it. Raises ``FileNotFoundError`` for a missing file, ``TraitError`` for a bad setting."""
        self.parse_command_line(argv)
        logging.basicConfig(
            level=self.log_level,
            format="[%(levelname).1s %(asctime)s %(name)s] %(message)s",
            stream=sys.stderr,
        )
        if self.generate_config:
            return
        config = load_config_file(self.config_file)
        config.merge(self.cli_config)  # the command line wins over the file
        self.update_config(config)

    def start(self) -> None:
        if self.generate_config:
            print(self.generate_config_file())
            return
        asyncio.run(_serve(self.config, self.hub_pid))


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
    """Run the service; the exit status (1: it cannot start, and the log says why)."""
    app = GPULabServiceApp()
    try:
        app.initialize(argv)
        app.start()
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

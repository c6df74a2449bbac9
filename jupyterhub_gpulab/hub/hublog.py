"""The lab's module loggers write through the hub's log, with its level, time and format.

Runs in the hub process. gpulab's modules log to their own loggers (``jupyterhub_gpulab.*``, by
module name, and ``gpulab.*``: ``gpulab.courses``, ``gpulab.announce``); in the hub none of them
has a handler, so Python dropped their INFO lines and wrote warnings as bare lines without level
or time (its last-resort handler). :func:`log_through` hands their records to JupyterHub's own
logger (the app's ``log``, with its handler and ``LogFormatter``), at that logger's level, so
``[W 2026-12-02 16:20:01.123 jupyterhub_gpulab.spawner.runtime runtime:140] gpulab: …`` is what
an admin finds. The spawner calls it when it loads the lab, ``configure_service`` when the config
file runs; calling it again is harmless. (The service process configures the root logger
itself: ``service/launcher.py``; the node agent too.)

Imports nothing of the package: ``jupyterhub_config.py`` imports it through ``hubconfig``.
"""

from __future__ import annotations

import logging
import sys

#: The loggers of the package's modules: their records go to the hub's log.
PACKAGE_LOGGERS = ("jupyterhub_gpulab", "gpulab")


class _ToHubLog(logging.Handler):
    """Hands every record to ``target`` (its filters and handlers; its format)."""

    def __init__(self, target: logging.Logger):
        super().__init__()
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        self.target.handle(record)


def hub_app_log() -> logging.Logger | None:
    """JupyterHub's application logger when this process is a hub (its app instance exists:
    from the config file's load on), else ``None`` (the service, ``gpulab check-config``,
    tests)."""
    app = sys.modules.get("jupyterhub.app")
    if app is None or not app.JupyterHub.initialized():
        return None
    return app.JupyterHub.instance().log


def log_through() -> bool:
    """In a hub process (:func:`hub_app_log`), make the package's loggers
    (:data:`PACKAGE_LOGGERS`) write through JupyterHub's logger, at its effective level (INFO
    unless the hub runs with ``--debug`` or ``c.Application.log_level``); elsewhere do nothing
    (the service's root logger already has a handler; routing there too would write each line
    twice). Returns whether it routed. Idempotent: a second call replaces the first's route.
    Records still propagate to the root logger, which has no handler in a hub."""
    target = hub_app_log()
    if target is None:
        return False
    level = target.getEffectiveLevel()
    for name in PACKAGE_LOGGERS:
        logger = logging.getLogger(name)
        routes = [h for h in logger.handlers if isinstance(h, _ToHubLog)]
        if [h.target for h in routes] != [target]:
            for h in routes:
                logger.removeHandler(h)
            logger.addHandler(_ToHubLog(target))
        logger.setLevel(level)
    return True

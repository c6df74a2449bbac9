"""How refused spawns reach the hub log: routine refusals at INFO on one line, ERROR left for what
an administrator must act on.

JupyterHub 6.1 treats a ``SpawnException`` as a policy refusal (no traceback, metric status
``failure``, not counted towards ``consecutive_failure_limit``), yet logs every one at ERROR
(``user.py``: *"Not starting …"*), the spawn form and spawn links log it again at ERROR
(``handlers/pages.py`` ``_wrap_spawn_single_user``: *"Error starting server …"*) and once more with
a full traceback (``SpawnHandler._post`` / ``_get`` catch every exception: *"Failed to spawn
single-user server with form"* / *"… with query arguments"*). A full lab refusing a student from
the form wrote three ERROR lines and a 25-line traceback.

:class:`RefusalLogFilter` (installed on the hub's logger by ``GPUDockerSpawner``) rewrites exactly
the records that carry one of gpulab's routine refusals (:class:`~jupyterhub_gpulab.errors.SpawnRefused`
whose ``needs_admin`` is false: a bad choice, a quota, no free slice): INFO, the refusal on the
same line, no traceback. Refusals an administrator must act on (``gpu-runtime-missing``,
``misconfigured``) and every other record pass unchanged.
"""

from __future__ import annotations

import logging
import re

from ..errors import ADMIN_REASONS, SpawnRefused

__all__ = ["RefusalLogFilter", "install_refusal_filter"]

# JupyterHub's SpawnException.__str__: "429 SpawnRefused(reason=quota): <log message>"
_REFUSAL = re.compile(r"\b[1-5]\d\d (?P<cls>\w+)\(reason=(?P<reason>[\w-]+)\): ")


def _refusal_classes() -> set[str]:
    found, todo = set(), [SpawnRefused]
    while todo:
        cls = todo.pop()
        found.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return found


def _routine(record: logging.LogRecord) -> str | None:
    """The routine refusal a record carries, as one line, else ``None``."""
    exc = record.exc_info[1] if record.exc_info else None
    if isinstance(exc, SpawnRefused):
        return None if exc.needs_admin else f"{record.getMessage()}: {exc}"
    if exc is not None:
        return None
    text = record.getMessage()
    m = _REFUSAL.search(text)
    if m and m["cls"] in _refusal_classes() and m["reason"] not in ADMIN_REASONS:
        return text
    return None


class RefusalLogFilter(logging.Filter):
    """On the hub's logger: ERROR records about a routine gpulab refusal become one INFO line
    without a traceback (module docstring). Keeps the logger's level: a record lowered to INFO
    is dropped when the hub logs at WARNING or above."""

    def __init__(self, logger: logging.Logger):
        super().__init__()
        self.logger = logger

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            return True
        line = _routine(record)
        if line is None:
            return True
        record.msg, record.args = line, ()
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        return self.logger.isEnabledFor(logging.INFO)


def install_refusal_filter(*loggers: logging.Logger | logging.LoggerAdapter) -> None:
    """Add one :class:`RefusalLogFilter` to each logger (idempotent). The hub needs two: its own
    (handlers, spawners) and tornado's ``app_log``, which ``User.spawn`` logs to and JupyterHub
    renames "JupyterHub"; a filter applies only to records its own logger creates."""
    for logger in loggers:
        if isinstance(logger, logging.LoggerAdapter):
            logger = logger.logger
        if not any(isinstance(f, RefusalLogFilter) for f in logger.filters):
            logger.addFilter(RefusalLogFilter(logger))

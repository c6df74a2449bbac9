"""One pass of the culler over every server: decide, warn, stop; dry run; carry on after failures.

The service builds one :class:`~.culler.Server` per running server (named servers included) and
calls :func:`cull_round` every pass with two coroutines of its own: ``warn(decision)`` tells the
user (``decision.message``), ``stop(decision)`` stops the server through the hub API
(``DELETE /hub/api/users/{user}/servers/{server_name}``, scope ``servers``) and closes its
allocation with ``decision.end_reason`` (``culled:<rule>``). No I/O here beyond those callbacks
and the log.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from datetime import datetime

from .culler import Decision, Server, Settings, decide, next_warnings

__all__ = ["RoundReport", "cull_round"]

log = logging.getLogger(__name__)

#: Warnings given per server: ``{(user, server_name): {rule: when warned}}``, kept by the caller
#: between passes (losing it on a restart only means warning again before culling).
Warnings = MutableMapping[tuple[str, str], dict[str, datetime]]


@dataclass(frozen=True)
class RoundReport:
    """What one pass did: every decision, and ``failures`` as ``(user, server_name, error)`` for
    servers whose warning or stop failed (they are tried again next pass)."""

    decisions: tuple[Decision, ...]
    failures: tuple[tuple[str, str, str], ...]

    def count(self, action: str) -> int:
        return sum(1 for d in self.decisions if d.action == action)


async def cull_round(
    servers: Iterable[Server],
    warnings: Warnings,
    now: datetime,
    settings: Settings,
    *,
    warn: Callable[[Decision], Awaitable[None]],
    stop: Callable[[Decision], Awaitable[None]],
    dry_run: bool = False,
    logger: logging.Logger = log,
) -> RoundReport:
    """Decide for each of ``servers`` at ``now`` and act: ``warn`` or ``stop`` (never in
    ``dry_run``, where each warn/cull decision is only logged, ``[dry-run]`` first, and the
    warnings are tracked as if given so the log shows when the cull would come). Every warn or
    cull decision is logged as one line; a callback that raises is logged and the pass goes on.
    ``warnings`` is updated in place; entries of servers no longer running are dropped."""
    decisions: list[Decision] = []
    failures: list[tuple[str, str, str]] = []
    seen: set[tuple[str, str]] = set()
    for server in servers:
        key = (server.user, server.name)
        seen.add(key)
        previous = warnings.get(key, {})
        try:
            decision = decide(server, previous, now, settings)
        except Exception as exc:  # a malformed server record must not stop the pass
            logger.error("culler: cannot decide for %s/%r: %r", server.user, server.name, exc)
            failures.append((server.user, server.name, repr(exc)))
            continue
        decisions.append(decision)
        if decision.action == "keep":
            logger.debug(decision.log_line(dry_run))
        else:
            logger.info(decision.log_line(dry_run))
        if not dry_run and decision.action != "keep":
            act = warn if decision.action == "warn" else stop
            try:
                await act(decision)
            except Exception as exc:
                logger.error(
                    "culler: %s of %s/%r failed, will retry next pass: %r",
                    decision.action,
                    server.user,
                    server.name,
                    exc,
                )
                failures.append((server.user, server.name, repr(exc)))
                continue
        updated = next_warnings(previous, decision)
        if updated:
            warnings[key] = updated
        else:
            warnings.pop(key, None)
    for key in set(warnings) - seen:
        del warnings[key]
    return RoundReport(tuple(decisions), tuple(failures))

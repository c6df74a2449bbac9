"""Stop a server, then close its allocations: the one home of that sequence in the service.

The admin's "stop" action (:func:`.actions.stop_server`) and the culler (:mod:`.culling`) both
ask the hub to stop a server (``DELETE /hub/api/users/<user>/servers/<name>``, which makes the
spawner release its slice) and then close what the spawner could not. The hub answers 202 when
the stop is still going on: the closing then waits, in a background task, until the hub reports
the server gone. Those tasks are kept in one set, so the service lets them finish at shutdown
(:meth:`ServerStopper.close`) instead of dropping them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

log = logging.getLogger(__name__)


class Hub(Protocol):
    """What the stopper needs of :class:`~.client.HubClient` (which holds the stopper)."""

    async def stop(self, user: str, name: str = "") -> bool: ...

    async def wait_stopped(self, user: str, name: str = "", timeout: float = 120) -> bool: ...


class ServerStopper:
    """Stops servers through ``hub`` (a :class:`~.client.HubClient`); one per hub client
    (``hub.stopper``)."""

    def __init__(self, hub: Hub):
        self.hub = hub
        #: ``(user, server_name)`` of servers the hub is still stopping
        self.stopping: set[tuple[str, str]] = set()
        self._tasks: set[asyncio.Task] = set()

    async def stop(
        self,
        user: str,
        name: str,
        then: Callable[[], Awaitable[None]],
        *,
        if_not_stopped: Callable[[], None],
    ) -> bool:
        """Ask the hub to stop ``user``'s server ``name``; once it is stopped, ``await then()``.

        Returns ``True`` when the hub stopped it at once (``then`` has run), ``False`` when the
        hub is still stopping it: ``then`` runs in the background once the hub reports it gone,
        or ``if_not_stopped()`` is called when it does not stop in time
        (:meth:`~.client.HubClient.wait_stopped`). Raises
        :class:`~.client.HubError` when the hub refuses the stop.
        """
        if await self.hub.stop(user, name):
            await then()
            return True
        key = (user, name)
        self.stopping.add(key)
        task = asyncio.ensure_future(self._when_stopped(key, then, if_not_stopped))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return False

    def in_background(self, coro: Awaitable[None], what: str) -> asyncio.Task:
        """Run ``coro`` (a stop and what follows it, such as Move to CPU's start) after the
        request that asked for it has been answered; kept with the stops, so :meth:`close` lets
        it finish. A failure is logged with ``what``."""

        async def run():
            try:
                await coro
            except Exception:
                log.exception("%s failed", what)

        task = asyncio.ensure_future(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _when_stopped(self, key, then, if_not_stopped) -> None:
        user, name = key
        try:
            if await self.hub.wait_stopped(user, name):
                await then()
            else:
                if_not_stopped()
        except Exception:
            log.exception("closing %s/%r after its stop failed", user, name)
        finally:
            self.stopping.discard(key)

    async def close(self, timeout: float = 5) -> None:
        """Let background stops finish (at most ``timeout`` seconds) before the service exits."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)

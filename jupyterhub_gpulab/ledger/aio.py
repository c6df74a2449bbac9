"""The one async seam for the ledger (as ``DockerSpawner.docker()`` is the one for docker-py).

The :class:`~.ledger.Ledger` is synchronous (SQLAlchemy sessions, row locks); the hub and the
service run on an event loop. Every blocking call they make (the ledger's, and work that reads
NVML or the inventory with it) goes through :func:`call`, never ``asyncio.to_thread`` at the
call site, so how such work leaves the loop (today: the loop's default thread pool, with the
caller's context variables) is decided here, once.

A function that makes several ledger calls should be passed whole (one trip to a thread):
under a burst of spawns every extra ``await`` queues behind the hub's other work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


async def call(fn: Callable[..., T], /, *args, **kwargs) -> T:
    """``fn(*args, **kwargs)`` in a worker thread; returns its result, raises what it raises.

    ``await call(ledger.release, allocation_id, "stopped")`` -> ``bool``.
    """
    return await asyncio.to_thread(fn, *args, **kwargs)

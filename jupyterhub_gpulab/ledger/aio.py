"""The one async seam for the ledger (as ``DockerSpawner.docker()`` is the one for docker-py).

The :class:`~.ledger.Ledger` is synchronous (SQLAlchemy sessions, row locks); the hub and the
service run on an event loop. Every blocking call they make (the ledger's, and work that reads
NVML or the inventory with it) goes through :func:`call`, never ``asyncio.to_thread`` at the
call site, so how such work leaves the loop (today: the loop's default thread pool, with the
caller's context variables) is decided here, once.

A function that makes several ledger calls should be passed whole (one trip to a thread):
under a burst of spawns every extra ``await`` queues behind the hub's other work.

A function that writes a SQLite ledger goes through :func:`write`: one thread per ledger takes
the process's writes in turn, so that they never meet at SQLite's lock, where a writer that
finds it taken sleeps in SQLite's busy handler (1, 2, 5, 10, 15, 20, 25 … 100 ms, however soon
the lock frees). A burst of 40 spawns made 36 refused claims queue that way on the loop's six
threads: each waited tens of milliseconds for a lock held about one (issue 21 item 6).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

#: ``{ledger: its writes' one thread}``, for SQLite ledgers (:func:`write`)
_writers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_writers_lock = threading.Lock()


async def call(fn: Callable[..., T], /, *args, **kwargs) -> T:
    """``fn(*args, **kwargs)`` in a worker thread; returns its result, raises what it raises.

    ``await call(ledger.release, allocation_id, "stopped")`` -> ``bool``.
    """
    return await asyncio.to_thread(fn, *args, **kwargs)


def _writer(ledger) -> ThreadPoolExecutor | None:
    """The one thread of ``ledger``'s writes in this process; ``None`` unless it is SQLite."""
    if getattr(ledger, "dialect", None) != "sqlite":
        return None
    with _writers_lock:
        found = _writers.get(ledger)
        if found is None:
            found = _writers[ledger] = ThreadPoolExecutor(1, thread_name_prefix="gpulab-writes")
        return found


async def write(ledger, fn: Callable[..., T], /, *args, **kwargs) -> T:
    """:func:`call` for ``fn``, which writes ``ledger``: on SQLite, on the ledger's one writing
    thread, after the process's writes asked before it (module docstring); on PostgreSQL (row
    locks, no single writer) as :func:`call`.

    ``await write(rt.ledger, rt.ledger.release, allocation_id, "stopped")`` -> ``bool``.
    """
    writer = _writer(ledger)
    if writer is None:
        return await call(fn, *args, **kwargs)
    run = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(writer, run)


#: ``{(loop, ledger, fn): (items, task)}``: the batches of :func:`write_batched` not yet taken
#: by a writing thread (items join until then; a batch's end removes it)
_batches: dict = {}
_batches_lock = threading.Lock()


async def write_batched(ledger, fn: Callable[[list], T], item) -> T:
    """:func:`write` for ``fn([item, …])`` with every ``item`` asked of ``fn`` on this loop
    before the writing thread took the batch: one transaction for a storm's starts instead of
    one each. Returns ``fn``'s result, raises what it raised (to every caller of the batch); a
    cancelled caller's item is still written.

    ``await write_batched(rt.ledger, rt.ledger.set_containers, (aid, cid, name))`` -> ``None``.
    """
    loop = asyncio.get_running_loop()
    key = (loop, ledger, fn)
    with _batches_lock:
        batch = _batches.get(key)
        if batch is None:
            items: list = []
            task = loop.create_task(write(ledger, _take_batch, key, items, fn))
            # a batch whose task ended before the writer took it (cancelled as the loop stops)
            # must not take later items into a task that is done
            task.add_done_callback(functools.partial(_close_batch, key, items))
            batch = _batches[key] = (items, task)
        batch[0].append(item)
    return await asyncio.shield(batch[1])


def _close_batch(key, items: list, _task=None) -> None:
    """Close the batch of ``items`` to later items (a no-op once it is closed)."""
    with _batches_lock:
        if _batches.get(key, (None,))[0] is items:
            del _batches[key]


def _take_batch(key, items: list, fn: Callable[[list], T]) -> T:
    """On the writing thread: close the batch to later items (none joins it after), then
    write it."""
    _close_batch(key, items)
    return fn(list(items))

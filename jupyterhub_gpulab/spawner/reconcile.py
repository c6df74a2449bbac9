"""The continuous reconcile: every allocation ends, and no container holds what the ledger did not give it.

Runs in the hub process: one task per lab runtime (one per process), a pass every
``c.GPUDockerSpawner.reconcile_interval`` seconds. A pass costs one ledger query (the open
allocations), one ``docker ps -a`` sorted into this lab's containers by
:meth:`~.runtime.LabRuntime.our_containers` (the lab id labels, :mod:`.engine`; other labs'
containers are never touched, only reported when they hold this lab's GPUs) and a walk over
JupyterHub's in-memory servers (:func:`active_servers`); :func:`plan` (pure) decides, then the pass
closes allocations and removes containers, logging each with its reason.

"Still starting" is what JupyterHub knows (a spawn, check or stop pending on the server) and what
Docker knows (a container labelled with the allocation, under the server's name), never an
allocation's age. The rule, for each open allocation on this node:

- no server of this hub is running or starting for its user and server name: closed
  (``reconciled:no-server``), its containers removed;
- the server is pending (spawn, check, stop): kept, unless the server already holds another
  allocation (``reconciled:not-held``);
- the server is ready and holds it: kept (the server's ``poll()`` watches its container);
- the server is ready and holds none, with a running container of this allocation under its
  name (the hub restarted while the server started and lost its state): kept, for the server's
  ``poll()`` to adopt or remove; otherwise closed (``reconciled:not-held``).

A labelled container whose allocation is not open is removed unless a server of this hub runs
under its name (that server's ``poll()`` re-adopts or removes it).

Several hubs may share one ledger (the lab's "hub replicas", on PostgreSQL) and one engine, one
hub per node name (``c.GPULab.node_name``): the node name tells one hub's allocations and
containers from another's. A pass judges only its own: it closes open allocations on its node,
and removes only containers labelled with its node (or with no node), never one whose allocation
the ledger holds open on another node: that container is the other hub's, whose pass and
servers' ``poll()`` judge it. A container labelled with another node is this hub's only when its
allocation is open on this node (a renamed ``c.GPULab.node_name`` moved it here). A hub whose
backend runs servers on several nodes (the Swarm backend) reconciles every node's allocations
(``node=None``), its objects being services that carry the same labels
(:class:`~.labobject.LabObject`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

from ..ledger import Allocation, Ledger, aio
from .labobject import LabObject, another_hubs, foreign_reason

__all__ = [
    "NO_SERVER",
    "NOT_HELD",
    "ActiveServer",
    "LabObject",
    "Plan",
    "Reconciler",
    "active_servers",
    "foreign_reason",
    "plan",
]

log = logging.getLogger(__name__)

#: End reasons a pass writes.
NO_SERVER = "reconciled:no-server"
NOT_HELD = "reconciled:not-held"


@dataclass(frozen=True)
class ActiveServer:
    """What the hub's memory holds for one active server, read from its spawner in the hub
    process: ``pending`` is ``Spawner.pending`` (``"spawn"``, ``"check"``, ``"stop"``, ...;
    ``None`` when ready). (The service's record of a server, from the hub's REST API, is
    :class:`~jupyterhub_gpulab.hubapi.servers.HubServer`.)"""

    pending: str | None
    allocation_id: int | None
    object_name: str


def active_servers(users: Iterable) -> dict[tuple[str, str], ActiveServer]:
    """``{(user, server name): ActiveServer}`` for every server JupyterHub runs or is starting,
    from its in-memory users (``app.users.values()``, which holds at least every active user).
    Reads memory only; call it on the hub's event loop."""
    out = {}
    for user in list(users):
        for name, sp in list(user.spawners.items()):
            if not sp.active:
                continue
            out[(user.name, name or "")] = ActiveServer(
                pending=sp.pending or None,
                allocation_id=getattr(sp, "allocation_id", None),
                object_name=getattr(sp, "object_name", ""),
            )
    return out


@dataclass(frozen=True)
class Plan:
    """What a pass does: ``close`` (allocation, reason) pairs, ``remove`` (container, why)."""

    close: tuple[tuple[Allocation, str], ...] = ()
    remove: tuple[tuple[LabObject, str], ...] = ()


def plan(
    open_allocations: Iterable[Allocation],
    containers: Iterable[LabObject],
    servers: Mapping[tuple[str, str], ActiveServer],
    node: str | None = None,
) -> Plan:
    """Decide a pass (the rules are in the module docstring) for the hub of ``node`` (``None``:
    one hub for every node). ``open_allocations``: every open allocation of the ledger, on any
    node. Read the ledger first, Docker second and ``servers`` last: an allocation claimed
    before the ledger read then shows its spawn as pending or finished, never as not yet begun."""
    everywhere = {a.id: a for a in open_allocations}
    open_allocations = [a for a in everywhere.values() if node is None or a.node == node]
    containers = [
        c for c in containers if not another_hubs(c, node, everywhere.get(c.allocation_id))
    ]
    labelled: dict[int, list[LabObject]] = defaultdict(list)
    for c in containers:
        if c.allocation_id is not None:
            labelled[c.allocation_id].append(c)
    close: list[tuple[Allocation, str]] = []
    kept: set[int] = set()
    for a in open_allocations:
        if a.hold_until is not None:
            continue  # a waitlist hold has no server yet; the service lapses it (ledger.waitlist)
        s = servers.get((a.user, a.server_name))
        if s is None:
            close.append((a, NO_SERVER))
            continue
        if s.pending:
            keep = s.allocation_id in (None, a.id)
        elif s.allocation_id == a.id:
            keep = True
        else:
            keep = s.allocation_id is None and any(
                c.name == s.object_name and c.state == "running" for c in labelled[a.id]
            )
        if keep:
            kept.add(a.id)
        else:
            close.append((a, NOT_HELD))
    remove: list[tuple[LabObject, str]] = []
    for c in containers:
        if c.allocation_id is None or c.allocation_id in kept:
            continue
        s = servers.get((c.user or "", c.server_name or ""))
        if s is not None and s.object_name == c.name:
            continue  # that server's start or poll() deals with its own container
        remove.append((c, f"its allocation {c.allocation_id} is not held by a running server"))
    return Plan(tuple(close), tuple(remove))


class Reconciler:
    """The periodic pass for one lab runtime, on the hub's event loop.

    ``list_objects`` returns this lab's labelled containers in any state and ``remove_object``
    removes one by id (the spawner backend's, :mod:`.core`); ``node`` is the node whose
    allocations it reconciles (``None``: every node's); ``users`` returns JupyterHub's
    in-memory users (``app.users.values()``); ``interval_s`` is the pause between passes (seconds); ``log`` is
    where passes report (the hub's log).
    """

    def __init__(
        self,
        ledger: Ledger,
        node: str | None,
        *,
        list_objects: Callable[[], Awaitable[list[LabObject]]],
        remove_object: Callable[[str], Awaitable],
        users: Callable[[], Iterable],
        interval_s: float,
        log: logging.Logger | logging.LoggerAdapter = log,
    ):
        self.log = log
        self.ledger = ledger
        self.node = node
        self.list_objects = list_objects
        self.remove_object = remove_object
        self.users = users
        self.interval_s = interval_s
        self.passes = 0
        self.last_pass_s: float | None = None
        self._task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def running(self) -> bool:
        return (
            self._task is not None
            and not self._task.done()
            and self._loop is asyncio.get_running_loop()
        )

    def start(self) -> None:
        """Start the passes on the running loop (the first one now); no-op when running."""
        if self.running:
            return
        self._loop = asyncio.get_running_loop()
        where = self.node or "every node"
        self._task = self._loop.create_task(self._run(), name=f"gpulab-reconcile-{where}")
        self.log.info("gpulab reconcile: a pass every %g s on %s", self.interval_s, where)

    def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            with contextlib.suppress(RuntimeError):  # its loop is already closed
                task.get_loop().call_soon_threadsafe(task.cancel)

    async def _run(self) -> None:
        while True:
            try:
                await self.run_pass()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.log.exception(
                    "gpulab reconcile pass failed; trying again in %g s", self.interval_s
                )
            await asyncio.sleep(self.interval_s)

    async def run_pass(self) -> Plan:
        """One pass: read, :func:`plan`, act. Returns the plan it carried out."""
        t0 = time.perf_counter()
        allocs = await aio.call(self.ledger.open_allocations)
        containers = await self.list_objects()
        p = plan(allocs, containers, active_servers(self.users()), self.node)
        for a, reason in p.close:
            if await aio.call(self.ledger.release, a.id, reason):
                self.log.warning(
                    "gpulab reconcile: closed allocation %d (%s's server %r on %s): %s",
                    a.id,
                    a.user,
                    a.server_name,
                    a.slice_id,
                    reason,
                )
        for c, why in p.remove:
            self.log.warning("gpulab reconcile: removing %s: %s", c.describe(), why)
            try:
                await self.remove_object(c.id)
            except Exception as e:
                self.log.warning("gpulab reconcile: could not remove %s: %s", c.id[:12], e)
        self.passes += 1
        self.last_pass_s = time.perf_counter() - t0
        self.log.debug(
            "gpulab reconcile pass %d: %.1f ms, %d open allocation(s) in the ledger, %d container(s)",
            self.passes,
            1000 * self.last_pass_s,
            len(allocs),
            len(containers),
        )
        return p

"""The server's service on Swarm, in SwarmSpawner's terms: create it, wait for its task, find
its address, poll it (part of :class:`~.gpuswarm.GPUSwarmSpawner`, after the core in the MRO, so
the core's ``poll()`` wraps this one). Swarm's nodes are read here too (at most every
:data:`NODES_MAX_AGE_S` seconds, shared by the class's spawners) and recorded in the ledger, so a
node Swarm cannot place on takes no new claim.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone

from traitlets import HasTraits

from ..backends import swarmspec
from ..backends.dockerengine import NotFound
from ..ledger import aio
from . import swarmtasks
from .swarmnodes import engine_nodes

#: How long a read of Swarm's nodes is reused (seconds): a spawn storm asks once.
NODES_MAX_AGE_S = 2.0


def _age_s(service: dict) -> float:
    """Seconds since Swarm created ``service`` (``inf`` when it does not say)."""
    created = (service.get("CreatedAt") or "").rstrip("Z")
    try:
        at = datetime.fromisoformat(created[:26]).replace(tzinfo=timezone.utc)
    except ValueError:
        return float("inf")
    return (datetime.now(timezone.utc) - at).total_seconds()


class SwarmTaskError(RuntimeError):
    """Swarm could not place or run a server's task: ``reason`` (``unplaceable``,
    ``task-failed``, ``task-exited``…), ``node`` (the lab's name), ``detail`` (Swarm's words)."""

    def __init__(self, reason: str, node: str | None, detail: str):
        super().__init__(f"{reason} on node {node}: {detail}")
        self.reason, self.node, self.detail = reason, node, detail


class SwarmService(HasTraits):
    """Needs the core's ``_current_slice``, ``_current_profile``, ``runtime()`` and the
    Swarm backend's traits (``node_addresses``, ``volume_driver``) and ``_attach_slice``."""

    _pin: str | None = None
    _avoid: tuple[str, ...] = ()
    _nodes_read: tuple[float, list, dict] | None = None

    # -- Swarm's nodes -------------------------------------------------------------------------

    async def _nodes(self, max_age: float = NODES_MAX_AGE_S) -> list[dict]:
        """``docker node ls`` (at most ``max_age`` seconds old, shared by this class's spawners),
        recorded in the ledger when it changed."""
        cls = type(self)
        read = cls._nodes_read
        if read is not None and time.monotonic() - read[0] <= max_age:
            return read[1]
        rows = await self.docker("nodes")
        seen = engine_nodes(rows)
        if read is None or read[2] != seen:
            changed = await aio.call(self.runtime().ledger.record_engine, "swarm", seen)
            for name in changed:
                self.log.warning("gpulab: Swarm node %s is now %s", name, seen.get(name))
        cls._nodes_read = (time.monotonic(), rows, seen)
        return rows

    async def _placement(self, s) -> None:
        """The node id a server of slice ``s`` is pinned to (a CPU course server: the node of
        its course volumes, ``course_node``), or (neither) the node ids it must avoid; refuses
        a node Swarm does not list, and a course server's node that is out of service."""
        await self._nodes()
        course = getattr(self, "course_node", None)
        want = s.node if s is not None else course
        out = await aio.call(self.runtime().ledger.nodes)
        if want is not None:
            seen = type(self)._nodes_read[2]
            node = seen.get(want)
            if node is None:
                await self._nodes(max_age=0)
                node = type(self)._nodes_read[2].get(want)
            if node is None:
                raise SwarmTaskError(
                    "unplaceable",
                    want,
                    "the Swarm lists no node of that name (its hostname or "
                    "its org.jupyter.gpulab.node label)",
                )
            if s is None and any(n.name == want and not n.available for n in out):
                raise SwarmTaskError(
                    "unplaceable",
                    want,
                    "the node holding this course server's files is out of service",
                )
            self._pin, self._avoid = node.id, ()
            return
        self._pin = None
        self._avoid = tuple(n.engine_id for n in out if not n.available and n.engine_id)

    async def _address(self, node_id: str) -> str:
        rows = await self._nodes()
        row = next((r for r in rows if r["ID"] == node_id), None)
        if row is None:
            rows = await self._nodes(max_age=0)
            row = next((r for r in rows if r["ID"] == node_id), None)
        if row is None:
            raise RuntimeError(f"Swarm lists no node {node_id}")
        [(name, node)] = engine_nodes([row]).items()
        return self.node_addresses.get(name) or node.address

    def _node_name(self, node_id: str | None) -> str | None:
        read = type(self)._nodes_read
        if read is None or node_id is None:
            return None
        return next((name for name, n in read[2].items() if n.id == node_id), None)

    # -- SwarmSpawner's object, in gpulab's terms (after the core in the MRO: its poll wraps) --

    async def create_object(self):
        """Create the server's service (:mod:`~jupyterhub_gpulab.backends.swarmspec`), pinned and labelled."""
        s = self._current_slice
        await self._placement(s)
        kwargs = swarmspec.service_spec(
            name=self.object_name,
            image=self.image,
            env=self.get_env(),
            args=await self._command(),
            labels={},
            port=self.port,
            constraints=[],
            hardening=self.hardening_for(self._current_profile),
            mounts=swarmspec.mounts_from_binds(self.volume_binds, self.volume_driver),
            shm_size=self._shm_bytes(),
            mem_limit=self.mem_limit,
            cpu_limit=self.cpu_limit,
            mem_guarantee=self.mem_guarantee,
            cpu_guarantee=self.cpu_guarantee,
            networks=[self.network_name] if self.network_name else [],
            extra={
                k: getattr(self, k)
                for k in (
                    "extra_container_spec",
                    "extra_resources_spec",
                    "extra_placement_spec",
                    "extra_task_spec",
                    "extra_endpoint_spec",
                    "extra_create_kwargs",
                )
            },
        )
        return await self.docker("create_service", **kwargs)  # the slice attached there

    async def _command(self) -> list[str]:
        """DockerSpawner's command (the image's own CMD, read on the manager, unless
        ``c.Spawner.cmd`` says); where the manager lacks the image (GPU nodes hold it, a manager
        need not), JupyterHub's ``jupyterhub-singleuser``."""
        try:
            return await self.get_command()
        except NotFound:
            self.log.info(
                "gpulab: image %s is not on the Swarm manager, so its CMD is unknown: running "
                "jupyterhub-singleuser (set c.Spawner.cmd to choose)",
                self.image,
            )
            return ["jupyterhub-singleuser", *self.get_args()]

    async def _tasks(self) -> list[dict]:
        return await self.docker("tasks", filters={"service": self.object_id or self.object_name})

    async def start_object(self):
        """Wait until Swarm runs the task (raising :class:`SwarmTaskError` at once when it
        cannot place it or it fails)."""
        delay = 0.25
        while True:
            tasks = await self._tasks()
            verdict = swarmtasks.service_state(tasks)
            if verdict.running:
                return
            problem = swarmtasks.unplaceable(tasks)
            if problem:
                await self._nodes(max_age=0)  # record why in the ledger: no new claim there
                raise SwarmTaskError("unplaceable", self._slice_node(), problem)
            if verdict.state == "gone":
                raise SwarmTaskError(
                    verdict.reason or "task-gone", self._node_name(verdict.node_id), verdict.detail
                )
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 1.0)

    def _slice_node(self) -> str | None:
        return self._current_slice.node if self._current_slice is not None else None

    async def get_ip_and_port(self):
        """The task's node's address and its published port (host mode)."""
        task = swarmtasks.current_task(await self._tasks())
        if task is None or not task.get("NodeID"):
            raise RuntimeError(f"{self.object_name} has no task on a node")
        port = swarmtasks.published_port(task, self.port)
        if port is None:
            raise RuntimeError(f"{self.object_name}'s task publishes no port {self.port}")
        return await self._address(task["NodeID"]), port

    async def poll(self):
        """``None`` while Swarm runs (or starts) the task; else why not, with ``_gone`` set for
        the core: ``node-lost`` and ``task-failed`` tell the user."""
        service = await self.get_object()
        if service is None:
            if not self._removed_foreign:
                self._gone = ("service-gone", None)
            return 0
        await self._nodes()  # Swarm's node states reach the ledger before any slice is freed
        tasks = await self._tasks()
        verdict = swarmtasks.service_state(tasks)
        if not tasks and _age_s(service) > swarmtasks.NO_TASK_GRACE_S:
            verdict = swarmtasks.TaskVerdict("gone", "task-gone", "Swarm made no task for it")
        if verdict.state != "gone":
            return None
        if verdict.reason == "node-lost":
            # Swarm gave up on the node after the (up to NODES_MAX_AGE_S old) read above: read
            # again, so the ledger has the node out of service before this slice is freed
            await self._nodes(max_age=0)
        node = self._node_name(verdict.node_id) or "?"
        label = f"Your server '{self.name}'" if self.name else "Your server"
        message = {
            "node-lost": f"{label} was stopped: the GPU server it ran on ({node}) stopped "
            "answering. Start it again: it will run on a server that is up.",
            "task-failed": f"{label} was stopped: it failed on {node} ({verdict.detail[:200]}). "
            "Start it again; if it fails again, tell the administrators.",
        }.get(verdict.reason)
        self._gone = (verdict.reason, message)
        return f"Swarm task {verdict.reason} on {node}: {verdict.detail}"

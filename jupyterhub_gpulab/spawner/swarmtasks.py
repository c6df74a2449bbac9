"""What Docker Swarm says of a server's service: its task's state, why it is gone, where it runs.

A gpulab service runs one task and Swarm never restarts it (restart condition ``none``: a failed
or lost server is released and reported, as a container that died would be; the next start makes
a new service). So the service's story is its current task (:func:`current_task`: the one Swarm
wants running, else the newest):

- ``new`` … ``starting``: starting (``pending`` with "no suitable node": it cannot be placed,
  :func:`unplaceable`: its node is down, drained or paused);
- ``running``: running;
- Swarm no longer wants it running (``DesiredState`` ``shutdown``, no task to replace it): gone.
  A task still reported ``running`` (or starting) there means its node stopped answering: Swarm
  gave up on it (``node-lost``); the container, if its host still runs it, is stopped when the
  node's engine comes back;
- no task yet: starting (Swarm makes it a moment after the service; a service that stays without
  one for :data:`NO_TASK_GRACE_S` is gone);
- ``complete``: the server exited by itself (``task-exited``); ``failed``/``rejected``:
  ``task-failed`` with Swarm's error; ``orphaned``: ``node-lost``; ``shutdown``/``remove`` or no
  task at all: ``task-gone``.

A running task on a node that just went down stays running until Swarm gives up on it (about
ten seconds after the node's last heartbeat): Swarm decides, gpulab follows. Pure: the inputs are
``docker service ps``'s rows (``APIClient.tasks``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "NO_TASK_GRACE_S",
    "STARTING",
    "TaskVerdict",
    "current_task",
    "published_port",
    "service_state",
    "unplaceable",
]

#: Seconds a service may have no task before it counts as gone (``task-gone``).
NO_TASK_GRACE_S = 60

#: Task states before ``running``.
STARTING = frozenset(
    {"new", "allocated", "pending", "assigned", "accepted", "preparing", "ready", "starting"}
)
_TERMINAL = {
    "complete": "task-exited",
    "failed": "task-failed",
    "rejected": "task-failed",
    "orphaned": "node-lost",
    "shutdown": "task-gone",
    "remove": "task-gone",
}


@dataclass(frozen=True)
class TaskVerdict:
    """``state``: ``starting``, ``running`` or ``gone``; for ``gone``, ``reason`` is the
    allocation's end reason (``node-lost``, ``task-failed``, ``task-exited``, ``task-gone``);
    ``detail`` is Swarm's own words (its error or message); ``node_id``: the task's node."""

    state: str
    reason: str | None = None
    detail: str = ""
    node_id: str | None = None

    @property
    def running(self) -> bool:
        return self.state == "running"


def _version(task: Mapping) -> int:
    return int((task.get("Version") or {}).get("Index") or 0)


def current_task(tasks: Iterable[Mapping]) -> Mapping | None:
    """The task Swarm wants running (the newest such), else the newest task; ``None``."""
    tasks = list(tasks)
    if not tasks:
        return None
    wanted = [t for t in tasks if t.get("DesiredState") == "running"]
    return max(wanted or tasks, key=_version)


def _detail(task: Mapping) -> str:
    status = task.get("Status") or {}
    err = status.get("Err") or ""
    msg = status.get("Message") or ""
    code = (status.get("ContainerStatus") or {}).get("ExitCode")
    parts = [p for p in (err, msg) if p]
    if code not in (None, 0):
        parts.append(f"exit code {code}")
    return "; ".join(dict.fromkeys(parts))


def service_state(tasks: Iterable[Mapping]) -> TaskVerdict:
    """The verdict on a service from its tasks (module docstring)."""
    task = current_task(tasks)
    if task is None:
        # a service Swarm has just created has no task for a moment (poll() gives up on one
        # that stays without: NO_TASK_GRACE_S)
        return TaskVerdict("starting", None, "Swarm has made no task for it yet")
    state = ((task.get("Status") or {}).get("State") or "").lower()
    node = task.get("NodeID") or None
    detail = _detail(task)
    if task.get("DesiredState") == "running" or (
        task.get("DesiredState") in (None, "") and state in STARTING | {"running"}
    ):
        if state == "running":
            return TaskVerdict("running", None, detail, node)
        if state in STARTING:
            return TaskVerdict("starting", None, detail, node)
    if state in STARTING | {"running"}:
        # Swarm wants it shut down but its node never said it stopped: the node is gone
        return TaskVerdict("gone", "node-lost", detail or "its node stopped answering", node)
    return TaskVerdict("gone", _TERMINAL.get(state, "task-gone"), detail or state, node)


def unplaceable(tasks: Iterable[Mapping]) -> str | None:
    """Swarm's reason when the current task cannot be placed ("no suitable node (…)"), else
    ``None``."""
    task = current_task(tasks)
    if task is None:
        return None
    status = task.get("Status") or {}
    if (status.get("State") or "").lower() != "pending":
        return None
    err = status.get("Err") or ""
    return err if "no suitable node" in err else None


def published_port(task: Mapping, target_port: int) -> int | None:
    """The host port a task publishes ``target_port`` on (host mode), or ``None``."""
    ports = ((task.get("Status") or {}).get("PortStatus") or {}).get("Ports") or []
    for p in ports:
        if p.get("TargetPort") == target_port and p.get("PublishedPort"):
            return int(p["PublishedPort"])
    return None

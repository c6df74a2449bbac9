"""The Swarm backend: the manager's engine for what Swarm knows (services, tasks, nodes, the
images the manager holds), each node's own engine for what only that node can do (run a command
in a server's container, read its files, read and write the volumes it holds). Blocking
(docker-py).

Where each course call runs (:mod:`jupyterhub_gpulab.courses`):

- Distribute, the content-status read: on the engine of the node whose task runs the student's
  course server (the task's ``NodeID``, named as the lab names nodes: :mod:`..spawner.swarmnodes`);
- Collect, Return, the first-start copy, the staff folder: on the engine of the node that holds
  the volume (:class:`~.volumes.NodeVolumes`; a new one on the node named ``near``, else the first
  of ``node_engines``); a course server runs on the node holding its course volumes
  (:mod:`jupyterhub_gpulab.courses.coursenode`);
- the repository check: a short-lived container on the first node engine (the lab's network
  there is the nodes' own bridge).

Node engines are ``c.GPUSwarmSpawner.node_engines`` (``{node: Docker URL}``); without them only
the manager's engine is asked (a one-node Swarm).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from ..spawner.container import LABEL_USER
from ..spawner.swarmnodes import name_of
from ..spawner.swarmtasks import current_task
from .base import Backend, EngineError, Server, server_filters
from .dockerengine import ENGINE_ERRORS, Engine, api_client, gone_or_removed, spawner_setting
from .volumes import NodeVolumes

__all__ = ["SwarmBackend"]

log = logging.getLogger(__name__)

_SECTIONS = ("GPUSwarmSpawner", "SwarmSpawner", "DockerSpawner")


class SwarmBackend(Backend):
    """Every engine call of a lab on a Docker Swarm (module docstring): ``manager``, an
    :class:`~.dockerengine.Engine` of a manager; ``nodes``: ``{node name: Engine}``."""

    def __init__(self, manager: Engine, nodes: Mapping[str, Engine], network: str = "bridge"):
        self.manager, self.nodes, self.network = manager, dict(nodes), network

    @classmethod
    def from_config(cls, config, connect: Callable[[], object] | None = None) -> SwarmBackend:
        """The manager the spawner uses (as :class:`~.dockerengine.DockerBackend`'s engine;
        ``connect``: the ``APIClient`` already made for it) and ``node_engines``."""
        tls = spawner_setting(config, "tls_config", None, _SECTIONS)
        kwargs = spawner_setting(config, "client_kwargs", {}, _SECTIONS)
        urls = dict(spawner_setting(config, "node_engines", {}, _SECTIONS) or {})

        def engine(url: str | None) -> Engine:
            return Engine(lambda: api_client(url, tls=tls, client_kwargs=kwargs))

        manager = Engine(connect) if connect is not None else engine(None)
        return cls(manager, {n: engine(u) for n, u in urls.items()})

    # -- a server's object: a service, on the manager ------------------------------------------

    def create_server(self, request: Mapping) -> dict:
        return self.manager.api.create_service(**request)

    def start_server(self, object_id: str) -> None:
        """Nothing to do: Swarm runs a service's task itself (the spawner waits for it)."""

    def remove_server(self, object_id: str) -> bool:
        return gone_or_removed(self.manager.api.remove_service, object_id)

    # -- where a server runs -----------------------------------------------------------------

    def _node_names(self) -> dict[str, str]:
        try:
            return {row["ID"]: name_of(row) for row in self.manager.api.nodes()}
        except ENGINE_ERRORS as e:
            raise EngineError(f"the Swarm manager does not answer: {e}") from e

    def _on(self, node: str) -> Engine:
        if node in self.nodes:
            return self.nodes[node]
        if not self.nodes:
            return self.manager  # a one-node Swarm: the manager is the node
        raise EngineError(
            f"no engine of node {node!r} is configured (c.GPUSwarmSpawner.node_engines)"
        )

    def servers(self, server_name=None, lab_id=None) -> list[Server]:
        api = self.manager.api
        services = api.services(filters={"label": server_filters(server_name, lab_id)})
        names = self._node_names() if services else {}
        out = []
        for svc in services:
            task = current_task(api.tasks(filters={"service": svc["ID"]}))
            status = (task or {}).get("Status") or {}
            cid = (status.get("ContainerStatus") or {}).get("ContainerID")
            if not cid or status.get("State") != "running":
                continue
            labels = (svc.get("Spec") or {}).get("Labels") or {}
            node = names.get(task.get("NodeID"), "")
            out.append(Server(cid, labels.get(LABEL_USER, ""), node, labels))
        return out

    # -- on a server's node --------------------------------------------------------------------

    def exec_run(self, server: Server, cmd, user: str = "") -> tuple[int, bytes]:
        return self._on(server.node).exec_run(server.id, cmd, user)

    def get_file(self, server: Server, path: str, max_bytes: int) -> bytes | None:
        return self._on(server.node).get_file(server.id, path, max_bytes)

    def storage(self, image: str, near: str | None = None) -> NodeVolumes:
        engines = self.nodes or {"": self.manager}
        return NodeVolumes({n: e.volumes(image) for n, e in engines.items()}, near=near)

    def run_once(self, image, cmd, *, environment, labels, mem_limit, timeout_s):
        engine = next(iter(self.nodes.values()), self.manager)
        return engine.run_once(
            image, cmd, network="bridge", environment=environment, labels=labels,
            mem_limit=mem_limit, timeout_s=timeout_s,
        )  # fmt: skip

    # -- the manager ---------------------------------------------------------------------------

    def image_labels(self, image: str) -> dict | None:
        return self.manager.image_labels(image)

    def gateway(self, network: str = "bridge") -> str:
        return self.manager.gateway(network)

    def containers(self, all: bool = False) -> list[dict]:
        return self.manager.api.containers(all=all)

    def inspect_container(self, container_id: str) -> dict:
        return self.manager.api.inspect_container(container_id)

    def info(self) -> dict:
        return self.manager.api.info()

    def close(self) -> None:
        for e in (self.manager, *self.nodes.values()):
            e.close()

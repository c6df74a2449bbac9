"""The one vocabulary every backend answers (:mod:`jupyterhub_gpulab.backends`), and what the Docker
and Swarm backends share. Blocking (docker-py): async callers go through
:func:`jupyterhub_gpulab.ledger.aio.call`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..spawner.container import LABEL_LAB, LABEL_SERVER, LABEL_USER

__all__ = ["Backend", "EngineError", "Server", "VOCABULARY"]

#: What every backend answers (a subclass leaving one out is refused when defined).
VOCABULARY = (
    "create_server",
    "start_server",
    "remove_server",
    "servers",
    "exec_run",
    "get_file",
    "storage",
    "image_labels",
    "run_once",
    "gateway",
    "containers",
    "inspect_container",
    "info",
)


class EngineError(Exception):
    """The engine cannot be asked, or cannot do what was asked (``str(e)``: why, one line)."""


@dataclass(frozen=True)
class Server:
    """A running server's container: ``id`` (the container's, on ``node``'s engine), ``user``
    (its user label), ``node`` (the lab's node name; ``""`` on one Docker host), ``labels``."""

    id: str
    user: str
    node: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)


def server_filters(server_name: str | None, lab_id: str | None) -> list[str]:
    """The label filters of the lab's servers named ``server_name`` (``None``: every name)."""
    labels = [LABEL_USER]
    if server_name is not None:
        labels.append(f"{LABEL_SERVER}={server_name}")
    if lab_id:
        labels.append(f"{LABEL_LAB}={lab_id}")
    return labels


class Backend:
    """Everything the package asks of an engine, a server's create, start and removal included
    (the spawner's, :mod:`jupyterhub_gpulab.spawner.backendbase`: DockerSpawner renders the
    request, the backend makes it). Subclasses implement every name of :data:`VOCABULARY`."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        missing = [m for m in VOCABULARY if getattr(cls, m) is getattr(Backend, m)]
        if missing:
            raise TypeError(f"{cls.__name__} is a backend without {', '.join(missing)}")

    #: the Docker network the lab's servers join (the spawner's ``network_name``)
    network: str = "bridge"

    # -- a server's object: what the spawner's start, stop and reconcile make and remove --------

    def create_server(self, request: Mapping) -> dict:
        """Create a server's object from ``request``, the docker-py keyword arguments the spawner
        rendered (``create_container``'s on one host, ``create_service``'s on a Swarm, the slice
        and the lab's labels attached); the engine's answer (``{"Id": …}``, ``{"ID": …}``).
        Raises the engine's refusal as it gives it (docker-py's ``APIError``: the spawner tells
        the user why, e.g. a missing GPU runtime)."""
        raise NotImplementedError

    def start_server(self, object_id: str) -> None:
        """Start the created object ``object_id`` (a container; a Swarm runs a service's task by
        itself). Raises the engine's refusal as it gives it."""
        raise NotImplementedError

    def remove_server(self, object_id: str) -> bool:
        """Remove server object ``object_id`` with its anonymous volumes, running or not;
        ``False`` when it is gone already or being removed. Raises the engine's other errors."""
        raise NotImplementedError

    # -- the lab's servers, and inside them ----------------------------------------------------

    def servers(self, server_name: str | None = None, lab_id: str | None = None) -> list[Server]:
        """The lab's running servers (``lab_id``: only this lab's), of server name
        ``server_name`` (``""``: default servers; ``None``: every name)."""
        raise NotImplementedError

    def exec_run(self, server: Server, cmd: Sequence[str], user: str = "") -> tuple[int, bytes]:
        """Run ``cmd`` in ``server`` (as ``user``, default the container's); ``(exit code,
        output)``. Raises :class:`EngineError` when it cannot run."""
        raise NotImplementedError

    def get_file(self, server: Server, path: str, max_bytes: int) -> bytes | None:
        """The first ``max_bytes`` of regular file ``path`` in ``server``; ``None`` when it is
        absent, not a regular file (a link, a folder) or longer than ``max_bytes`` plus a tar
        block. The engine's response is closed at once."""
        raise NotImplementedError

    def storage(self, image: str, near: str | None = None):
        """A :class:`~jupyterhub_gpulab.courses.storage.Storage` over the lab's volumes, read
        and written through never-started helper containers of ``image``; ``near``: the node
        a new volume is made on (a Swarm's; ignored on one host)."""
        raise NotImplementedError

    def image_labels(self, image: str) -> dict | None:
        """``image``'s labels; ``None`` when the engine lacks it. Raises :class:`EngineError`
        when the engine does not answer."""
        raise NotImplementedError

    def run_once(
        self,
        image: str,
        cmd: Sequence[str],
        *,
        environment: Mapping[str, str],
        labels: Mapping[str, str],
        mem_limit: str,
        timeout_s: float,
    ) -> tuple[int | None, str, str]:
        """Run ``cmd`` in a new container of ``image`` (never pulled) on the lab's network,
        removed afterwards, also after ``timeout_s`` seconds: ``(exit status or None when it
        timed out, stdout, stderr)``. Raises :class:`EngineError` when the engine cannot run
        it (no engine, no image, no such network)."""
        raise NotImplementedError

    def gateway(self, network: str = "bridge") -> str:
        """The host's IPv4 address on Docker network ``network`` (:mod:`..spawner.network`).
        Raises :class:`EngineError`."""
        raise NotImplementedError

    def containers(self, all: bool = False) -> list[dict]:
        """The engine's containers (``docker ps`` rows, docker-py ``APIClient.containers``)."""
        raise NotImplementedError

    def inspect_container(self, container_id: str) -> dict:
        raise NotImplementedError

    def info(self) -> dict:
        raise NotImplementedError

    def close(self) -> None:
        """Close the engine clients made (a later call makes new ones)."""

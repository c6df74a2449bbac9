"""The Docker backend (one engine: the lab's host), and :class:`Engine`, the calls gpulab makes
on one Docker engine, which the Swarm backend makes on each of its nodes too. Blocking
(docker-py)."""

from __future__ import annotations

import contextlib
import io
import ipaddress
import logging
import tarfile
import threading
from collections.abc import Callable, Mapping, Sequence

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from requests.exceptions import RequestException

from ..spawner.container import LABEL_USER
from .base import Backend, EngineError, Server, server_filters
from .volumes import DockerVolumes, archive

__all__ = ["DockerBackend", "Engine", "api_client", "gone_or_removed", "spawner_setting"]

log = logging.getLogger(__name__)

#: What an engine that cannot be asked raises (no socket, refused, TLS, timeouts).
ENGINE_ERRORS = (DockerException, RequestException, OSError)


def spawner_setting(config, name: str, default, sections=("GPUDockerSpawner", "DockerSpawner")):
    """The spawner's setting ``name`` in ``config`` (ours first, then DockerSpawner's)."""
    for section in sections:
        if section in config and name in config[section]:
            return config[section][name]
    return default


def api_client(base_url: str | None = None, *, tls=None, client_kwargs=None, timeout=None):
    """A docker-py ``APIClient`` for ``base_url`` (default: ``DOCKER_HOST``, else the local
    socket), with ``tls`` (``docker.tls.TLSConfig`` keyword arguments) and ``client_kwargs``
    as DockerSpawner's ``tls_config`` / ``client_kwargs``. Connects on first call."""
    from docker.utils import kwargs_from_env

    kwargs: dict = {"version": "auto", **kwargs_from_env()}
    if base_url:
        kwargs["base_url"] = base_url
    if tls:
        kwargs["tls"] = docker.tls.TLSConfig(**tls)
    if timeout is not None:
        kwargs["timeout"] = timeout
    kwargs.update(client_kwargs or {})
    try:
        return docker.APIClient(**kwargs)
    except ENGINE_ERRORS as e:
        raise EngineError(
            f"cannot reach the Docker engine at {base_url or 'DOCKER_HOST'}: {e}"
        ) from e


def gone_or_removed(remove: Callable, object_id: str, **kwargs) -> bool:
    """``remove(object_id, **kwargs)`` (a docker-py removal); ``False`` when the engine says the
    object is gone (404) or already being removed (409)."""
    try:
        remove(object_id, **kwargs)
    except APIError as e:
        if e.status_code in (404, 409):
            return False
        raise
    return True


class Engine:
    """One Docker engine, reached with a docker-py ``APIClient`` made on first use by
    ``connect`` (thread-safe)."""

    def __init__(self, connect: Callable[[], object]):
        self._connect = connect
        self._api = None
        self._lock = threading.Lock()

    @property
    def api(self):
        with self._lock:
            if self._api is None:
                self._api = self._connect()
            return self._api

    def close(self) -> None:
        with self._lock:
            if self._api is not None:
                with contextlib.suppress(Exception):
                    self._api.close()
                self._api = None

    def running(self, filters: Sequence[str]) -> list[dict]:
        """``docker ps`` rows of running containers with every label of ``filters``."""
        return self.api.containers(filters={"label": list(filters), "status": "running"})

    def exec_run(self, container_id: str, cmd: Sequence[str], user: str = "") -> tuple[int, bytes]:
        try:
            ex = self.api.exec_create(container_id, list(cmd), user=user)
            out = self.api.exec_start(ex["Id"])
            return self.api.exec_inspect(ex["Id"]).get("ExitCode") or 0, out or b""
        except ENGINE_ERRORS as e:
            raise EngineError(str(e)) from e

    def get_file(self, container_id: str, path: str, max_bytes: int) -> bytes | None:
        buf = bytearray()
        try:
            with archive(self.api, container_id, path) as res:
                for chunk in res.iter_content(4096):
                    buf += chunk
                    if len(buf) > max_bytes + 1024:  # one header block, padding
                        break
        except FileNotFoundError:
            return None
        try:
            with tarfile.open(fileobj=io.BytesIO(bytes(buf))) as tar:
                member = tar.next()
                if member is None or not member.isfile():  # a link or a folder
                    return None
                return tar.extractfile(member).read(max_bytes)
        except tarfile.TarError:  # cut short: longer than asked
            return None

    def image_labels(self, image: str) -> dict | None:
        try:
            info = self.api.inspect_image(image)
        except ImageNotFound:
            return None
        except ENGINE_ERRORS as e:
            raise EngineError(str(e)) from e
        return dict((info.get("Config") or {}).get("Labels") or {})

    def run_once(self, image, cmd, *, network, environment, labels, mem_limit, timeout_s):
        api = self.api
        try:  # not run(): that would pull a missing image
            c = api.create_container(
                image,
                list(cmd),
                entrypoint=[],
                environment=dict(environment),
                labels=dict(labels),
                host_config=api.create_host_config(network_mode=network, mem_limit=mem_limit),
            )["Id"]
        except ENGINE_ERRORS as e:
            raise EngineError(str(e)) from e
        try:
            api.start(c)
            try:
                code = api.wait(c, timeout=timeout_s).get("StatusCode", 1)
            except Exception:  # the engine's wait timed out
                return None, "", ""
            out = api.logs(c, stdout=True, stderr=False).decode("utf-8", "replace")
            err = api.logs(c, stdout=False, stderr=True).decode("utf-8", "replace")
            return code, out, err
        except ENGINE_ERRORS as e:
            raise EngineError(str(e)) from e
        finally:
            with contextlib.suppress(*ENGINE_ERRORS):
                api.remove_container(c, force=True)

    def gateway(self, network: str) -> str:
        try:
            configs = self.api.inspect_network(network).get("IPAM", {}).get("Config") or []
        except (EngineError, *ENGINE_ERRORS) as e:  # EngineError: no engine to connect to
            raise EngineError(f"cannot ask the Docker engine for network {network!r}: {e}") from e
        for cfg in configs:
            subnet = ipaddress.ip_network(cfg.get("Subnet", "::/128"), strict=False)
            if subnet.version == 4:
                return cfg.get("Gateway") or str(next(subnet.hosts()))
        raise EngineError(f"Docker network {network!r} has no IPv4 subnet")

    def volumes(self, image: str) -> DockerVolumes:
        return DockerVolumes(self.api, image)


class DockerBackend(Backend):
    """Every engine call of a lab on one Docker host (:mod:`jupyterhub_gpulab.backends`)."""

    def __init__(self, engine: Engine, network: str = "bridge"):
        self.engine, self.network = engine, network

    @classmethod
    def from_config(cls, config, connect: Callable[[], object] | None = None) -> DockerBackend:
        """The engine the spawner uses (``DOCKER_HOST``, ``c.DockerSpawner.tls_config``,
        ``client_kwargs``; ``connect``: the ``APIClient`` already made for them, the hub's
        spawner's) and the network its servers join (``network_name``)."""
        tls = spawner_setting(config, "tls_config", None)
        kwargs = spawner_setting(config, "client_kwargs", {})
        return cls(
            Engine(connect or (lambda: api_client(tls=tls, client_kwargs=kwargs))),
            network=str(spawner_setting(config, "network_name", "") or "bridge"),
        )

    @classmethod
    def on(cls, api, network: str = "bridge") -> DockerBackend:
        """A backend on an ``APIClient`` already made (the spawner's own ``client``)."""
        return cls(Engine(lambda: api), network)

    def create_server(self, request: Mapping) -> dict:
        return self.engine.api.create_container(**request)

    def start_server(self, object_id: str) -> None:
        self.engine.api.start(object_id)

    def remove_server(self, object_id: str) -> bool:
        return gone_or_removed(self.engine.api.remove_container, object_id, force=True, v=True)

    def servers(self, server_name=None, lab_id=None) -> list[Server]:
        rows = self.engine.running(server_filters(server_name, lab_id))
        return [
            Server(r["Id"], (r.get("Labels") or {}).get(LABEL_USER, ""), "", r.get("Labels") or {})
            for r in rows
        ]

    def exec_run(self, server: Server, cmd, user: str = "") -> tuple[int, bytes]:
        return self.engine.exec_run(server.id, cmd, user)

    def get_file(self, server: Server, path: str, max_bytes: int) -> bytes | None:
        return self.engine.get_file(server.id, path, max_bytes)

    def storage(self, image: str, near: str | None = None) -> DockerVolumes:
        return self.engine.volumes(image)

    def image_labels(self, image: str) -> dict | None:
        return self.engine.image_labels(image)

    def run_once(self, image, cmd, *, environment: Mapping, labels: Mapping, mem_limit, timeout_s):
        return self.engine.run_once(
            image, cmd, network=self.network, environment=environment, labels=labels,
            mem_limit=mem_limit, timeout_s=timeout_s,
        )  # fmt: skip

    def gateway(self, network: str = "bridge") -> str:
        return self.engine.gateway(network)

    def containers(self, all: bool = False) -> list[dict]:
        return self.engine.api.containers(all=all)

    def inspect_container(self, container_id: str) -> dict:
        try:
            return self.engine.api.inspect_container(container_id)
        except NotFound as e:
            raise LookupError(container_id) from e

    def info(self) -> dict:
        return self.engine.api.info()

    def close(self) -> None:
        self.engine.close()

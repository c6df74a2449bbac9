"""The Docker engine stood in at DockerSpawner's one seam, ``docker(method, …)``, through which every
engine call goes: :class:`EngineRecorder` keeps the containers it was asked to create in a dict
and records every call, and :class:`EngineFreeSpawner` is gpulab's real spawner on top of it.
Used by the engine-free spawner tests (test_spawner_rules.py, test_example_p40_lab.py), and with
:class:`HubEngine` by benchmarks/scale.py, whose hubs' spawners all answer from one such engine."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable

import requests
from docker.errors import NotFound
from dockerspawner import DockerSpawner
from jupyterhub import orm
from jupyterhub.objects import Hub
from jupyterhub.user import User
from traitlets.config import Config

from jupyterhub_gpulab.backends import backend_for
from jupyterhub_gpulab.spawner import GPUDockerSpawner

#: An engine no call may reach (``c.DockerSpawner.client_kwargs``): only the docker() seam answers.
NO_ENGINE = {"base_url": "unix:///nonexistent/docker.sock", "version": "1.43"}


def _not_found(what: str) -> NotFound:
    response = requests.Response()
    response.status_code = 404
    return NotFound(f"No such container: {what}", response=response)


class EngineRecorder(DockerSpawner):
    """DockerSpawner whose ``docker()`` seam answers from a dict of containers instead of an
    engine, and records every call as ``(method, args, kwargs)`` in ``engine_calls``.

    ``fail`` maps a method name to the exception that call raises (as the engine would); every
    container's port is published on 127.0.0.1:``host_port``."""

    host_port = "49153"
    record = True
    on_engine_thread = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.engine_calls: list[tuple[str, tuple, dict]] = []
        self.containers: dict[str, dict] = {}
        self.fail: dict[str, Exception] = {}

    def calls(self, method: str) -> list[tuple[tuple, dict]]:
        return [(a, kw) for m, a, kw in self.engine_calls if m == method]

    def _find(self, ref: str) -> dict:
        if ref in self.containers:
            return self.containers[ref]
        for c in self.containers.values():
            if ref == c["Name"]:
                return c
        raise _not_found(ref)

    async def docker(self, method, *args, **kwargs):
        if self.on_engine_thread:  # where DockerSpawner's own docker() makes every call
            return await asyncio.wrap_future(
                self.executor.submit(self._answer, method, args, kwargs)
            )
        return self._answer(method, args, kwargs)

    def _answer(self, method, args, kwargs):
        if self.record:
            self.engine_calls.append((method, args, kwargs))
        if method in self.fail:
            raise self.fail[method]
        if method == "inspect_image":
            return {"Config": {"Cmd": ["jupyterhub-singleuser"]}}
        if method == "inspect_container":
            return self._find(args[0])
        if method == "create_container":
            cid = secrets.token_hex(32)
            self.containers[cid] = {
                "Id": cid,
                "Name": kwargs["name"],
                "State": {
                    "Running": False,
                    "Status": "created",
                    "ExitCode": 0,
                    "Error": "",
                    "FinishedAt": "",
                },
                "Config": {"Env": kwargs["environment"], "Labels": kwargs.get("labels") or {}},
                "HostConfig": kwargs["host_config"],
            }
            return {"Id": cid}
        if method in ("start", "stop"):
            running = method == "start"
            state = self._find(args[0])["State"]
            state["Running"], state["Status"] = running, "running" if running else "exited"
            return None
        if method == "port":
            self._find(args[0])
            return [{"HostIp": "127.0.0.1", "HostPort": self.host_port}]
        if method == "containers":  # docker ps -a's rows, as the reconcile lists them
            return [
                {"Id": c["Id"], "Names": ["/" + c["Name"]], "State": c["State"]["Status"],
                 "Labels": c["Config"]["Labels"]}
                for c in list(self.containers.values())
                if kwargs.get("all") or c["State"]["Running"]
            ]  # fmt: skip
        if method == "remove_container":
            self.containers.pop(self._find(args[0])["Id"])
            return None
        raise AssertionError(f"the spawner made an unexpected engine call: {method}")


class _RecorderClient:
    """docker-py's ``APIClient`` as the backend calls it (``client.create_container(...)``),
    answered by an :class:`EngineRecorder`."""

    def __init__(self, recorder: EngineRecorder):
        self._recorder = recorder

    def __getattr__(self, method):
        return lambda *args, **kwargs: self._recorder._answer(method, args, kwargs)


class EngineFreeSpawner(GPUDockerSpawner, EngineRecorder):
    """GPUDockerSpawner with the recorder under it: GPUDockerSpawner.docker() (which adds the
    device request and labels) runs first, then hands each call to the recorder."""

    def lab_backend(self):
        """The lab's backend on this recorder's stand-in client: a server's create, start and
        removal and an image's labels (which the spawner sends to the backend object) answer
        from the same dict and are recorded as the engine calls they make."""
        if getattr(self, "_recorder_backend", None) is None:
            self._recorder_backend = backend_for(self.config, lambda: _RecorderClient(self))
        return self._recorder_backend


class HubEngine:
    """Put before :class:`EngineRecorder` (or :class:`EngineFreeSpawner`) in a hub's spawner
    class: every spawner of the hub process answers from one dict of containers, as spawners
    share one engine, and records no calls (a hub runs for a long time). Each call is answered
    on DockerSpawner's engine thread (its ``executor``), as its real ``docker()`` makes it: the
    same trip to a thread and back per call as on an engine, for any spawner class. Set
    ``host_port`` to where a server answers for every container (tests/standin_singleuser.py
    serves any user's prefix)."""

    engine: dict[str, dict] = {}

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.containers = HubEngine.engine
        self.record = False
        self.on_engine_thread = True


def spawner_maker(config: Config, db) -> Callable[..., EngineFreeSpawner]:
    """``make(user, groups=(), admin=False)``: an :class:`EngineFreeSpawner` for a new hub user of
    that name, a real JupyterHub ``User`` in hub database session ``db`` (``orm``), in those
    groups, with ``config``."""

    def make(name: str, groups=(), admin: bool = False) -> EngineFreeSpawner:
        orm_user = orm.User(name=name, admin=admin)
        db.add(orm_user)
        for g in groups:
            group = db.query(orm.Group).filter_by(name=g).one_or_none() or orm.Group(name=g)
            orm_user.groups.append(group)
        db.commit()
        user = User(orm_user, {"config": config, "hub": Hub()})
        return user._new_spawner("", spawner_class=EngineFreeSpawner)

    return make

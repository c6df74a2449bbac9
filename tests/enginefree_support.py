"""The Docker engine stood in at DockerSpawner's one seam, ``docker(method, …)``, through which every
engine call goes: :class:`EngineRecorder` keeps the containers it was asked to create in a dict
and records every call, and :class:`EngineFreeSpawner` is gpulab's real spawner on top of it.
Used by the engine-free spawner tests (test_spawner_rules.py, test_example_p40_lab.py)."""

from __future__ import annotations

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

    ``fail`` maps a method name to the exception that call raises (as the engine would)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.engine_calls: list[tuple[str, tuple, dict]] = []
        self.containers: dict[str, dict] = {}
        self.fail: dict[str, Exception] = {}

    def calls(self, method: str) -> list[tuple[tuple, dict]]:
        return [(a, kw) for m, a, kw in self.engine_calls if m == method]

    def _find(self, ref: str) -> dict:
        for c in self.containers.values():
            if ref in (c["Id"], c["Name"]):
                return c
        raise _not_found(ref)

    async def docker(self, method, *args, **kwargs):
        return self._answer(method, args, kwargs)

    def _answer(self, method, args, kwargs):
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
                "State": {"Running": False, "ExitCode": 0, "Error": "", "FinishedAt": ""},
                "Config": {"Env": kwargs["environment"], "Labels": kwargs.get("labels") or {}},
                "HostConfig": kwargs["host_config"],
            }
            return {"Id": cid}
        if method == "start":
            self._find(args[0])["State"]["Running"] = True
            return None
        if method == "port":
            self._find(args[0])
            return [{"HostIp": "127.0.0.1", "HostPort": "49153"}]
        if method == "stop":
            self._find(args[0])["State"]["Running"] = False
            return None
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

"""The engine seam: every call the package makes to a container engine, behind one object.

Runs wherever it is imported: in the hub (the spawner's course hook), in the gpulab service
(courses, the image-label reader) and in the ``gpulab`` command. A *backend* answers, in one
vocabulary (:class:`~.base.Backend`; docker-py's names where docker-py has one):

- a server's object: :meth:`~.base.Backend.create_server` (from the request the spawner
  rendered), :meth:`~.base.Backend.start_server`, :meth:`~.base.Backend.remove_server` (the
  spawner's start, stop, failed start and reconcile: :mod:`jupyterhub_gpulab.spawner.backendbase`);
- the lab's servers: :meth:`~.base.Backend.servers` (running servers by label, with the node each
  runs on), :meth:`~.base.Backend.containers` / ``inspect_container`` / ``info`` (the engine's
  containers, for the survey of other labs: :mod:`jupyterhub_gpulab.spawner.engine`);
- inside a server: :meth:`~.base.Backend.exec_run` (a command), :meth:`~.base.Backend.get_file`
  (one file, bounded);
- storage: :meth:`~.base.Backend.storage` (a :class:`~jupyterhub_gpulab.courses.storage.Storage`
  over the volumes of the engine that holds each one);
- images: :meth:`~.base.Backend.image_labels`; a short-lived helper:
  :meth:`~.base.Backend.run_once`; the host's address on a network: :meth:`~.base.Backend.gateway`.

Two backends, chosen from ``c.JupyterHub.spawner_class`` by :func:`backend_for`:

- :class:`~.dockerengine.DockerBackend`: one Docker engine (the spawner's, ``DOCKER_HOST`` or the
  local socket, with ``c.DockerSpawner.tls_config`` / ``client_kwargs``);
- :class:`~.swarmengine.SwarmBackend`: a Swarm's manager (services, tasks, nodes, images) and each
  node's own engine (``c.GPUSwarmSpawner.node_engines``) for what only a node can do: run a
  command in a server's container, read and write the volumes it holds.

The spawner backends (:mod:`jupyterhub_gpulab.spawner.gpudocker`, :mod:`jupyterhub_gpulab.spawner.
gpuswarm`) keep DockerSpawner's flow (its templates, pulls, waits, addresses): DockerSpawner renders
a server's request, this package makes, starts and removes the object, on the spawner's own engine
client.
"""

from __future__ import annotations

from .base import Backend, EngineError, Server

__all__ = ["Backend", "EngineError", "Server", "backend_for", "uses_swarm"]


def uses_swarm(config) -> bool:
    """Whether ``config`` (a traitlets ``Config``) runs servers with ``GPUSwarmSpawner``."""
    cls = config.JupyterHub.get("spawner_class") if "JupyterHub" in config else None
    if isinstance(cls, str):
        return cls == "gpulab-swarm" or cls.endswith("GPUSwarmSpawner")
    return any(b.__name__ == "GPUSwarmSpawner" for b in getattr(cls, "__mro__", ()))


def backend_for(config, connect=None) -> Backend:
    """The backend the lab of ``config`` runs its servers on (module docstring); ``connect``:
    a callable giving the docker-py ``APIClient`` of the servers' engine already made (the hub's
    spawner's, so the hub has one client per engine). Connects lazily: building it asks no
    engine anything."""
    if uses_swarm(config):
        from .swarmengine import SwarmBackend

        return SwarmBackend.from_config(config, connect)
    from .dockerengine import DockerBackend

    return DockerBackend.from_config(config, connect)

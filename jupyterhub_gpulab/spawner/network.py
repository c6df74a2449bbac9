"""Where the hub listens so that containers reach it: the host's address on their Docker network.

Imported by ``jupyterhub_config.py`` (runs in the hub process, once, at start). Binding the hub
there rather than on ``0.0.0.0`` keeps its API off the host's other interfaces (the campus
network), while every container on that network reaches it.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def bridge_gateway(network: str = "bridge", *, default: str | None = None, backend=None) -> str:
    """The host's IPv4 address on Docker network ``network`` (``docker0``'s, ``172.17.0.1`` on a
    stock engine): the network's gateway, or the first address of its subnet where the engine
    leaves the gateway implicit, as it does for the default bridge.

    ``backend`` is the lab's engine seam (:mod:`jupyterhub_gpulab.backends`; default: the local
    engine, ``DOCKER_HOST``, 10 s timeout). When the engine cannot be asked, returns ``default``
    with a warning, or raises ``RuntimeError`` saying why when no ``default`` is given.
    """
    from ..backends import EngineError
    from ..backends.dockerengine import DockerBackend, Engine, api_client

    if backend is None:
        backend = DockerBackend(Engine(lambda: api_client(timeout=10)))
    try:
        return backend.gateway(network)
    except EngineError as e:
        if default is None:
            raise RuntimeError(str(e)) from e
        log.warning("gpulab: %s; using %s", e, default)
        return default

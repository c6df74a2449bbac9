"""Where the hub listens so that containers reach it: the host's address on their Docker network.

Imported by ``jupyterhub_config.py`` (runs in the hub process, once, at start). Binding the hub
there rather than on ``0.0.0.0`` keeps its API off the host's other interfaces (the campus
network), while every container on that network reaches it.
"""

from __future__ import annotations

import ipaddress
import logging

log = logging.getLogger(__name__)


def bridge_gateway(network: str = "bridge", *, default: str | None = None, client=None) -> str:
    """The host's IPv4 address on Docker network ``network`` (``docker0``'s, ``172.17.0.1`` on a
    stock engine): the network's gateway, or the first address of its subnet where the engine
    leaves the gateway implicit, as it does for the default bridge.

    ``client`` is a docker-py ``DockerClient`` (default: ``docker.from_env()``). When the engine
    cannot be asked, returns ``default`` with a warning, or raises ``RuntimeError`` saying why
    when no ``default`` is given.
    """
    try:
        if client is None:
            import docker

            client = docker.from_env(timeout=10)
        configs = client.networks.get(network).attrs.get("IPAM", {}).get("Config") or []
    except Exception as e:
        if default is None:
            raise RuntimeError(f"cannot ask the Docker engine for network {network!r}: {e}") from e
        log.warning("gpulab: cannot ask Docker for network %r (%s); using %s", network, e, default)
        return default
    for cfg in configs:
        subnet = ipaddress.ip_network(cfg.get("Subnet", "::/128"), strict=False)
        if subnet.version != 4:
            continue
        return cfg.get("Gateway") or str(next(subnet.hosts()))
    if default is None:
        raise RuntimeError(f"Docker network {network!r} has no IPv4 subnet")
    return default

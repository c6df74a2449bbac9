"""What this pytest session creates on the Docker engines, told apart from everyone else's.

Every name a test derives for engine objects (a hub's container prefix and node name, hence its
containers and home/course volumes; a Swarm prefix, hence its services) comes from
:func:`unique`, which puts this session's :data:`RUN` token in it. At the session's end
``conftest.py`` lists the containers, volumes and Swarm services whose names hold the token and
fails the run when any survived (:func:`leftovers`): exact in CI, and blind to a parallel run on
the same machine, whose token differs. Objects a test names otherwise are not counted.
"""

from __future__ import annotations

import os
import secrets
import subprocess

#: This session's token (inherited by child processes that import this module, so one run's
#: helpers agree). Letters and digits only: it goes into container, volume and service names.
RUN = os.environ.setdefault("GPULAB_TEST_RUN", "r" + secrets.token_hex(3))


def unique(prefix: str) -> str:
    """``prefix`` + this session's :data:`RUN` + 4 random hex digits: a fresh name for a test's
    engine objects (``unique("gpulabtest") == "gpulabtestr1a2b3c9f0e"``)."""
    return f"{prefix}{RUN}{secrets.token_hex(2)}"


def _names(host: str | None, *args: str) -> list[str]:
    env = dict(os.environ, DOCKER_HOST=host) if host else None
    try:
        r = subprocess.run(
            ["docker", "-l", "error", *args], capture_output=True, text=True, env=env, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return [f"<cannot ask {host or 'the engine'}: {e}>"]
    if r.returncode != 0:
        return []  # no such engine here (no Swarm, no gpusim): nothing of ours can be there
    return [n for n in r.stdout.split() if RUN in n]


def leftovers(*, swarm: bool = False) -> list[str]:
    """``"kind name"`` for every container and volume (this host's engine, and the gpulab
    gpusim engine where one runs) and Swarm service (``swarm``: when Swarm tests ran) whose name
    holds :data:`RUN`."""
    ps = ("ps", "-a", "--format", "{{.Names}}")
    found = [f"container {n}" for n in _names(None, *ps)]
    found += [f"volume {n}" for n in _names(None, "volume", "ls", "-q")]
    gpusim = os.environ.get("GPULAB_GPUSIM_DOCKER_HOST", "unix:///var/run/gpulab-gpusim.sock")
    if os.path.exists(gpusim.removeprefix("unix://")):
        found += [f"gpusim container {n}" for n in _names(gpusim, *ps)]
    if swarm:
        host = os.environ.get("GPULAB_SWARM_MANAGER", "unix:///var/run/gpulab-swarm/n1.sock")
        found += [
            f"swarm service {n}" for n in _names(host, "service", "ls", "--format", "{{.Name}}")
        ]
    return found

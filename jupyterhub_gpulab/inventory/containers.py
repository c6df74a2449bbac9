"""Which Docker container a host process runs in, from its cgroup: read where the process's host
runs (the service on the hub's host, the node agent on a Swarm node), never from inside a
container, so a student cannot change the answer."""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["container_of_pid"]

# cgroup v1 ".../docker/<id>", cgroup v2 with the systemd driver ".../docker-<id>.scope", and the
# cgroupfs driver on v2 "/docker/<id>"; nested Docker lists the outer container first.
_DOCKER_ID = re.compile(r"/docker[-/]([0-9a-f]{64})(?:\.scope)?(?=/|$)")


def container_of_pid(pid: int, proc_root: str | Path = "/proc") -> str | None:
    """The 64-hex Docker container id that process ``pid`` runs in, from
    ``<proc_root>/<pid>/cgroup``; ``None`` for a process outside Docker or one that is gone."""
    try:
        text = (Path(proc_root) / str(int(pid)) / "cgroup").read_text()
    except (OSError, ValueError):
        return None
    found = None
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        for match in _DOCKER_ID.finditer(path):
            found = match.group(1)  # the innermost container
    return found

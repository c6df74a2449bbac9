"""Courses on the real test Swarm (``swarm_support``): a :class:`~swarm_support.SwarmHub` whose
lab declares a course (:func:`course_support.course_lines`), and looks into the volumes each node
engine holds (with the local volume driver a volume lives on one node: these helpers say which).

The course image (``course_support.LAB_IMAGE``: JupyterLab, git, nbgitpuller) is loaded into every
node from the main engine when a node lacks it (:func:`ensure_image_on_nodes`), as
``scripts/ensure-swarm.sh`` does for the test image: once per image build, not per run.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from course_support import COURSE_PROFILES, LAB_IMAGE, course_lines
from swarm_support import ENGINES, SwarmHub, require_swarm, sdocker

__all__ = [
    "ensure_image_on_nodes",
    "node_of_volume",
    "read_on_node",
    "remove_node_volumes",
    "swarm_course_hub",
]


def _image_id(image: str, engine: str | None = None) -> str | None:
    """``image``'s id on ``engine`` (``None``: the main engine), ``None`` when it lacks it."""
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    if engine:
        env["DOCKER_HOST"] = engine
    r = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Id}}", image],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    return r.stdout.strip() if r.returncode == 0 else None


def ensure_image_on_nodes(image: str = LAB_IMAGE) -> None:
    """Load ``image`` from the main engine into every Swarm node whose copy differs (in
    parallel; ``docker save | docker load``)."""
    want = _image_id(image)
    assert want, (
        f"{image} is not in the main engine (images/build-singleuser.sh, GPULAB_IMAGE_LAB=1)"
    )

    def load(url: str) -> None:
        if _image_id(image, url) == want:
            return
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        r = subprocess.run(
            ["docker", "load", "-q"], stdin=save.stdout, capture_output=True, text=True,
            env=dict(os.environ, DOCKER_HOST=url), timeout=600,
        )  # fmt: skip
        save.wait(60)
        assert r.returncode == 0 and save.returncode == 0, r.stderr

    with ThreadPoolExecutor(len(ENGINES)) as pool:
        list(pool.map(load, ENGINES.values()))


def swarm_course_hub(tmp_path: Path, course: dict, extra: str = "") -> SwarmHub:
    """A :class:`~swarm_support.SwarmHub` (not started) with ``course`` declared, the course
    profiles of ``course_support`` (``course-lab``: CPU; ``course-seat``: a T4 seat, on
    gpulab-swn3), home, course-work and staff-folder volumes named after the hub's prefix, and
    every node's engine known to the lab (``c.GPUSwarmSpawner.node_engines``)."""
    require_swarm()
    hub = SwarmHub(tmp_path)
    hub.extra_config += (
        f"c.GPULab.profiles = c.GPULab.profiles + {COURSE_PROFILES!r}\n"
        f"c.GPUSwarmSpawner.node_engines = {dict(ENGINES)!r}\n"
        + course_lines(hub.prefix, course)
        + extra
    )
    return hub


def volumes_on(node: str) -> set[str]:
    return set(sdocker("volume", "ls", "-q", engine=ENGINES[node]).stdout.split())


def node_of_volume(volume: str) -> list[str]:
    """The nodes whose engine holds a volume named ``volume`` (one, unless something made a
    second copy on another node)."""
    return sorted(n for n in ENGINES if volume in volumes_on(n))


def read_on_node(node: str, volume: str, path: str, image: str = LAB_IMAGE) -> str | None:
    """The text of ``path`` in ``volume`` as node ``node``'s engine holds it (``None``: absent).
    Never makes the volume: ``None`` when the node lacks it."""
    if volume not in volumes_on(node):
        return None
    r = sdocker(
        "run", "--rm", "--network", "none", "-v", f"{volume}:/h:ro", "--entrypoint", "cat",
        image, f"/h/{path}", engine=ENGINES[node], check=False,
    )  # fmt: skip
    return r.stdout if r.returncode == 0 else None


def write_on_node(node: str, volume: str, path: str, text: str, image: str = LAB_IMAGE) -> None:
    """Make ``volume`` on node ``node`` (if missing) holding ``path`` with ``text``, owned by
    uid 1000 (as a server of the image writes it)."""
    folder = path.rsplit("/", 1)[0] if "/" in path else "."
    subprocess.run(
        ["docker", "run", "--rm", "-i", "--network", "none", "-u", "1000", "-v",
         f"{volume}:/home/jovyan", "--entrypoint", "sh", image, "-c",
         f"mkdir -p /home/jovyan/{folder} && cat > /home/jovyan/{path}"],
        input=text, text=True, check=True, capture_output=True,
        env=dict(os.environ, DOCKER_HOST=ENGINES[node]), timeout=60,
    )  # fmt: skip


def mounts_of(hub: SwarmHub, service: str) -> dict[str, str]:
    """``{target: source}`` of a service's mounts."""
    spec = hub.service(service)["Spec"]["TaskTemplate"]["ContainerSpec"]
    return {m["Target"]: m.get("Source", "") for m in spec.get("Mounts") or []}


def course_services(hub: SwarmHub, server: str) -> dict[str, str]:
    """``{user: service name}`` of the hub's services of course server ``server``."""
    out = sdocker(
        "service", "ls", "--filter", f"name={hub.prefix}-",
        "--filter", f"label=org.jupyter.gpulab.server={server}", "--format", "{{.Name}}",
    ).stdout.split()  # fmt: skip
    found = {}
    for name in out:
        found[hub.labels_of(name)["org.jupyter.gpulab.user"]] = name
    return found


def exec_in(hub: SwarmHub, service: str, script: str, user: str = "1000"):
    """Run ``sh -c script`` in the service's running container, on its node, as ``user``."""
    node, cid = hub.container(service)
    return sdocker("exec", "-u", user, cid, "sh", "-c", script, engine=ENGINES[node], check=False)


def remove_node_volumes(prefix: str, timeout: float = 90) -> None:
    """Remove every volume whose name starts with ``prefix``, on every node; a volume still in
    use (Swarm removes a removed service's containers a little later) is tried again until
    ``timeout`` seconds have passed, then reported."""
    deadline = time.monotonic() + timeout
    while True:
        left = {}
        for node, url in ENGINES.items():
            names = [
                n for n in sdocker("volume", "ls", "-q", engine=url).stdout.split()
                if n.startswith(prefix)
            ]  # fmt: skip
            if names:
                sdocker("volume", "rm", "-f", *names, engine=url, check=False)
                still = set(sdocker("volume", "ls", "-q", engine=url).stdout.split())
                left[node] = sorted(still & set(names))
        if not any(left.values()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"volumes left on the Swarm's nodes: {left}")
        time.sleep(1)


def service_json(hub: SwarmHub, name: str) -> str:
    return json.dumps(hub.service(name), indent=1)[:4000]

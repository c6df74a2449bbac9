"""Helpers for end-to-end tests: a real hub running GPUDockerSpawner on a real Docker engine."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import jupyterhub
import pytest
import requests
from html_support import parse_html
from hubtools import Hub, docker_available
from leakcheck import unique

IMAGE = os.environ.get("GPULAB_TEST_IMAGE", f"gpulab/singleuser:{jupyterhub.__version__}")

#: A small lab: an A100 with two 1g.10gb and one 3g.40gb MIG instances, a T4 in 5 seats, an A40.
LAB = [
    {
        "uuid": "GPU-e2e0a100-0000-4000-8000-000000000000",
        "index": 0,
        "name": "NVIDIA A100-SXM4-80GB",
        "memory": "80GiB",
        "mig": [
            {"uuid": "MIG-e2e00100-0000-4000-8000-000000000000", "profile": "1g.10gb"},
            {"uuid": "MIG-e2e00101-0000-4000-8000-000000000001", "profile": "1g.10gb"},
            {"uuid": "MIG-e2e00300-0000-4000-8000-000000000000", "profile": "3g.40gb"},
        ],
    },
    {
        "uuid": "GPU-e2e0f400-0000-4000-8000-000000000001",
        "index": 1,
        "name": "Tesla T4",
        "memory": "16GiB",
        "shared": {"seats": 5, "memory_per_seat": "3GiB", "compute_share": 0.2},
    },
    {
        "uuid": "GPU-e2e0a400-0000-4000-8000-000000000002",
        "index": 2,
        "name": "NVIDIA A40",
        "memory": "48GiB",
    },
]

PROFILES = [
    {
        "slug": "mig",
        "display_name": "PyTorch (MIG 1g.10gb)",
        "image": IMAGE,
        "slice": {"kind": "mig", "mig_profile": "1g.10gb"},
        "cpu_limit": 1,
        "mem_limit": "1G",
        "default": True,
        "env": {"FRAMEWORK": "pytorch"},
    },
    {
        "slug": "seat",
        "display_name": "TensorFlow (T4 seat)",
        "image": IMAGE,
        "slice": {"kind": "shared"},
        "mem_limit": "1G",
    },
    {
        "slug": "a40",
        "display_name": "Full A40",
        "image": IMAGE,
        "slice": {"kind": "gpu"},
        "groups": ["researchers"],
    },
    {"slug": "cpu", "display_name": "CPU only", "image": IMAGE, "mem_limit": "1G"},
]


def backend_params(ids=("docker", "swarm")) -> list:
    """The backends a hub test runs on, as pytest params (``swarm`` marked ``swarm``)."""
    return [pytest.param(b, id=b, marks=[pytest.mark.swarm] if b == "swarm" else []) for b in ids]


#: Run a hub test once per spawner backend (the ``backend`` fixture, conftest.py).
on_both_backends = pytest.mark.parametrize("backend", backend_params(), indirect=True)


def require_docker() -> None:
    """Skip (outside CI) or fail (in CI) when no engine or no image is available."""
    reason = docker_available()
    if reason is None:
        r = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, text=True)
        if r.returncode != 0:
            reason = f"image {IMAGE} is missing (images/build-singleuser.sh builds it)"
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Docker tests: {reason}")
        pytest.skip(reason)


def gpulab_config(node: str, *, attach_mode: str = "env", extra: str = "") -> str:
    return f"""
c.JupyterHub.spawner_class = "gpulab"
c.DockerSpawner.pull_policy = "never"
c.DockerSpawner.image = {IMAGE!r}
c.DockerSpawner.prefix = {node!r}
c.Spawner.poll_interval = 2
c.Spawner.start_timeout = 90
c.Spawner.http_timeout = 60
c.GPUDockerSpawner.attach_mode = {attach_mode!r}
c.GPULab.node_name = {node!r}
c.GPULab.inventory_source = "declared"
c.GPULab.inventory = {LAB!r}
c.GPULab.profiles = {PROFILES!r}
c.GPULab.group_policies = {{
    "students": {{"profiles": ["mig", "seat", "cpu"], "max_slices_per_user": 1}},
    "researchers": {{"max_slices_per_user": 3}},
}}
c.GPULab.default_policy = {{"max_slices_per_user": 1}}
{extra}
"""


class DockerHub(Hub):
    """A hub running GPUDockerSpawner on the main engine, with what a test asks of its servers'
    objects (containers): the same methods as ``swarm_support.SwarmHub``'s, so tests run on
    either backend through the ``backend`` fixture (conftest.py)."""

    backend = "docker"

    @property
    def node(self) -> str:
        return self.workdir.name

    def env_of(self, name: str) -> dict[str, str]:
        return env_of(name)

    def labels_of(self, name: str) -> dict[str, str]:
        return inspect(name)["Config"]["Labels"]

    def limits_of(self, name: str) -> tuple[int, int]:
        """``(memory bytes, nano CPUs)`` the server's container is limited to."""
        host = inspect(name)["HostConfig"]
        return host["Memory"], host["CpuQuota"] * 10**9 // host["CpuPeriod"]

    def object_ids(self) -> list[str]:
        return containers_with_label(f"org.jupyter.gpulab.node={self.node}")

    def kill_object(self, name: str) -> None:
        subprocess.run(["docker", "kill", name], check=True, capture_output=True)

    def remove_object(self, name: str) -> None:
        subprocess.run(["docker", "rm", "-f", name], check=True, capture_output=True)

    def declare_inventory(self, ledger) -> None:
        """Put the lab's declared inventory in ``ledger`` (the hub does at start; a test that
        writes the ledger before the hub's first spawn calls this)."""
        from jupyterhub_gpulab.inventory import load_declared

        ledger.sync_inventory(load_declared(LAB, node=self.node), node=self.node)

    def close(self) -> None:
        self.stop()
        remove_node_containers(self.node)


def new_hub(tmp_path: Path, **kw) -> DockerHub:
    node = unique("gpulabtest")
    return DockerHub(tmp_path / node, gpulab_config(node, **kw))


def inspect(container: str) -> dict:
    out = subprocess.run(
        ["docker", "inspect", container], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)[0]


def env_of(container: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in inspect(container)["Config"]["Env"])


def containers_with_label(label: str) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-a", "-q", "--filter", f"label={label}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


#: ``False`` when the pytest session selected no test that needs an engine (conftest.py sets it):
#: a module fixture's teardown then has no container to remove and calls no engine.
ENGINE_SELECTED = True


def remove_node_containers(node: str) -> None:
    if not ENGINE_SELECTED:
        return
    ids = containers_with_label(f"org.jupyter.gpulab.node={node}")
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)


def ledger_of(hub: Hub):
    """The ledger of a hub made by :func:`new_hub` (its SQLite file in the hub's folder)."""
    from jupyterhub_gpulab.ledger import Ledger

    return Ledger(f"sqlite:///{hub.workdir}/gpulab.sqlite")


def kill_and_stop(hub: Hub) -> None:
    """Tear down a hub whose containers stop slowly on purpose: kill its containers first (a
    graceful stop would take their whole stop timeout), then stop the hub and remove them."""
    ids = containers_with_label(f"org.jupyter.gpulab.node={hub.workdir.name}")
    if ids:
        subprocess.run(["docker", "kill", *ids], capture_output=True)
    hub.stop()
    remove_node_containers(hub.workdir.name)


@contextmanager
def slow_stop_hub(tmp_path: Path, extra: str) -> Iterator[DockerHub]:
    """A started hub (:func:`new_hub` with ``extra`` config lines, e.g. a slow ``docker stop``),
    torn down with :func:`kill_and_stop`; skipped or failed (:func:`require_docker`) without an
    engine. A fixture's body: ``with slow_stop_hub(tmp_path, SLOW_STOP) as h: yield h``."""
    require_docker()
    h = new_hub(tmp_path, extra=extra)
    h.start()
    try:
        yield h
    finally:
        kill_and_stop(h)


# -- the GPU-simulating engine (scripts/ensure-gpusim-docker.sh; test_spawner_gpusim.py) ----------

GPUSIM_HOST = os.environ.get("GPULAB_GPUSIM_DOCKER_HOST", "unix:///var/run/gpulab-gpusim.sock")
GPUSIM_GATEWAY = os.environ.get("GPULAB_GPUSIM_GATEWAY", "172.30.0.1")


def gdocker(*args, check=True) -> subprocess.CompletedProcess:
    """``docker *args`` on the GPU-simulating engine."""
    return subprocess.run(
        ["docker", *args],
        capture_output=True,
        text=True,
        check=check,
        env=dict(os.environ, DOCKER_HOST=GPUSIM_HOST),
    )


# -- a hub's pages as a user reads them -----------------------------------------------------------


class SpawnPage:
    """A hub page as a user reads it (``html_support``): the profile radios (``{slug:
    {"checked", "disabled"}}``), the spawn form's ``action`` (it carries ``?_xsrf=…``), the
    ``_xsrf`` field of a login form, and the visible ``text``."""

    def __init__(self, html: str):
        page = parse_html(html)
        self.radios = {
            i.attrs["value"]: {"checked": "checked" in i.attrs, "disabled": "disabled" in i.attrs}
            for i in page.find_all("input", name="profile")
        }
        xsrf = page.find_all("input", name="_xsrf")
        self.xsrf = xsrf[0].attrs.get("value") if xsrf else None
        form = page.find_all("form", id="spawn_form")
        self.action = form[0].attrs.get("action") if form else None
        self.text = page.text()


def hub_login(hub: Hub, user: str) -> requests.Session:
    """A ``requests`` session logged in to the hub as ``user`` through its login form
    (DummyAuthenticator: any password); the gpulab service is not visited."""
    s = requests.Session()
    r = s.get(f"{hub.url}/hub/login")
    p = SpawnPage(r.text)
    r = s.post(
        f"{hub.url}/hub/login",
        data={"username": user, "password": "x", "_xsrf": p.xsrf or s.cookies.get("_xsrf")},
    )
    assert r.status_code == 200, r.text[:500]
    return s

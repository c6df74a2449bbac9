"""Helpers for the gpulab service tests: a hub config with the service, users in the roles the
authorisation matrix covers, and a browser-like login (hub login form, then OAuth into the
service) with ``requests``.

The hub is real (``hubtools.Hub``: a jupyterhub subprocess with its proxy); so is the service
(started by the hub from ``configure_service``) and the ledger (``c.GPULab.db_url``).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from e2e_support import remove_node_containers
from hubtools import Hub, docker_available, free_port
from ledger_support import LAB

from jupyterhub_gpulab.lab.config import GPULab, load_config_file
from jupyterhub_gpulab.ledger import Ledger

PREFIX = "/services/gpulab/"
IMAGE = os.environ.get("GPULAB_TEST_IMAGE", "gpulab/singleuser:6.1.1")

PROFILES = [
    {
        "slug": "cpu",
        "display_name": "CPU only",
        "image": "gpulab/singleuser:6.1.1",
        "default": True,
    },
    {
        "slug": "mig-small",
        "display_name": "PyTorch (1g.5gb MIG slice)",
        "image": "gpulab/singleuser:6.1.1",
        "slice": {"kind": "mig", "mig_profile": "1g.5gb"},
    },
    {
        "slug": "shared-seat",
        "display_name": "TensorFlow (shared seat)",
        "image": "gpulab/singleuser:6.1.1",
        "slice": {"kind": "shared"},
    },
    {
        "slug": "a40",
        "display_name": "PyTorch (full A40)",
        "image": "gpulab/singleuser:6.1.1",
        "slice": {"kind": "gpu", "model": "A40"},
        "groups": ["researchers"],
    },
]

POLICIES = {
    "students": {
        "profiles": ["cpu", "mig-small", "shared-seat"],
        "max_slices_per_user": 1,
        "max_slices": 3,
    },
    "researchers": {"max_slices_per_user": 2},
    "instructors": {"max_slices_per_user": 1},
}

#: name → (groups, hub admin); "anonymous" is no one.
PEOPLE = {
    "student": (["students"], False),
    "instructor": (["instructors"], False),
    "researcher": (["researchers"], False),
    "admin": ([], True),
}


def service_config(
    port: int, workdir: Path, *, managed: bool = True, api_token: str | None = None, extra: str = ""
) -> str:
    """The part of ``jupyterhub_config.py`` the service tests add to hubtools' base."""
    return f"""
from jupyterhub_gpulab.hub.hubconfig import configure_service
c.GPULab.inventory = {LAB!r}
c.GPULab.node_name = "lab-node"
c.GPULab.profiles = {PROFILES!r}
c.GPULab.group_policies = {POLICIES!r}
c.Authenticator.admin_users = {{"admin"}}
c.GPULabService.cookie_secret_file = "{workdir}/gpulab_cookie_secret"
c.GPULabService.sample_interval = 2
c.GPULabService.hub_poll_interval = 2
configure_service(c, config_file=__file__, url="http://127.0.0.1:{port}",
                  reader_groups=["instructors"], managed={managed}, api_token={api_token!r})
{extra}
"""


def real_servers(
    node: str,
    *,
    image: str | None = None,
    start_timeout: int = 60,
    http_timeout: int | None = None,
    hold_rows: bool = False,
) -> str:
    """Config lines (for ``extra``) that make a service hub's servers real containers: gpulab's
    GPUDockerSpawner in attach mode "env" on node ``node`` (``c.GPULab.node_name``, also the
    container prefix), never pulling, ``image`` as the default image when given, timeouts in
    seconds. ``hold_rows``: reconcile once an hour only, for tests that hold ledger rows without
    servers (as the admin page shows them), which the continuous reconcile would close."""
    lines = [
        'c.JupyterHub.spawner_class = "gpulab"',
        'c.GPUDockerSpawner.attach_mode = "env"',
        f"c.GPULab.node_name = {node!r}",
        f"c.DockerSpawner.prefix = {node!r}",
        'c.DockerSpawner.pull_policy = "never"',
        f"c.Spawner.start_timeout = {start_timeout}",
    ]
    if image is not None:
        lines.append(f"c.DockerSpawner.image = {image!r}")
    if http_timeout is not None:
        lines.append(f"c.Spawner.http_timeout = {http_timeout}")
    if hold_rows:
        lines.append("c.GPUDockerSpawner.reconcile_interval = 3600")
    return "\n" + "\n".join(lines) + "\n"


def make_hub(
    workdir: Path, *, managed: bool = True, api_token: str | None = None, extra: str = ""
) -> Hub:
    """A hub with the gpulab service in its config, not started (its config is written)."""
    port = free_port()
    hub = Hub(
        workdir, service_config(port, workdir, managed=managed, api_token=api_token, extra=extra)
    )
    hub.service_port = port
    hub.write_config()
    return hub


def start_hub(
    workdir: Path,
    *,
    managed: bool = True,
    api_token: str | None = None,
    extra: str = "",
    hub: Hub | None = None,
) -> Hub:
    """Start a hub (``make_hub``'s, or a new one) and create the people of the matrix."""
    hub = hub or make_hub(workdir, managed=managed, api_token=api_token, extra=extra)
    hub.start()
    for name, (groups, _admin) in PEOPLE.items():
        # admins come from c.Authenticator.admin_users (the tests' token may not grant admin)
        hub.create_user(name, groups)
    return hub


@contextmanager
def running_service_hub(workdir: Path, *, node: str | None = None, **kw) -> Iterator[Hub]:
    """:func:`start_hub` (``kw``: its ``managed``, ``api_token``, ``extra``) once the gpulab
    service answers (:func:`wait_for_service`); stopped afterwards, and where the hub's spawner
    runs real containers on node ``node`` (``c.GPULab.node_name``), those removed too."""
    hub = make_hub(workdir, **kw)
    try:  # a failure after the start (a user not created, no service) stops the hub too
        start_hub(workdir, hub=hub)
        wait_for_service(hub)
        yield hub
    finally:
        hub.stop()
        if node is not None:
            remove_node_containers(node)


def ledger_for(hub: Hub) -> Ledger:
    """A ledger on the database the hub's config names (the service's too)."""
    gl = GPULab(config=load_config_file(hub.config_path))
    return Ledger(gl.db_url)


def wait_for_service(hub: Hub, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = requests.get(hub.url + PREFIX + "api/openapi.json", timeout=5)
            if last.status_code == 200:
                return
        except requests.RequestException as e:
            last = e
        time.sleep(0.25)
    raise TimeoutError(f"the gpulab service did not answer ({last}):\n{hub.log_tail()}")


def login(hub: Hub, name: str) -> requests.Session:
    """A session logged in to the hub as ``name`` (DummyAuthenticator: any password) and into
    the service through its OAuth redirect, as a browser would be."""
    s = requests.Session()
    # what a browser sends on page loads; without it JupyterHub warns of "insecure" requests
    s.headers.update({"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Site": "same-origin"})
    r = s.get(hub.url + "/hub/login", timeout=30)
    r.raise_for_status()
    xsrf = s.cookies.get("_xsrf", path="/hub/")
    r = s.post(
        hub.url + "/hub/login?next=/hub/home",
        data={"username": name, "password": "any", "_xsrf": xsrf},
        timeout=30,
    )
    assert r.status_code == 200 and "/hub/login" not in r.url, (r.status_code, r.url)
    r = s.get(hub.url + PREFIX + "me", timeout=30)
    assert r.status_code == 200 and r.url.endswith(PREFIX + "me"), (
        r.status_code,
        r.url,
        r.text[:500],
    )
    return s


def service_api(hub: Hub, token: str, method: str, path: str, **kw) -> requests.Response:
    """``method`` on the service's ``api/<path>`` with ``token`` (a hub API token); ``kw``:
    ``requests.request``'s (``timeout`` 60 s unless given)."""
    return requests.request(
        method,
        hub.url + PREFIX + "api/" + path,
        headers={"Authorization": f"token {token}"},
        **{"timeout": 60, **kw},
    )


def service_xsrf(s: requests.Session) -> str:
    """The service's ``_xsrf`` token, as its pages embed it."""
    token = s.cookies.get("_xsrf", path=PREFIX)
    assert token, f"no _xsrf cookie for {PREFIX}: {s.cookies}"
    return token


def user_token(hub: Hub, session: requests.Session, name: str) -> str:
    """An API token ``name`` makes for themself on the hub (as on /hub/token)."""
    r = session.post(
        f"{hub.url}/hub/api/users/{name}/tokens",
        json={"note": "gpulab tests"},
        headers={"X-XSRFToken": session.cookies.get("_xsrf", path="/hub/")},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    return r.json()["token"]


def docker_problem() -> str | None:
    """Why the real-container hub tests cannot run here (no engine, or the image :data:`IMAGE`
    not built), or ``None``."""
    problem = docker_available()
    if problem:
        return problem
    r = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, text=True)
    if r.returncode != 0:
        return f"the image {IMAGE} is not built (images/build-singleuser.sh builds it)"
    return None


def require_or_skip(reason: str | None, what: str) -> None:
    """Skip (with the reason) where ``what`` is truly unavailable; in CI, fail instead."""
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{what} is required in CI: {reason}")
    pytest.skip(f"{what} unavailable: {reason}")


def child_pids(pid: int) -> dict[int, str]:
    """Direct children of ``pid`` with their command lines (from /proc)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                found[int(entry.name)] = (entry / "cmdline").read_text().replace("\0", " ")
        except (OSError, ValueError, IndexError):
            continue
    return found


def service_pid(hub: Hub) -> int:
    """The pid of the managed gpulab service the hub started."""
    for pid, cmd in child_pids(hub.proc.pid).items():
        if "jupyterhub_gpulab.service" in cmd:
            return pid
    raise LookupError("the hub runs no gpulab service process")


# -- fake NVML layouts ------------------------------------------------------------------------------

#: The first 1g.5gb MIG instance of fake_nvml's A100 (gone after ``rebooted_lab``).
OLD_1G = "MIG-5c1e7a90-3333-5b2c-9d3e-000000000003"


def rebooted_lab():
    """fake_nvml's mixed lab after a reboot that re-partitioned the A100 into one 7g.40gb."""
    from fake_nvml import (
        A100_UUID,
        FakeNVML,
        MiB,
        _a100_40gb_profiles,
        a40_gpu,
        h100_gpu,
        mig_gpu,
        p40_gpu,
    )

    a100 = mig_gpu(
        A100_UUID,
        "NVIDIA A100-SXM4-40GB",
        40960 * MiB,
        _a100_40gb_profiles(),
        [("MIG-5c1e7a90-7777-5b2c-9d3e-000000000007", "7g.40gb")],
    )
    return FakeNVML([p40_gpu(), a40_gpu(), a100, h100_gpu()])

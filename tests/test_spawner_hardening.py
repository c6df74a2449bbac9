"""Hardened containers on a real hub and a real engine (issue 8.3 and 8.7).

Every container runs with no-new-privileges, no Linux capabilities and a PID limit, and the real
single-user image still starts and runs a kernel; a profile overrides the limit and adds back a
capability; a hub whose API listens only on the Docker bridge's gateway is still reached by its
containers; and a hub configured with ``c.DockerSpawner.remove = False`` starts no container.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import uuid

import jupyterhub
import pytest
import requests
from e2e_support import inspect, new_hub, remove_node_containers, require_docker
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from jupyterhub_gpulab.ledger import Ledger
from jupyterhub_gpulab.spawner.network import bridge_gateway

pytestmark = pytest.mark.docker

#: The single-user image with JupyterLab and ipykernel (the plain test image has no kernel).
LAB_IMAGE = os.environ.get(
    "GPULAB_TEST_LAB_IMAGE", f"gpulab/singleuser:{jupyterhub.__version__}-lab"
)
EXTRA_PROFILES = [
    {
        "slug": "tight",
        "display_name": "CPU, few processes",
        "image": "replaced by the test image",
        "pids_limit": 200,
        "cap_add": ["CHOWN"],
    },
    {"slug": "lab", "display_name": "JupyterLab", "image": LAB_IMAGE},
]


@pytest.fixture(scope="module")
def gateway() -> str:
    require_docker()
    return bridge_gateway()


@pytest.fixture(scope="module")
def hub(tmp_path_factory, gateway):
    extra = f"""
# the example config's binding: the hub's API only on the Docker bridge's gateway
c.JupyterHub.hub_ip = {gateway!r}
c.JupyterHub.hub_connect_ip = {gateway!r}
c.GPULab.profiles = c.GPULab.profiles + {EXTRA_PROFILES!r}
c.GPULab.profiles[-2]["image"] = c.DockerSpawner.image
"""
    h = new_hub(tmp_path_factory.mktemp("hub"), extra=extra)
    h.start()
    h.create_user("ann", ["students"])
    h.create_user("bob")  # no group: every open profile
    yield h
    h.stop()
    remove_node_containers(h.workdir.name)


def running(hub, user: str, profile: str) -> str:
    """Start ``user``'s server on ``profile`` (unless it runs so) and return its container's name."""
    server = hub.server(user)
    if server is not None and server["state"].get("gpulab_profile") != profile:
        hub.stop_server(user)
        server = None
    if server is None:
        r = hub.spawn(user, {"profile": profile})
        assert r.status_code in (201, 202), r.text
    return hub.wait_ready(user)["state"]["object_name"]


def docker_exec(container: str, *cmd: str, user: str | None = None) -> subprocess.CompletedProcess:
    opts = ["-u", user] if user else []
    return subprocess.run(
        ["docker", "exec", *opts, container, *cmd], capture_output=True, text=True, timeout=120
    )


def test_the_bridge_gateway_is_the_hosts_docker0_address(gateway):
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "docker0"], capture_output=True, text=True
    )
    if out.returncode != 0:
        pytest.skip("this host names its bridge differently")
    assert f"inet {gateway}/" in out.stdout


def test_containers_are_hardened_by_default(hub):
    host = inspect(running(hub, "ann", "cpu"))["HostConfig"]
    assert host["PidsLimit"] == 4096
    assert "no-new-privileges:true" in host["SecurityOpt"]
    assert host["CapDrop"] == ["ALL"]
    assert not host["CapAdd"]
    assert host["Privileged"] is False


def require_lab_image() -> None:
    r = subprocess.run(["docker", "image", "inspect", LAB_IMAGE], capture_output=True)
    if r.returncode != 0:
        reason = f"image {LAB_IMAGE} is missing (GPULAB_IMAGE_LAB=1 images/build-singleuser.sh)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the kernel test: {reason}")
        pytest.skip(reason)


async def test_the_real_image_still_runs_a_kernel(hub):
    require_lab_image()
    host = inspect(running(hub, "bob", "lab"))["HostConfig"]
    assert host["CapDrop"] == ["ALL"] and "no-new-privileges:true" in host["SecurityOpt"]
    auth = {"Authorization": f"token {hub.token}"}
    r = requests.post(f"{hub.url}/user/bob/api/kernels", headers=auth, json={}, timeout=60)
    assert r.status_code == 201, r.text
    kernel = r.json()["id"]
    ws_url = hub.url.replace("http", "ws", 1) + f"/user/bob/api/kernels/{kernel}/channels"
    ws = await websocket_connect(HTTPRequest(ws_url, headers=auth, connect_timeout=30))
    msg_id = uuid.uuid4().hex
    code = (
        "import os, subprocess; print(os.geteuid(), subprocess.check_output(['id', '-u']).decode())"
    )
    ws.write_message(
        json.dumps(
            {
                "header": {"msg_id": msg_id, "msg_type": "execute_request", "session": msg_id,
                           "username": "bob", "version": "5.3"},
                "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
                "content": {"code": code, "silent": False, "store_history": False,
                            "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
            }
        )
    )  # fmt: skip
    output, deadline = "", time.monotonic() + 60
    while time.monotonic() < deadline:
        msg = json.loads(await ws.read_message())
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            output += msg["content"]["text"]
        if msg["msg_type"] == "execute_reply":
            assert msg["content"]["status"] == "ok", msg["content"]
            break
    ws.close()
    assert output.split() == ["1000", "1000"]  # it ran, and spawned a process, as jovyan


def test_a_setuid_program_gains_no_privileges(hub):
    name = running(hub, "ann", "cpu")
    # root inside the container (no capabilities) makes a setuid-root copy of `id` ...
    made = docker_exec(
        name, "sh", "-c", "cp /usr/bin/id /tmp/rootid && chmod 4755 /tmp/rootid", user="root"
    )
    assert made.returncode == 0, made.stderr
    assert "rws" in docker_exec(name, "ls", "-l", "/tmp/rootid").stdout
    # ... which the user runs as themselves: the setuid bit gives them nothing
    assert docker_exec(name, "/tmp/rootid", "-u").stdout.strip() == "1000"
    assert docker_exec(name, "su", "-c", "id -u", "root").returncode != 0


FORKS = """
import os, time
kids = []
try:
    for _ in range(400):
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        kids.append(pid)
    print("forked", len(kids))
except OSError as e:
    print("refused", len(kids), e.errno)
finally:
    for pid in kids:
        os.kill(pid, 9)
"""


def test_a_profile_sets_its_own_pid_limit_and_capabilities(hub):
    name = running(hub, "bob", "tight")
    host = inspect(name)["HostConfig"]
    assert host["PidsLimit"] == 200
    assert host["CapAdd"] == ["CAP_CHOWN"] and host["CapDrop"] == ["ALL"]
    out = docker_exec(name, "python3", "-c", FORKS).stdout.split()
    # a process inside cannot exceed the limit (the server's own processes and threads count too)
    assert out[0] == "refused", out
    assert int(out[1]) < 200 and out[2] == "11"  # EAGAIN, as from a fork bomb


def test_the_hub_api_listens_only_where_containers_reach_it(hub, gateway):
    name = running(hub, "ann", "cpu")
    probe = "import os, urllib.request; print(urllib.request.urlopen(os.environ['JUPYTERHUB_API_URL']).status)"
    reached = docker_exec(name, "python3", "-c", probe)
    assert reached.stdout.strip() == "200", reached.stderr
    with socket.socket() as s:  # not on the host's other addresses
        assert s.connect_ex(("127.0.0.1", hub.hub_port)) != 0


def test_a_hub_with_remove_false_starts_no_container(tmp_path):
    require_docker()
    h = new_hub(tmp_path, extra="c.DockerSpawner.remove = False\n")
    h.start()
    try:
        h.create_user("cat", ["students"])
        r = h.spawn("cat", {"profile": "mig"})
        assert r.status_code == 500, r.text
        assert h.server("cat") is None
        assert "remove = False is refused" in h.log_path.read_text()
        ps = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label=org.jupyter.gpulab.node={h.workdir.name}"],
            capture_output=True,
            text=True,
        )
        assert ps.stdout.split() == []
        led = Ledger(f"sqlite:///{h.workdir}/gpulab.sqlite")
        assert led.open_allocations() == []
        led.close()
    finally:
        h.stop()
        remove_node_containers(h.workdir.name)


def test_the_example_config_binds_the_hub_to_the_bridge_not_every_interface(
    gateway, tmp_path, monkeypatch
):
    from pathlib import Path

    from jupyterhub_gpulab.lab.config import load_config_file

    monkeypatch.setenv("GPULAB_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("GPULAB_HUB_IP", raising=False)
    c = load_config_file(Path(__file__).resolve().parents[1] / "jupyterhub_config.py")
    assert c.JupyterHub.hub_ip == gateway != "0.0.0.0"
    assert c.JupyterHub.hub_connect_ip == gateway

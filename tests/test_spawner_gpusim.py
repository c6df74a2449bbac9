"""The device-request path through a real Docker engine's NVIDIA driver.

``scripts/ensure-gpusim-docker.sh`` runs a second dockerd whose PATH holds a stand-in for the
NVIDIA Container Toolkit's ``nvidia-container-runtime-hook`` (the one GPU part we lack): the engine
then registers its real ``nvidia`` device driver, accepts GPUDockerSpawner's device requests, sets
``NVIDIA_VISIBLE_DEVICES`` in the container's process environment from the request's DeviceIDs,
and runs the hook, which logs what it was given.
"""

from __future__ import annotations

import json
import os
import time

import pytest
from e2e_support import GPUSIM_GATEWAY, GPUSIM_HOST, gdocker, gpulab_config, require_docker
from hubtools import Hub
from leakcheck import unique

from jupyterhub_gpulab.ledger import Ledger

pytestmark = pytest.mark.docker

HOOK_LOG = "/var/log/gpulab-gpusim-hook.jsonl"


@pytest.fixture
def gpusim_hub(tmp_path):
    require_docker()
    if gdocker("info", check=False).returncode != 0:
        reason = f"no GPU-simulating engine at {GPUSIM_HOST} (scripts/ensure-gpusim-docker.sh starts one)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    node = unique("gpusim")
    hub = Hub(
        tmp_path / node,
        gpulab_config(node, attach_mode="device_request"),
        env={"DOCKER_HOST": GPUSIM_HOST},
        gateway=GPUSIM_GATEWAY,
    )
    hub.start()
    yield hub
    hub.stop()
    ids = gdocker("ps", "-aq", "--filter", f"label=org.jupyter.gpulab.node={node}").stdout.split()
    if ids:
        gdocker("rm", "-f", *ids, check=False)


def process_env(container: str) -> dict[str, str]:
    """The container's PID 1 environment: where the engine puts NVIDIA_VISIBLE_DEVICES."""
    out = gdocker("exec", container, "cat", "/proc/1/environ").stdout
    return dict(kv.split("=", 1) for kv in out.split("\0") if "=" in kv)


def hook_calls() -> dict[str, str]:
    calls = {}
    try:
        with open(HOOK_LOG) as f:
            for line in f:
                rec = json.loads(line)
                calls[rec["container_id"]] = rec["NVIDIA_VISIBLE_DEVICES"]
    except FileNotFoundError:
        pass
    return calls


def test_device_requests_name_each_users_own_slice(gpusim_hub):
    hub = gpusim_hub
    hub.create_user("ann", ["students"])
    hub.create_user("rex", ["researchers"])
    hub.create_user("cyd", ["students"])
    for user, profile in (("ann", "mig"), ("rex", "a40"), ("cyd", "cpu")):
        r = hub.spawn(user, {"profile": profile})
        assert r.status_code in (201, 202), r.text
    states = {u: hub.wait_ready(u)["state"] for u in ("ann", "rex", "cyd")}
    expected = {
        "ann": states["ann"]["gpulab_slice"],
        "rex": "GPU-e2e0a400-0000-4000-8000-000000000002",
    }
    assert expected["ann"].startswith("MIG-e2e0010")  # a 1g.10gb MIG device
    hooks = hook_calls()
    for user, uuid in expected.items():
        name = states[user]["object_name"]
        info = json.loads(gdocker("inspect", name).stdout)[0]
        requests = info["HostConfig"]["DeviceRequests"]
        assert len(requests) == 1
        assert requests[0]["Driver"] == "nvidia"
        assert requests[0]["DeviceIDs"] == [uuid]  # by UUID, never a count
        assert requests[0]["Count"] == 0
        assert requests[0]["Capabilities"] == [["gpu"]]
        assert process_env(name)["NVIDIA_VISIBLE_DEVICES"] == uuid
        assert hooks[info["Id"]] == uuid  # the engine ran the toolkit hook for exactly that slice
    cpu = json.loads(gdocker("inspect", states["cyd"]["object_name"]).stdout)[0]
    assert not cpu["HostConfig"]["DeviceRequests"]
    assert process_env(states["cyd"]["object_name"])["NVIDIA_VISIBLE_DEVICES"] == "void"
    led = Ledger(f"sqlite:///{hub.workdir}/gpulab.sqlite")
    assert sorted(a.slice_id for a in led.open_allocations()) == sorted(expected.values())
    led.close()
    hub.stop_server("ann")
    # the container was created with AutoRemove (dockerspawner's remove=True): after the stop the
    # engine removes it on its own, and a `ps -a` in that moment still lists it
    name = states["ann"]["object_name"]
    deadline = time.monotonic() + 30
    while gdocker("ps", "-aq", "--filter", f"name=^/{name}$").stdout.strip():
        assert time.monotonic() < deadline, f"{name} still exists 30 s after its server stopped"
        time.sleep(0.5)

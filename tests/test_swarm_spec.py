"""The Swarm backend's pure parts, without an engine: the service spec (backends/swarmspec.py), what
a service's tasks say (swarmtasks.py) and Swarm's nodes by lab name (swarmnodes.py). The same
rules run against the real Swarm in test_swarm_e2e.py."""

from __future__ import annotations

import pytest

from jupyterhub_gpulab.backends.swarmspec import constraints_for, mounts_from_binds, service_spec
from jupyterhub_gpulab.spawner import container as ct
from jupyterhub_gpulab.spawner.swarmnodes import NODE_LABEL, address_of, engine_nodes
from jupyterhub_gpulab.spawner.swarmtasks import (
    current_task,
    published_port,
    service_state,
    unplaceable,
)

HARDENING = ct.hardening(pids_limit=4096, cap_add=["CHOWN"])


def spec(**kw):
    base = dict(
        name="jupyter-ann",
        image="img",
        env={"NVIDIA_VISIBLE_DEVICES": "MIG-1", "A": "b"},
        args=["jupyterhub-singleuser"],
        labels={"org.jupyter.gpulab.user": "ann"},
        port=8888,
        constraints=constraints_for("node-id-2"),
        hardening=HARDENING,
        mem_limit=2**30,
        cpu_limit=1.5,
    )
    return service_spec(**{**base, **kw})


def test_a_gpu_service_is_pinned_to_its_node_runs_once_and_publishes_in_host_mode():
    s = spec()
    t = s["task_template"]
    assert t["Placement"]["Constraints"] == ["node.id==node-id-2"]
    assert t["RestartPolicy"] == {"Condition": "none"}
    assert s["endpoint_spec"] == {
        "Mode": "dnsrr",
        "Ports": [{"Protocol": "tcp", "TargetPort": 8888, "PublishMode": "host"}],
    }
    assert t["Resources"]["Limits"]["MemoryBytes"] == 2**30
    assert t["Resources"]["Limits"]["NanoCPUs"] == 1_500_000_000
    assert "NVIDIA_VISIBLE_DEVICES=MIG-1" in t["ContainerSpec"]["Env"]
    assert s["labels"] == t["ContainerSpec"]["Labels"] == {"org.jupyter.gpulab.user": "ann"}


def test_a_service_is_hardened_as_a_container_is():
    t = spec()["task_template"]
    c = t["ContainerSpec"]
    assert c["CapabilityDrop"] == ["ALL"]
    assert c["CapabilityAdd"] == ["CAP_CHOWN"]
    assert c["Privileges"]["NoNewPrivileges"] is True
    assert t["Resources"]["Limits"]["Pids"] == 4096
    bare = spec(hardening=ct.hardening(pids_limit=128))["task_template"]
    assert "CapabilityAdd" not in bare["ContainerSpec"]
    assert bare["Resources"]["Limits"]["Pids"] == 128


def test_the_admins_extras_never_undo_the_slice_the_pin_or_the_hardening():
    s = spec(
        extra={
            "extra_container_spec": {"user": "1000", "env": ["NVIDIA_VISIBLE_DEVICES=all"]},
            "extra_placement_spec": {"constraints": ["node.labels.zone==a"]},
            "extra_task_spec": {"restart_policy": {"Condition": "any"}},
            "extra_endpoint_spec": {"ports": {}},
        }
    )
    t = s["task_template"]
    assert t["ContainerSpec"]["User"] == "1000"  # an allowed extra is kept
    assert "NVIDIA_VISIBLE_DEVICES=all" not in t["ContainerSpec"]["Env"]
    assert t["Placement"]["Constraints"] == ["node.id==node-id-2", "node.labels.zone==a"]
    assert t["RestartPolicy"] == {"Condition": "none"}
    assert s["endpoint_spec"]["Ports"][0]["PublishMode"] == "host"


def test_the_swarm_spawner_refuses_extras_that_would_undo_them():
    from types import SimpleNamespace

    from traitlets.config import Config

    from jupyterhub_gpulab.spawner import GPUSwarmSpawner

    c = Config()
    c.GPUSwarmSpawner.extra_container_spec = {"env": ["NVIDIA_VISIBLE_DEVICES=all"]}
    with pytest.raises(ValueError, match="extra_container_spec may not set env"):
        GPUSwarmSpawner(config=c, user=SimpleNamespace(name="x"))
    c = Config()
    c.GPUSwarmSpawner.extra_task_spec = {"placement": {}}
    with pytest.raises(ValueError, match="may not set placement"):
        GPUSwarmSpawner(config=c, user=SimpleNamespace(name="x"))


def test_a_cpu_service_avoids_every_node_out_of_service():
    assert constraints_for(None, ["b", "a", "a"]) == ["node.id!=a", "node.id!=b"]
    assert constraints_for(None) == []


def test_named_volumes_are_volumes_and_paths_are_bind_mounts():
    m = mounts_from_binds(
        {
            "jupyterhub-user-ann": {"bind": "/home/jovyan/work", "mode": "rw"},
            "/srv/data": {"bind": "/data", "mode": "ro"},
        },
        driver="local-persist",
    )
    vol, bind = m
    assert (vol["Type"], vol["Source"], vol["Target"]) == (
        "volume",
        "jupyterhub-user-ann",
        "/home/jovyan/work",
    )
    assert vol["VolumeOptions"]["DriverConfig"]["Name"] == "local-persist"
    assert (bind["Type"], bind["ReadOnly"]) == ("bind", True)


def task(state, desired="running", version=1, err="", node="n2", ports=None, code=None):
    status = {"State": state, "Message": state, "Err": err}
    if code is not None:
        status["ContainerStatus"] = {"ExitCode": code}
    if ports:
        status["PortStatus"] = {"Ports": ports}
    return {
        "DesiredState": desired,
        "Version": {"Index": version},
        "NodeID": node,
        "Status": status,
    }


@pytest.mark.parametrize(
    "tasks, state, reason",
    [
        pytest.param([], "starting", None, id="no task yet"),
        pytest.param([task("pending")], "starting", None, id="pending"),
        pytest.param([task("running")], "running", None, id="running"),
        pytest.param([task("running", desired="shutdown")], "gone", "node-lost", id="node lost"),
        pytest.param([task("failed", desired="shutdown", code=137)], "gone", "task-failed", id="failed"),
        pytest.param([task("rejected", desired="shutdown", err="No such image")], "gone", "task-failed", id="rejected"),
        pytest.param([task("complete", desired="shutdown")], "gone", "task-exited", id="exited"),
        pytest.param([task("orphaned", desired="shutdown")], "gone", "node-lost", id="orphaned"),
        pytest.param([task("shutdown", desired="shutdown")], "gone", "task-gone", id="shut down"),
        pytest.param(
            [task("failed", desired="shutdown", version=1), task("running", version=2)],
            "running", None, id="the wanted task wins",
        ),
    ],
)  # fmt: skip
def test_what_a_services_tasks_say(tasks, state, reason):
    v = service_state(tasks)
    assert (v.state, v.reason) == (state, reason)


def test_a_task_swarm_cannot_place_says_why_and_a_failed_one_keeps_swarms_words():
    stuck = [
        task("pending", err="no suitable node (scheduling constraints not satisfied on 3 nodes)")
    ]
    assert unplaceable(stuck).startswith("no suitable node")
    assert unplaceable([task("pending")]) is None
    assert unplaceable([task("running")]) is None
    v = service_state([task("rejected", desired="shutdown", err="No such image: x", code=125)])
    assert "No such image: x" in v.detail and "exit code 125" in v.detail


def test_the_published_port_and_the_current_task():
    ports = [{"TargetPort": 8888, "PublishedPort": 30001, "PublishMode": "host"}]
    newest = task("running", version=5, ports=ports)
    assert current_task([task("failed", "shutdown", version=9), newest]) is newest
    assert published_port(newest, 8888) == 30001
    assert published_port(newest, 9999) is None
    assert current_task([]) is None


def node_row(id_, host, state="ready", availability="active", addr="10.0.0.2", labels=None, **kw):
    return {
        "ID": id_,
        "Spec": {"Availability": availability, "Labels": labels or {}},
        "Description": {
            "Hostname": host,
            "Resources": {"NanoCPUs": 16 * 10**9, "MemoryBytes": 64 * 2**30},
        },
        "Status": {"State": state, "Addr": addr},
        **kw,
    }


def test_swarm_nodes_are_named_by_hostname_or_label():
    found = engine_nodes(
        [
            node_row("a", "gpu1"),
            node_row("b", "host-b", labels={NODE_LABEL: "gpu2"}),
            node_row("c-old", "gpu3", state="down"),
            node_row("c", "gpu3"),  # the same host joined again: the ready one wins
        ]
    )
    assert set(found) == {"gpu1", "gpu2", "gpu3"}
    assert found["gpu3"].id == "c" and found["gpu3"].state == "ready"
    assert (found["gpu1"].cpus, found["gpu1"].memory_bytes) == (16, 64 * 2**30)


def test_a_managers_address_falls_back_to_its_advertised_address():
    row = node_row("m", "mgr", addr="0.0.0.0", ManagerStatus={"Addr": "10.1.2.3:2377"})
    assert address_of(row) == "10.1.2.3"
    assert address_of(node_row("w", "w", addr="10.9.9.9")) == "10.9.9.9"


def test_a_service_gets_dev_shm_as_a_sized_tmpfs():
    mounts = spec(shm_size=2 * 2**30)["task_template"]["ContainerSpec"]["Mounts"]
    [shm] = [m for m in mounts if m["Target"] == "/dev/shm"]
    assert shm["Type"] == "tmpfs" and shm["TmpfsOptions"]["SizeBytes"] == 2 * 2**30
    assert not [
        m for m in spec()["task_template"]["ContainerSpec"]["Mounts"] if m["Target"] == "/dev/shm"
    ]

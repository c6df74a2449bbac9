"""One lab over a real three-node Docker Swarm (``swarm_support``): what only many nodes show.

A real hub runs GPUSwarmSpawner against the Swarm's manager; the gpulab service runs beside it;
a real node agent per GPU node (in the node's network namespace) reports a fake NVML's boards
(the e2e lab's A100 on gpulab-swn2, its T4 and A40 on gpulab-swn3). gpulab-swn1, the manager,
has no GPU. The GPU nodes' default runtime is the NVIDIA stand-in, which logs which UUID every
container it starts was given: the proof that the slice reaches the runtime on the chosen node.
Every response of the service's API is checked against its OpenAPI document.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

import pytest
import requests
from html_support import parse_html
from hubtools import wait_for
from service_support import PREFIX, login, user_token
from swarm_support import (
    ENGINES,
    GPU_NODE,
    IMAGE,
    NODES,
    TESTS,
    hook_records,
    new_swarm_hub,
    process_env,
    revive_swarm,
    sdocker,
)

EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)
FAR = datetime(3000, 1, 1, tzinfo=timezone.utc)

pytestmark = [pytest.mark.docker, pytest.mark.swarm, pytest.mark.usefixtures("api_contract")]


#: a profile whose image no node has: Swarm rejects its task
NO_IMAGE = {"slug": "noimage", "display_name": "No image", "image": "gpulab/no-such-image:1",
            "slice": {"kind": "shared"}}  # fmt: skip


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    h = new_swarm_hub(
        tmp_path_factory.mktemp("swarm"),
        extra=f"c.GPULab.profiles = c.GPULab.profiles + [{NO_IMAGE!r}]\n",
    )
    try:
        h.start()
        for name, groups in (
            ("ann", ["students"]), ("bob", ["students"]), ("cyd", ["students"]),
            ("rex", ["researchers"]), ("ray", ["researchers"]), ("admin", []),
        ):  # fmt: skip
            h.create_user(name, groups)
        for i in range(1, 13):
            h.create_user(f"s{i}", ["students"])
        session = login(h, "admin")
        h.admin_token = user_token(h, session, "admin")
        yield h
    finally:
        h.close()


@pytest.fixture(autouse=True)
def _clean(hub):
    yield
    for u in hub.api("GET", "/users").json():
        for name in list(u.get("servers", {})):
            hub.api("DELETE", hub.server_path(u["name"], name))
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if not any(u.get("servers") for u in hub.api("GET", "/users").json()):
            break
        time.sleep(0.3)
    for node in NODES:
        service_api(hub, "DELETE", f"nodes/{node}/drain")


def service_api(hub, method, path, **kw):
    return requests.request(
        method,
        f"{hub.url}{PREFIX}api/{path}",
        headers={"Authorization": f"token {hub.admin_token}"},
        timeout=60,
        **kw,
    )


def node_ids() -> dict[str, str]:
    rows = sdocker("node", "ls", "--format", "{{.Hostname}} {{.ID}} {{.Status}}").stdout
    return {h: i for h, i, st in (line.split() for line in rows.splitlines()) if st == "Ready"}


def reach(hub, user) -> int:
    r = requests.get(
        f"{hub.url}/user/{user}/api/status",
        headers={"Authorization": f"token {hub.token}"},
        timeout=30,
    )
    return r.status_code


def test_spawns_land_on_the_node_holding_their_slice_and_its_runtime_gets_the_uuid(hub):
    states = {
        "ann": hub.spawn_ready("ann", {"profile": "mig"})["state"],
        "bob": hub.spawn_ready("bob", {"profile": "seat"})["state"],
        "rex": hub.spawn_ready("rex", {"profile": "a40"})["state"],
    }
    ids = node_ids()
    led = hub.ledger()
    held = {a.user: a for a in led.open_allocations()}
    slices = {s["id"]: s for s in led.slices()}
    for user, st in states.items():
        name, sid = st["object_name"], st["gpulab_slice"]
        device = slices[sid]["device_uuid"]
        node = GPU_NODE[device]
        task = hub.task(name)
        assert task["node"] == node, (user, sid)  # Swarm ran it where the ledger's slice is
        assert held[user].node == node
        spec = hub.service(name)["Spec"]
        assert spec["TaskTemplate"]["Placement"]["Constraints"] == [f"node.id=={ids[node]}"]
        assert spec["Labels"]["org.jupyter.gpulab.node"] == node
        visible = slices[sid]["visible_id"]
        assert hub.env_of(name)["NVIDIA_VISIBLE_DEVICES"] == visible
        cid = task["Status"]["ContainerStatus"]["ContainerID"]
        assert process_env(node, cid)["NVIDIA_VISIBLE_DEVICES"] == visible
        # the NVIDIA runtime on that node, and only there, was asked for exactly that UUID
        assert hook_records(node)[cid]["NVIDIA_VISIBLE_DEVICES"] == visible
        others = set(NODES) - {node}
        assert all(cid not in hook_records(n) for n in others)
        # hardened as a container is: no capabilities, no new privileges, a PID limit
        status = sdocker("exec", cid, "cat", "/proc/1/status", engine=ENGINES[node]).stdout
        assert "NoNewPrivs:\t1" in status and "CapEff:\t0000000000000000" in status
        info = json.loads(sdocker("inspect", cid, engine=ENGINES[node]).stdout)[0]
        assert info["HostConfig"]["CapDrop"] == ["ALL"]
        assert info["HostConfig"]["PidsLimit"] == 4096
        assert not info["HostConfig"]["Privileged"]
        assert reach(hub, user) == 200
    # the MIG instance and the A40 are on different nodes; the seat on the A40's
    assert (
        held["ann"].node == "gpulab-swn2" and held["rex"].node == held["bob"].node == "gpulab-swn3"
    )
    # every page and API names the node
    rows = {r["user"]: r for r in service_api(hub, "GET", "allocations").json()["allocations"]}
    assert rows["ann"]["node"] == "gpulab-swn2" and rows["rex"]["node"] == "gpulab-swn3"
    page = parse_html(
        requests.get(
            f"{hub.url}{PREFIX}", headers={"Authorization": f"token {hub.admin_token}"}, timeout=30
        ).text
    )
    ann_row = page.find("tr", cls="allocation", data_user="ann")
    assert ann_row.find("td", cls="node").text() == "gpulab-swn2"
    mine = parse_html(login(hub, "ann").get(f"{hub.url}{PREFIX}me", timeout=30).text)
    assert mine.find("div", cls="slice").find("dd", cls="node").text() == "gpulab-swn2"
    led.close()


def test_a_cpu_server_lands_on_any_node_and_never_on_a_drained_one(hub):
    placed = {
        hub.spawn_ready(f"s{i}", {"profile": "cpu"})["state"]["object_name"] for i in range(1, 4)
    }
    nodes = {hub.task(n)["node"] for n in placed}
    assert nodes <= set(NODES)
    assert all(hub.env_of(n)["NVIDIA_VISIBLE_DEVICES"] == "void" for n in placed)
    for i in range(1, 4):
        hub.stop_server(f"s{i}")
    r = service_api(hub, "POST", "nodes/gpulab-swn1/drain", json={"reason": "new disk"})
    assert r.status_code == 200, r.text
    drained = {n["name"]: n for n in service_api(hub, "GET", "nodes").json()["nodes"]}
    assert drained["gpulab-swn1"]["state"] == "drained"
    placed = [
        hub.spawn_ready(f"s{i}", {"profile": "cpu"})["state"]["object_name"] for i in range(4, 7)
    ]
    assert "gpulab-swn1" not in {hub.task(n)["node"] for n in placed}
    avoid = hub.service(placed[0])["Spec"]["TaskTemplate"]["Placement"]["Constraints"]
    assert avoid == [f"node.id!={node_ids()['gpulab-swn1']}"]
    # a drained GPU node: its slices are not handed out, its running servers stay
    rex = hub.spawn_ready("rex", {"profile": "a40"})["state"]
    assert service_api(hub, "POST", "nodes/gpulab-swn3/drain").status_code == 200
    r = hub.spawn("ray", {"profile": "a40"})
    assert r.status_code == 503 and "out of service" in r.json()["message"]
    assert hub.server("rex")["ready"] and reach(hub, "rex") == 200
    assert hub.task(rex["object_name"])["node"] == "gpulab-swn3"


def test_two_users_never_share_a_slice_across_nodes(hub):
    users = [f"s{i}" for i in range(1, 13)]
    profiles = ["mig" if i % 2 else "seat" for i in range(len(users))]
    with ThreadPoolExecutor(len(users)) as pool:
        responses = list(
            pool.map(lambda up: hub.spawn(up[0], {"profile": up[1]}), zip(users, profiles))
        )
    winners = [u for u, r in zip(users, responses) if r.status_code in (201, 202)]
    refused = [r for r in responses if r.status_code == 503]
    assert len(winners) == 7 and len(refused) == 5  # 2 MIG 1g.10gb + 5 seats, on two nodes
    states = [hub.wait_ready(u)["state"] for u in winners]
    assert len({s["gpulab_slice"] for s in states}) == 7
    led = hub.ledger()
    assert led.double_allocations() == []
    slices = {s["id"]: s for s in led.slices()}
    for st in states:
        assert hub.task(st["object_name"])["node"] == slices[st["gpulab_slice"]]["node"]
    led.close()


def engine_pid(node: str) -> int:
    return int(open(f"/var/run/gpulab-swarm/n{node[-1]}.pid").read())


def test_killing_a_workers_engine_closes_its_allocations_with_a_reason_and_tells_the_user(hub):
    rex = hub.spawn_ready("rex", {"profile": "a40"})["state"]  # on gpulab-swn3
    ann = hub.spawn_ready("ann", {"profile": "mig"})["state"]  # on gpulab-swn2
    led = hub.ledger()
    try:
        os.kill(engine_pid("gpulab-swn3"), signal.SIGKILL)
        closed = wait_for(
            "rex's allocation closed as node-lost",
            lambda: (a := led.get(rex["gpulab_allocation"])).ended_at and a,
            90,
            hub,
        )
        assert closed.end_reason == "node-lost"
        wait_for("rex's server stopped", lambda: hub.server("rex") is None, 30, hub)
        # the other node's server is untouched
        assert led.get(ann["gpulab_allocation"]).open and reach(hub, "ann") == 200
        # rex is told, on the hub's home page
        [notice] = [w for w in led.warnings("rex") if w.rule == "stopped:node-lost"]
        assert "gpulab-swn3" in notice.message
        home = login(hub, "rex").get(f"{hub.url}/hub/home", timeout=30)
        assert "stopped answering" in parse_html(home.text).text()
        # the lost node's GPUs are out of service (its freed A40 is not handed out)
        assert led.node("gpulab-swn3").state.startswith("engine-")
        r = hub.spawn("ray", {"profile": "a40"})
        assert r.status_code == 503, r.text
    finally:
        revive_swarm()
    wait_for("gpulab-swn3 back in service", lambda: led.node("gpulab-swn3").available, 60, hub)
    assert (
        hub.task(hub.spawn_ready("ray", {"profile": "a40"})["state"]["object_name"])["node"]
        == "gpulab-swn3"
    )
    led.close()


def spawn_form(session, hub) -> dict[str, dict]:
    page = parse_html(session.get(f"{hub.url}/hub/spawn", timeout=30).text)
    return {
        i.attrs["value"]: {"disabled": "disabled" in i.attrs}
        for i in page.find_all("input", name="profile")
    }


def test_a_node_whose_agent_stops_reporting_leaves_the_form_and_its_servers_stay(hub):
    rex = hub.spawn_ready("rex", {"profile": "seat"})["state"]  # a T4 seat on gpulab-swn3
    ray = login(hub, "ray")
    assert not spawn_form(ray, hub)["a40"]["disabled"]
    hub.stop_agent("gpulab-swn3")
    led = hub.ledger()
    try:
        wait_for("gpulab-swn3 unreachable", lambda: led.node("gpulab-swn3").unreachable, 20, hub)
        assert spawn_form(ray, hub)["a40"]["disabled"]  # its A40 is no longer offered
        assert hub.spawn("ray", {"profile": "a40"}).status_code == 503
        # a server already there keeps its slice while its task runs
        assert led.get(rex["gpulab_allocation"]).open and reach(hub, "rex") == 200
        metrics = requests.get(
            f"{hub.url}{PREFIX}metrics",
            headers={"Authorization": f"token {hub.admin_token}"},
            timeout=30,
        ).text
        assert 'gpulab_nodes{node="gpulab-swn3",state="unreachable"} 1.0' in metrics
    finally:
        hub.start_agent("gpulab-swn3")
    hub.wait_reported(["gpulab-swn3"])
    assert not spawn_form(ray, hub)["a40"]["disabled"]
    led.close()


def test_a_hub_restart_readopts_running_services(hub):
    ann = hub.spawn_ready("ann", {"profile": "mig"})["state"]
    cyd = hub.spawn_ready("cyd", {"profile": "cpu"})["state"]
    bob = hub.spawn_ready("bob", {"profile": "seat"})["state"]
    led = hub.ledger()
    before = sorted((a.id, a.slice_id, a.node) for a in led.open_allocations())
    hub.kill()  # SIGKILL: servers, proxy and service keep running
    hub.remove_object(bob["object_name"])  # bob's service goes while no hub watches
    hub.start()
    wait_for("bob's allocation closed", lambda: led.get(bob["gpulab_allocation"]).ended_at, 30, hub)
    after = sorted((a.id, a.slice_id, a.node) for a in led.open_allocations())
    assert after == [b for b in before if b[0] != bob["gpulab_allocation"]]
    for user, st in (("ann", ann), ("cyd", cyd)):
        assert hub.server(user)["ready"] and reach(hub, user) == 200
        assert hub.server(user)["state"]["object_id"] == st["object_id"]
    assert led.double_allocations() == []
    led.close()


def test_every_node_shows_in_the_api_the_metrics_and_the_cli(hub):
    # the hub records Swarm's nodes from its first server on (and at every reconcile pass)
    hub.spawn_ready("cyd", {"profile": "cpu"})
    nodes = {n["name"]: n for n in service_api(hub, "GET", "nodes").json()["nodes"]}
    assert set(nodes) == set(NODES)
    for name in NODES:
        assert nodes[name]["engine"]["kind"] == "swarm" and nodes[name]["state"] == "in-service"
    assert nodes["gpulab-swn2"]["agent"]["seen_at"] and not nodes["gpulab-swn1"]["agent"]["seen_at"]
    inventory = {n["name"]: n for n in service_api(hub, "GET", "inventory").json()["nodes"]}
    assert inventory["gpulab-swn1"]["devices"] == []  # the CPU-only manager is listed too
    assert {d["uuid"] for d in inventory["gpulab-swn3"]["devices"]} == {
        "GPU-e2e0f400-0000-4000-8000-000000000001",
        "GPU-e2e0a400-0000-4000-8000-000000000002",
    }
    metrics = requests.get(
        f"{hub.url}{PREFIX}metrics",
        headers={"Authorization": f"token {hub.admin_token}"},
        timeout=30,
    ).text
    assert 'gpulab_nodes{node="gpulab-swn2",state="in_service"} 1.0' in metrics
    assert 'gpulab_slices{kind="mig",mig_profile="1g.10gb",node="gpulab-swn2"' in metrics
    out = subprocess.run(
        [sys.executable, "-m", "jupyterhub_gpulab.cli", "nodes", "-f", str(hub.config_path)],
        capture_output=True, text=True, cwd=hub.workdir,
    ).stdout  # fmt: skip
    rows = {line.split()[0]: line for line in out.splitlines()[1:] if line.strip()}
    assert rows["gpulab-swn3"].split()[1:5] == ["in-service", "6", "0", "6"]  # 5 seats, the A40
    assert "swarm ready/active" in rows["gpulab-swn1"]


def test_a_task_swarm_cannot_run_is_released_and_the_user_told_why(hub):
    t0 = time.monotonic()
    r = hub.spawn("rex", {"profile": "noimage"})
    assert r.status_code == 503, r.text
    assert "could not start on GPU server 'gpulab-swn3' (task-failed)" in r.json()["message"]
    assert time.monotonic() - t0 < 15
    led = hub.ledger()
    assert led.open_allocations(user="rex") == []  # the seat was released
    assert not [i for i in hub.object_ids() if i]  # and the service removed
    assert "No such image" in hub.log_path.read_text()  # Swarm's words, for the admin
    led.close()


def test_a_task_swarm_cannot_place_is_released_and_the_user_told_why(tmp_path):
    hub = new_swarm_hub(
        tmp_path,
        # a constraint no node meets: every task of this hub stays pending, "no suitable node"
        extra='c.GPUSwarmSpawner.extra_placement_spec = {"constraints": ["node.labels.gpulab-test==nowhere"]}\n',
    )
    try:
        hub.start()
        hub.create_user("rex", ["researchers"])
        t0 = time.monotonic()
        r = hub.spawn("rex", {"profile": "a40"})
        assert r.status_code == 503, r.text
        assert "takes no new servers right now" in r.json()["message"]
        assert time.monotonic() - t0 < 10
        led = hub.ledger()
        assert led.open_allocations() == []  # released
        [a] = led.allocations_between(EPOCH, FAR)
        assert a.end_reason == "failed"
        assert hub.object_ids() == []  # the service was removed
        assert led.refusals_since(EPOCH) == {"unplaceable": 1}
        led.close()
    finally:
        hub.close()


def test_the_agent_runs_as_a_swarm_global_service_on_every_gpu_node(hub, tmp_path):
    """As the README's global service: one task per GPU node, its name from Swarm's template,
    its token from a file on the host; here its NVML is the fake one (mounted checkout)."""
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    tokens.chmod(0o755)
    for node in GPU_NODE.values():
        (tokens / f"{node}.token").write_text(hub.token_file(node).read_text())
        (tokens / f"{node}.token").chmod(0o644)  # the image runs as jovyan
    for node in set(GPU_NODE.values()):
        hub.stop_agent(node)
    repo = str(TESTS.parent)
    started = time.time()
    sdocker(
        "service", "create", "-d", "--no-resolve-image", "--name", f"{hub.prefix}-agents",
        "--mode", "global", "--constraint", "node.role==worker", "--restart-condition", "on-failure",
        "--env", "GPULAB_NODE_NAME={{.Node.Hostname}}",
        "--env", f"GPULAB_SERVICE_URL={hub.url}/services/gpulab/",
        "--env", "GPULAB_NODE_TOKEN_FILE=/run/secrets/gpulab-node-token",
        "--mount", f"type=bind,src={tokens}/{{{{.Node.Hostname}}}}.token,dst=/run/secrets/gpulab-node-token,ro",
        "--mount", f"type=bind,src={repo},dst={repo},ro",
        IMAGE, f"{repo}/.venv/bin/python", f"{repo}/tests/agent_fakes.py", "by-node", "--",
        "--interval", "1",
    )  # fmt: skip
    led = hub.ledger()
    try:
        wait_for(
            "both GPU nodes reporting from the global service",
            lambda: all(
                (n := led.node(node)).agent_seen_at
                and n.agent_seen_at.timestamp() > started + 1
                and n.available
                for node in set(GPU_NODE.values())
            ),
            60,
            hub,
        )
        tasks = sdocker(
            "service", "ps", "--format", "{{.Node}} {{.CurrentState}}", f"{hub.prefix}-agents"
        ).stdout
        assert sorted(line.split()[0] for line in tasks.splitlines() if "Running" in line) == [
            "gpulab-swn2", "gpulab-swn3"
        ]  # fmt: skip
        assert (
            hub.spawn_ready("rex", {"profile": "a40"})["state"]["gpulab_slice"]
            == "GPU-e2e0a400-0000-4000-8000-000000000002"
        )
    finally:
        sdocker("service", "rm", f"{hub.prefix}-agents", check=False)
        for node in set(GPU_NODE.values()):
            hub.start_agent(node)
        led.close()
    hub.wait_reported(list(set(GPU_NODE.values())))


SILENT = """
def _silent(spawner):
    if spawner.user.name == "sil":  # a server that never answers: the hub waits on it
        spawner.cmd = ["sh", "-c", "sleep 3600"]
c.Spawner.pre_spawn_hook = _silent
c.Spawner.http_timeout = 3600
c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0}
"""


def test_a_hub_killed_while_a_server_starts_leaves_no_allocation_or_service(tmp_path):
    hub = new_swarm_hub(tmp_path, extra=SILENT)
    try:
        hub.start()
        hub.create_user("sil", ["students"])
        assert hub.spawn("sil", {"profile": "mig"}).status_code == 202
        led = hub.ledger()
        [held] = wait_for("sil's allocation", lambda: led.open_allocations(user="sil"), 30, hub)
        wait_for(
            "sil's task running",
            lambda: (
                hub.object_ids() and hub.task(f"{hub.prefix}-sil")["Status"]["State"] == "running"
            ),
            60,
            hub,
        )
        hub.kill()  # mid-spawn: JupyterHub never saved sil's state
        hub.extra_config += "c.Spawner.http_timeout = 3\nc.GPUSwarmSpawner.reconcile_interval = 2\n"
        hub.start()
        wait_for(
            "no allocation and no service left",
            lambda: not led.open_allocations() and not hub.object_ids(),
            90,
            hub,
        )
        assert led.get(held.id).end_reason in (
            "stopped", "failed", "reconciled:no-server", "reconciled:not-held"
        )  # fmt: skip
        assert hub.server("sil") is None
        led.close()
    finally:
        hub.close()

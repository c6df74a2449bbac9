"""The spawner end to end: a real JupyterHub, its real proxy, real servers, on each backend.

Every test runs twice (the module's ``hub`` is parametrised by backend): on GPUDockerSpawner
with real containers on this host's Docker engine, and on GPUSwarmSpawner with real services on
the test Swarm (``swarm_support``: the same lab, its GPUs split over two nodes, reported by node
agents). The Docker engine here has no NVIDIA runtime, so its hubs attach slices in ``env`` mode
(what a host whose default runtime is ``nvidia`` uses); the ``device_request`` path is checked
against this engine's refusal, and in test_spawner_gpusim.py against an engine with the
toolkit's hook. The Swarm's GPU nodes run the NVIDIA runtime stand-in (test_swarm_e2e.py).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from e2e_support import SpawnPage, backend_params, hub_login, new_hub, require_docker

from jupyterhub_gpulab.ledger import Ledger

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module", params=backend_params())
def hub(request, tmp_path_factory):
    require_docker()
    if request.param == "swarm":
        from swarm_support import new_swarm_hub

        h = new_swarm_hub(tmp_path_factory.mktemp("swarm-hub"))
    else:
        h = new_hub(tmp_path_factory.mktemp("hub"))
    try:
        h.start()
        for i in range(1, 25):
            h.create_user(f"student{i}", ["students"])
        h.create_user("researcher1", ["researchers"])
        yield h
    finally:
        h.close()


@pytest.fixture
def ledger(hub):
    led = Ledger(f"sqlite:///{hub.workdir}/gpulab.sqlite")
    yield led
    led.close()


@pytest.fixture(autouse=True)
def _stop_everything(request):
    yield
    if "hub" not in request.fixturenames:
        return
    hub = request.getfixturevalue("hub")
    for u in hub.api("GET", "/users").json():
        for name in list(u.get("servers", {})):
            hub.api("DELETE", hub.server_path(u["name"], name))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not any(u.get("servers") for u in hub.api("GET", "/users").json()):
            break
        time.sleep(0.3)


def test_each_user_gets_their_own_slice_and_cpu_gets_void(hub, ledger):
    a = hub.spawn_ready("student1", {"profile": "mig"})["state"]
    b = hub.spawn_ready("student2", {"profile": "mig"})["state"]
    c = hub.spawn_ready("student3", {"profile": "cpu"})["state"]
    env_a, env_b, env_c = (
        hub.env_of(a["object_name"]),
        hub.env_of(b["object_name"]),
        hub.env_of(c["object_name"]),
    )
    assert {env_a["NVIDIA_VISIBLE_DEVICES"], env_b["NVIDIA_VISIBLE_DEVICES"]} == {
        "MIG-e2e00100-0000-4000-8000-000000000000",
        "MIG-e2e00101-0000-4000-8000-000000000001",
    }
    assert env_a["NVIDIA_VISIBLE_DEVICES"] == a["gpulab_slice"]
    assert env_c["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert env_a["FRAMEWORK"] == "pytorch"  # the profile's env reaches the container
    # the ledger agrees with the containers, and the labels name the allocation
    held = {x.user: x for x in ledger.open_allocations()}
    assert set(held) == {"student1", "student2"}
    labels = hub.labels_of(a["object_name"])
    assert labels["org.jupyter.gpulab.allocation"] == str(a["gpulab_allocation"])
    assert labels["org.jupyter.gpulab.slice"] == a["gpulab_slice"]
    assert held["student1"].container_id == a["object_id"]
    # the profile's limits (1 GiB, 1 CPU) are the container's or the service's
    assert hub.limits_of(a["object_name"]) == (2**30, 10**9)


def test_a_full_lab_refuses_within_a_second_then_admits_after_a_stop(hub, ledger):
    hub.spawn_ready("student1", {"profile": "mig"})
    hub.spawn_ready("student2", {"profile": "mig"})
    t0 = time.monotonic()
    r = hub.spawn("student3", {"profile": "mig"})
    elapsed = time.monotonic() - t0
    assert r.status_code == 503
    assert "No free MIG 1g.10gb slice (0 of 2 free)" in r.json()["message"]
    assert elapsed < 1.0
    assert hub.server("student3") is None
    hub.stop_server("student1")
    hub.spawn_ready("student3", {"profile": "mig"})
    assert sorted(a.user for a in ledger.open_allocations()) == ["student2", "student3"]
    assert (
        ledger.refusals_since(ledger.open_allocations()[0].started_at.replace(year=2000))[
            "no-free-slice"
        ]
        >= 1
    )


def test_twenty_concurrent_spawns_for_five_seats(hub, ledger):
    users = [f"student{i}" for i in range(1, 21)]
    with ThreadPoolExecutor(20) as pool:
        responses = list(pool.map(lambda u: hub.spawn(u, {"profile": "seat"}), users))
    codes = [r.status_code for r in responses]
    refused = [r for r in responses if r.status_code == 503]
    assert len(refused) == 15, codes
    assert all(
        "No free shared GPU seat slice (0 of 5 free)" in r.json()["message"] for r in refused
    )
    winners = [u for u, r in zip(users, responses) if r.status_code in (201, 202)]
    assert len(winners) == 5
    states = [hub.wait_ready(u)["state"] for u in winners]
    assert len({s["gpulab_slice"] for s in states}) == 5
    seats = {hub.env_of(s["object_name"])["GPULAB_SLICE"] for s in states}
    assert seats == {f"GPU-e2e0f400-0000-4000-8000-000000000001/seat-{i}" for i in range(5)}
    assert ledger.double_allocations() == []
    # stop them all: nothing left behind
    for u in winners:
        hub.stop_server(u)
    assert ledger.open_allocations() == []
    assert hub.object_ids() == []


def test_a_killed_container_frees_its_slice_at_the_next_poll(hub, ledger):
    state = hub.spawn_ready("researcher1", {"profile": "a40"})["state"]
    hub.kill_object(state["object_name"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and ledger.open_allocations():
        time.sleep(0.5)
    assert ledger.open_allocations() == []
    closed = ledger.get(state["gpulab_allocation"])
    # a container's exit, or a Swarm task that failed (Swarm never restarts a gpulab task)
    assert closed.end_reason in ("container-gone", "exited", "stopped", "task-failed")
    # the hub notices too (it may still be finishing the stop), and the slice can be taken again
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and hub.server("researcher1") is not None:
        time.sleep(0.3)
    assert hub.server("researcher1") is None
    hub.spawn_ready("researcher1", {"profile": "a40"})


def test_not_entitled_and_unknown_profiles_are_400_with_the_choices(hub):
    r = hub.spawn("student1", {"profile": "a40"})
    assert r.status_code == 400
    msg = r.json()["message"]
    assert "a40" in msg and "'mig'" in msg and "'cpu'" in msg
    r = hub.spawn("student1", {"profile": "no-such"})
    assert r.status_code == 400 and "no-such" in r.json()["message"]
    r = hub.spawn("student1", {"profile": ["mig", "cpu"]})
    assert r.status_code == 400
    assert hub.server("student1") is None


def test_users_cannot_override_the_gpu_variables(hub):
    r = hub.spawn("student1", {"profile": "mig", "env": {"NVIDIA_VISIBLE_DEVICES": "all"}})
    assert r.status_code == 400 and "Unknown option" in r.json()["message"]
    r = hub.spawn("student1", {"profile": "cpu", "image": "busybox"})
    assert r.status_code == 400
    state = hub.spawn_ready("student1", {"profile": "cpu"})["state"]
    assert hub.env_of(state["object_name"])["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_named_servers_count_against_the_per_user_limit(hub, ledger):
    hub.spawn_ready("researcher1", {"profile": "mig"}, "one")
    hub.spawn_ready("researcher1", {"profile": "seat"}, "two")
    hub.spawn_ready("researcher1", {"profile": "a40"}, "three")
    r = hub.spawn("researcher1", {"profile": "seat"}, name="four")
    assert r.status_code == 429
    assert "You already hold 3 GPU slices" in r.json()["message"]
    # CPU servers hold no slice and are not counted
    hub.spawn_ready("researcher1", {"profile": "cpu"}, "four")
    assert len(ledger.open_allocations(user="researcher1")) == 3


def test_the_form_shows_entitled_profiles_with_capacity_and_disables_full_ones(hub):
    hub.spawn_ready("student1", {"profile": "mig"})
    hub.spawn_ready("student2", {"profile": "mig"})
    s = hub_login(hub, "student3")
    page = s.get(f"{hub.url}/hub/spawn")
    assert page.status_code == 200
    p = SpawnPage(page.text)
    assert set(p.radios) == {"mig", "seat", "cpu"}  # not the researchers' a40
    assert p.radios["mig"]["disabled"] and not p.radios["mig"]["checked"]
    assert "0 of 2 free" in p.text and "5 of 5 free" in p.text
    assert "You hold 0 of the 1 GPU slice your groups allow at once." in p.text
    assert not p.radios["seat"]["disabled"]
    # a not-entitled value posted by hand is refused with the choices, nothing starts
    action = hub.url + p.action
    r = s.post(action, data={"profile": "a40"})
    assert r.status_code == 400
    assert "You may pick" in SpawnPage(r.text).text
    assert hub.server("student3") is None
    # a valid pick starts the server
    r = s.post(action, data={"profile": "seat"})
    assert r.status_code == 200
    state = hub.wait_ready("student3")["state"]
    assert hub.env_of(state["object_name"])["GPULAB_SLICE_KIND"] == "shared"


def test_an_admin_restart_reuses_the_users_last_profile(hub):
    hub.spawn_ready("student4", {"profile": "seat"})
    hub.stop_server("student4")
    # no options: the REST API an admin uses
    r = hub.spawn("student4", {})
    assert r.status_code in (201, 202)
    assert hub.wait_ready("student4")["state"]["gpulab_profile"] == "seat"

"""Hub restarts, GPU runtime refusals and reconcile, on a real hub and a real Docker engine."""

from __future__ import annotations

import subprocess
import time

import pytest
import requests
from e2e_support import containers_with_label, ledger_of, on_both_backends, require_docker

pytestmark = pytest.mark.docker


def reach(hub, user) -> int:
    """GET the user's server through the proxy, as the browser would (with the service token)."""
    r = requests.get(
        f"{hub.url}/user/{user}/api/status",
        headers={"Authorization": f"token {hub.token}"},
        timeout=30,
    )
    return r.status_code


@on_both_backends
def test_hub_restart_keeps_servers_and_allocations(hub_factory):
    hub = hub_factory(
        extra="c.JupyterHub.cleanup_servers = False\nc.JupyterHub.cleanup_proxy = False\n"
    )
    hub.start()
    hub.create_user("ann", ["students"])
    hub.create_user("bob", ["students"])
    for u in ("ann", "bob"):
        assert hub.spawn(u, {"profile": "mig"}).status_code in (201, 202)
        hub.wait_ready(u)
    led = ledger_of(hub)
    before = sorted((a.id, a.slice_id, a.container_id) for a in led.open_allocations())
    assert len(before) == 2
    hub.stop()  # servers and proxy keep running
    assert len(hub.object_ids()) == 2
    hub.start()
    time.sleep(3)  # a poll round
    after = sorted((a.id, a.slice_id, a.container_id) for a in led.open_allocations())
    assert after == before
    assert led.double_allocations() == []
    for u in ("ann", "bob"):
        assert hub.server(u)["ready"]
        assert reach(hub, u) == 200
    # the restarted hub still refuses a third MIG spawn: both slices are still held
    hub.create_user("cat", ["students"])
    assert hub.spawn("cat", {"profile": "mig"}).status_code == 503
    led.close()


def test_restart_closes_allocations_whose_container_vanished_and_removes_orphans(hub_factory):
    hub = hub_factory(
        extra="c.JupyterHub.cleanup_servers = False\nc.JupyterHub.cleanup_proxy = False\nc.GPUDockerSpawner.reconcile_interval = 2\n"
    )
    hub.start()
    hub.create_user("ann", ["students"])
    hub.create_user("bob", ["students"])
    ann = (hub.spawn("ann", {"profile": "mig"}), hub.wait_ready("ann")["state"])[1]
    bob = (hub.spawn("bob", {"profile": "seat"}), hub.wait_ready("bob")["state"])[1]
    hub.stop()
    # While the hub is down: ann's container disappears; bob's allocation is released by hand
    # (as an admin's "release stale allocation" would), leaving bob's container an orphan that a
    # JupyterHub server still points at.
    subprocess.run(["docker", "rm", "-f", ann["object_name"]], check=True, capture_output=True)
    led = ledger_of(hub)
    led.release(bob["gpulab_allocation"], "admin")
    hub.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if led.get(ann["gpulab_allocation"]).ended_at and led.open_allocations(user="bob"):
            break
        time.sleep(0.5)
    assert led.get(ann["gpulab_allocation"]).ended_at is not None
    assert hub.server("ann") is None
    # bob's running server was re-adopted on the same seat, not left holding an untracked GPU
    reheld = led.open_allocations(user="bob")
    assert [a.slice_id for a in reheld] == [bob["gpulab_slice"]]
    assert hub.server("bob")["ready"]
    led.close()


def test_device_request_on_an_engine_without_the_gpu_runtime(hub_factory):
    hub = hub_factory(attach_mode="device_request")
    hub.start()
    hub.create_user("ann", ["students"])
    t0 = time.monotonic()
    r = hub.spawn("ann", {"profile": "mig"})
    assert r.status_code == 503, r.text
    msg = r.json()["message"]
    assert "GPU runtime is missing" in msg and "CPU-only profile" in msg
    assert time.monotonic() - t0 < 10
    # the admin learns what to install
    assert "NVIDIA Container Toolkit" in hub.log_tail(200)
    led = ledger_of(hub)
    assert led.open_allocations() == []
    assert led.refusals_since(led.get(1).started_at.replace(year=2000)) == {
        "gpu-runtime-missing": 1
    }
    assert containers_with_label(f"org.jupyter.gpulab.node={hub.workdir.name}") == []
    # a CPU profile still works on this host
    assert hub.spawn("ann", {"profile": "cpu"}).status_code in (201, 202)
    hub.wait_ready("ann")
    led.close()


@pytest.fixture(scope="module")
def sleeper_image():
    """An image whose server never answers (its command sleeps), built from the test image."""
    require_docker()
    from e2e_support import IMAGE

    tag = "gpulab/test-sleeper:latest"
    cid = subprocess.run(
        ["docker", "create", IMAGE], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        subprocess.run(
            ["docker", "commit", "--change", 'CMD ["sleep", "infinity"]', cid, tag],
            capture_output=True,
            check=True,
        )
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
    return tag


SLOW_API = 'c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0}\n'


def progress_events(hub, user, timeout=60) -> list[dict]:
    """Read the spawn's progress stream (server-sent events) to its end."""
    import json

    events = []
    with requests.get(
        f"{hub.url}/hub/api/users/{user}/server/progress",
        headers={"Authorization": f"token {hub.token}"},
        stream=True,
        timeout=timeout,
    ) as r:
        assert r.status_code == 200, r.text
        for line in r.iter_lines(decode_unicode=True):
            if line and line.startswith("data:"):
                events.append(json.loads(line[5:]))
                if events[-1].get("ready") or events[-1].get("failed"):
                    break
    return events


@on_both_backends
def test_progress_reports_the_real_steps(hub_factory):
    hub = hub_factory(extra=SLOW_API)
    hub.start()
    hub.create_user("ann", ["students"])
    assert hub.spawn("ann", {"profile": "mig"}).status_code == 202
    messages = [e.get("message", "") for e in progress_events(hub, "ann")]
    joined = "\n".join(messages)
    assert "Profile: PyTorch (MIG 1g.10gb)" in joined
    assert "Reserved MIG 1g.10gb on GPU 0 (NVIDIA A100-SXM4-80GB)" in joined
    creating = "Creating service" if hub.backend == "swarm" else "Creating container"
    assert creating in joined
    if hub.backend == "swarm":  # and the node it is pinned to
        assert f"{creating} {hub.prefix}-ann on node gpulab-swn2" in joined
    started = "Service started" if hub.backend == "swarm" else "Container started"
    assert f"{started}; waiting for the server to answer" in joined
    assert messages.index(next(m for m in messages if m.startswith("Reserved"))) < messages.index(
        next(m for m in messages if m.startswith(creating))
    )


def test_a_server_that_never_answers_releases_its_slice(hub_factory, sleeper_image):
    extra = (
        SLOW_API
        + "c.Spawner.http_timeout = 5\n"
        + (
            "c.GPULab.profiles = c.GPULab.profiles + [{'slug': 'sleeper', 'display_name': 'Never answers', "
            f"'image': {sleeper_image!r}, 'slice': {{'kind': 'gpu'}}}}]\n"
            "c.GPULab.default_policy = {'max_slices_per_user': 2}\n"
        )
    )
    hub = hub_factory(extra=extra)
    hub.start()
    hub.create_user("ann")
    assert hub.spawn("ann", {"profile": "sleeper"}).status_code == 202
    events = progress_events(hub, "ann", timeout=90)
    assert events[-1].get("failed"), events
    led = ledger_of(hub)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and led.open_allocations():
        time.sleep(0.5)
    assert led.open_allocations() == []
    assert containers_with_label(f"org.jupyter.gpulab.node={hub.workdir.name}") == []
    # the A40 is free again for the next user
    assert hub.spawn("ann", {"profile": "a40"}).status_code in (201, 202)
    led.close()


def test_restart_removes_a_labelled_container_nobody_owns(hub_factory):
    hub = hub_factory(
        extra="c.JupyterHub.cleanup_servers = False\nc.JupyterHub.cleanup_proxy = False\nc.GPUDockerSpawner.reconcile_interval = 2\n"
    )
    hub.start()
    hub.create_user("ann", ["students"])
    state = (hub.spawn("ann", {"profile": "mig"}), hub.wait_ready("ann")["state"])[1]
    hub.stop()
    # While the hub is down its database forgets the server (as after restoring an old backup);
    # the container still runs, labelled with an allocation the ledger then closes.
    import sqlite3

    db = sqlite3.connect(hub.workdir / "jupyterhub.sqlite")
    db.execute("UPDATE spawners SET server_id = NULL, state = '{}'")
    db.execute("DELETE FROM servers")
    db.commit()
    db.close()
    led = ledger_of(hub)
    led.release(state["gpulab_allocation"], "admin")
    hub.start()
    hub.create_user("bob", ["students"])
    # the first spawn in the new hub process starts the reconcile
    assert hub.spawn("bob", {"profile": "cpu"}).status_code in (201, 202)
    hub.wait_ready("bob")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        r = subprocess.run(["docker", "inspect", state["object_name"]], capture_output=True)
        if r.returncode != 0:
            break
        time.sleep(0.5)
    assert r.returncode != 0, "the orphan container should have been removed"
    led.close()


@on_both_backends
def test_a_spent_gpu_hour_budget_refuses_gpu_spawns_but_not_cpu(hub_factory):
    from datetime import timedelta

    from jupyterhub_gpulab import clock
    from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
    from jupyterhub_gpulab.ledger.schema import allocations

    today = clock.utcnow().date()
    hub = hub_factory(
        extra='c.GPULab.group_policies = {"students": {"profiles": ["mig", "seat", "cpu"], '
        '"max_slices_per_user": 1, "gpu_hours": 1, "period": "term"}}\n'
        f"c.GPULab.term_start = {str(today - timedelta(days=30))!r}\n"
        f"c.GPULab.term_end = {str(today + timedelta(days=30))!r}\n"
    )
    hub.start()
    hub.create_user("ann", ["students"])
    led = ledger_of(hub)
    # ann used a whole A40 for 2 hours earlier this term
    hub.declare_inventory(led)
    used = led.claim(SliceRequest(kind=SliceKind.GPU), user="ann", profile="a40")
    led.release(used.allocation.id, "stopped")
    end = clock.utcnow()
    with led.engine.begin() as conn:
        conn.execute(
            allocations.update()
            .where(allocations.c.id == used.allocation.id)
            .values(started_at=end - timedelta(hours=2), ended_at=end)
        )
    t0 = time.monotonic()
    r = hub.spawn("ann", {"profile": "seat"})
    assert r.status_code == 429, r.text
    msg = r.json()["message"]
    assert "You have used 2.0 of 1 GPU-hours this term (students)" in msg
    assert "ask your instructor" in msg
    assert time.monotonic() - t0 < 1.5
    # checked before any claim: no allocation row but ann's history, not even a closed one
    with led.engine.connect() as conn:
        assert [r.id for r in conn.execute(allocations.select())] == [used.allocation.id]
    assert led.refusals_since(end - timedelta(days=1)) == {"quota": 1}
    # CPU work is never counted against the budget
    assert hub.spawn("ann", {"profile": "cpu"}).status_code in (201, 202)
    led.close()

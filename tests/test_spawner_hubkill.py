"""A hub killed with SIGKILL while servers start, and containers a server must never adopt: every
allocation ends, and no container holds a slice the ledger did not give it. A real hub and proxy,
real containers on Docker, the real ledger (SQLite)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time

import pytest
from e2e_support import (
    containers_with_label,
    env_of,
    gpulab_config,
    inspect,
    ledger_of,
)
from hubtools import wait_for

from jupyterhub_gpulab.ledger import Ledger
from jupyterhub_gpulab.spawner.reconcile import NO_SERVER

pytestmark = pytest.mark.docker

#: Seconds between reconcile passes in the restarted hubs.
INTERVAL = 3

#: Spawn requests answer at once (202) instead of after JupyterHub's 10 s slow-spawn wait.
FAST_API = 'c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0}\n'

#: Hooks that hold spawns in flight in the hub that is killed. Users in SLOW_CREATE have their
#: slice claimed but their container not yet created (an async extra_create_kwargs, as a config
#: computing per-user options would have); users in SILENT run a container whose server never
#: answers; users in POST_START also wait in a post-start command, so the hub dies before it
#: saved their state.
IN_FLIGHT = """
import asyncio
SLOW_CREATE = {slow_create!r}
SILENT = {silent!r}
POST_START = {post_start!r}

async def _slow_create(spawner):
    if spawner.user.name in SLOW_CREATE:
        await asyncio.sleep(3600)
    return {{}}

def _hold(spawner):
    if spawner.user.name in SILENT:
        spawner.cmd = ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
    if spawner.user.name in POST_START:
        spawner.post_start_cmd = "sleep 3600"

c.DockerSpawner.extra_create_kwargs = _slow_create
c.Spawner.pre_spawn_hook = _hold
c.Spawner.start_timeout = 3600
c.Spawner.http_timeout = 3600
"""

#: The restarted hub: nothing held, servers that do not answer within 3 s are shut down.
RESTARTED = f"""
c.Spawner.http_timeout = 3
c.GPUDockerSpawner.reconcile_interval = {INTERVAL}
"""


def post_start_running(container: str) -> bool:
    """The container runs and its post-start command (a docker exec) has begun."""
    try:
        info = inspect(container)
    except subprocess.CalledProcessError:
        return False
    return info["State"]["Running"] and bool(info.get("ExecIDs"))


def server_listening(container: str) -> bool:
    """The single-user server in the container listens (Jupyter Server's "is running at" line).

    jupyterhub-singleuser asks the hub for its version before it listens, and exits after five
    failed tries (~46 s, JupyterHub's ``check_hub_version``): a hub killed before that answer
    leaves a server that never listens, which is a different case from the one tested here."""
    logs = subprocess.run(
        ["docker", "logs", container], capture_output=True, text=True, check=False
    )
    return "is running at" in logs.stdout + logs.stderr


def saved_state(hub, user: str) -> dict:
    """The server's state as JupyterHub saved it in its database (the REST API shows the live
    one)."""
    db = sqlite3.connect(f"file:{hub.workdir / 'jupyterhub.sqlite'}?mode=ro", uri=True)
    try:
        row = db.execute(
            "SELECT spawners.state FROM spawners JOIN users ON users.id = spawners.user_id "
            "WHERE users.name = ? AND spawners.name = ''",
            (user,),
        ).fetchone()
    finally:
        db.close()
    return json.loads(row[0]) if row and row[0] else {}


def held_by(led: Ledger) -> dict[str, int]:
    return {a.user: a.id for a in led.open_allocations()}


def test_a_hub_killed_with_8_spawns_in_flight_leaves_no_allocation_open(hub_factory):
    """SIGKILL the hub while 8 GPU servers start, start it again: within about one reconcile
    interval every allocation of a server that is not running is closed, with a reason, and the
    running one keeps its own."""
    slow_create = ["s1", "s3", "s4", "s5", "r0"]
    silent, post_start = ["s0", "s6"], ["s6"]
    hub = hub_factory(
        extra=FAST_API
        + IN_FLIGHT.format(slow_create=slow_create, silent=silent, post_start=post_start)
    )
    hub.start()
    node = hub.workdir.name
    profile = {"s0": "mig", "s1": "mig", "r0": "a40"}
    users = [f"s{i}" for i in range(7)] + ["r0"]
    for u in users:
        hub.create_user(u, ["researchers" if u == "r0" else "students"])
    led = ledger_of(hub)

    def spawn(u):
        r = hub.spawn(u, {"profile": profile.get(u, "seat")})
        assert r.status_code in (201, 202), r.text

    # s2 runs; s0's container runs but never answers (its state, with the allocation, is saved)
    spawn("s2")
    hub.wait_ready("s2")
    spawn("s0")
    wait_for("s0's saved state", lambda: "gpulab_allocation" in saved_state(hub, "s0"), hub=hub)
    # five claimed slices whose containers are not created yet
    for u in slow_create:
        spawn(u)
    wait_for("five claims", lambda: set(slow_create) <= set(held_by(led)), hub=hub)
    # s6's container runs its post-start command: the hub has not saved s6's state
    spawn("s6")
    wait_for("s6's post-start command", lambda: post_start_running(f"{node}-s6"), hub=hub)
    before = held_by(led)
    assert set(before) == set(users), before
    assert "gpulab_allocation" not in saved_state(hub, "s6")
    assert all(hub.server(u)["pending"] == "spawn" for u in users if u != "s2")

    hub.kill()
    hub.extra_config = gpulab_config(node, extra=FAST_API + RESTARTED)
    hub.start()
    t0 = time.monotonic()

    def settled():
        servers = {u: hub.server(u) for u in users}
        running = {u for u, s in servers.items() if s and s["ready"]}
        still_open = {a.user for a in led.open_allocations()}
        return (
            running
            if still_open == running and not any(servers[u] for u in users if u not in running)
            else None
        )

    running = wait_for("every allocation settled", settled, timeout=INTERVAL + 20, hub=hub)
    elapsed = time.monotonic() - t0
    print(f"all allocations settled {elapsed:.1f} s after the restarted hub answered")
    assert running == {"s2"}
    assert elapsed <= INTERVAL + 5, elapsed
    # the running server keeps its own allocation, recorded in its state
    assert hub.server("s2")["state"]["gpulab_allocation"] == before["s2"]
    # every other one ended with a reason: the reconcile's for the never-created containers, the
    # hub's own shutdown ("stopped") for the servers that never answered
    reasons = {u: led.get(before[u]).end_reason for u in users if u != "s2"}
    assert reasons == {**dict.fromkeys(slow_create, NO_SERVER), "s0": "stopped", "s6": "stopped"}
    assert containers_with_label(f"org.jupyter.gpulab.node={hub.workdir.name}") == [
        inspect(hub.server("s2")["state"]["object_name"])["Id"][:12]
    ]
    assert led.double_allocations() == []
    # the freed slices (and the students' one-slice limits) are usable again: a new claim
    spawn("s1")
    wait_for("s1's new claim", lambda: held_by(led).get("s1", before["s1"]) != before["s1"])
    led.close()


def test_a_server_that_never_showed_up_after_a_hub_kill_releases_its_slice(hub_factory):
    """The hub dies while a server starts, before it saved the server's state; the new hub finds
    the container but no server answers, and shuts it down ("does not appear to be running"):
    the allocation closes then, not at the next reconcile."""
    hub = hub_factory(
        extra=FAST_API + IN_FLIGHT.format(slow_create=[], silent=["ann"], post_start=["ann"])
    )
    hub.start()
    hub.create_user("ann", ["researchers"])
    assert hub.spawn("ann", {"profile": "a40"}).status_code == 202
    name = f"{hub.workdir.name}-ann"
    wait_for("ann's post-start command", lambda: post_start_running(name), hub=hub)
    led = ledger_of(hub)
    (aid,) = held_by(led).values()

    hub.kill()
    # no reconcile pass after the first (at start, while JupyterHub checks the server): only
    # the hub's own shutdown of the silent server can close the allocation
    restarted = (
        FAST_API + "c.Spawner.http_timeout = 3\nc.GPUDockerSpawner.reconcile_interval = 600\n"
    )
    hub.extra_config = gpulab_config(hub.workdir.name, extra=restarted)
    hub.start()
    wait_for("the allocation closed", lambda: not led.get(aid).open, timeout=20, hub=hub)
    assert led.get(aid).end_reason == "stopped"
    assert hub.server("ann") is None
    assert containers_with_label(f"org.jupyter.gpulab.node={hub.workdir.name}") == []
    assert "does not appear to be running" in hub.log_tail(400)
    led.close()


def test_a_container_holding_a_slice_its_server_does_not_hold_is_never_adopted(hub_factory):
    """The incident: a CPU server came back holding an A40 the ledger had given to someone else,
    because an old container made with that GPU came back. Here the hub's database is restored
    from a backup taken while ann ran a CPU server, while her A40 container still runs and her
    A40 allocation was released; the restarted hub must not adopt that container, so the A40
    goes to bob alone."""
    hub = hub_factory(
        extra=FAST_API
        + "c.JupyterHub.cleanup_servers = False\nc.JupyterHub.cleanup_proxy = False\n"
        + f"c.GPUDockerSpawner.reconcile_interval = {INTERVAL}\n"
    )
    hub.start()
    hub.create_user("ann", ["researchers"])
    hub.create_user("bob", ["researchers"])
    assert hub.spawn("ann", {"profile": "a40"}).status_code in (201, 202)
    state = hub.wait_ready("ann")["state"]
    assert (
        env_of(state["object_name"])["NVIDIA_VISIBLE_DEVICES"]
        == "GPU-e2e0a400-0000-4000-8000-000000000002"
    )
    hub.stop()  # ann's container keeps running
    led = ledger_of(hub)
    led.release(state["gpulab_allocation"], "admin")
    db = sqlite3.connect(hub.workdir / "jupyterhub.sqlite")
    cpu_state = {k: v for k, v in state.items() if not k.startswith("gpulab_")}
    cpu_state["gpulab_profile"] = cpu_state["gpulab_last_profile"] = "cpu"
    db.execute(
        "UPDATE spawners SET state = ? WHERE user_id = (SELECT id FROM users WHERE name = 'ann')",
        (json.dumps(cpu_state),),
    )
    db.commit()
    db.close()

    hub.start()
    assert hub.spawn("bob", {"profile": "a40"}).status_code in (201, 202)
    hub.wait_ready("bob")
    wait_for(
        "ann's old container gone",
        lambda: (
            subprocess.run(
                ["docker", "inspect", state["object_name"]], capture_output=True
            ).returncode
        ),
        timeout=20,
        hub=hub,
    )
    assert hub.server("ann") is None
    with_a40 = [
        cid
        for cid in containers_with_label(f"org.jupyter.gpulab.node={hub.workdir.name}")
        if env_of(cid).get("NVIDIA_VISIBLE_DEVICES") == "GPU-e2e0a400-0000-4000-8000-000000000002"
    ]
    assert len(with_a40) == 1
    assert inspect(with_a40[0])["Config"]["Labels"]["org.jupyter.gpulab.user"] == "bob"
    assert "instead of adopting it" in hub.log_tail(400)
    assert led.double_allocations() == []
    led.close()


def test_a_server_that_started_while_the_hub_died_is_adopted_at_its_real_address(hub_factory):
    """The hub dies after ann's container started but before it stored the server's address (and
    state): the restarted hub asks the spawner where the server listens (``get_url``) and finds
    it ready, keeping its allocation, instead of waiting on the placeholder address it had saved
    and shutting a working server down."""
    hub = hub_factory(
        extra=FAST_API + IN_FLIGHT.format(slow_create=[], silent=[], post_start=["ann"])
    )
    hub.start()
    hub.create_user("ann", ["researchers"])
    assert hub.spawn("ann", {"profile": "a40"}).status_code == 202
    name = f"{hub.workdir.name}-ann"
    wait_for("ann's post-start command", lambda: post_start_running(name), hub=hub)
    wait_for("ann's server listening", lambda: server_listening(name), 90, hub=hub)
    led = ledger_of(hub)
    (aid,) = held_by(led).values()
    assert "gpulab_allocation" not in saved_state(hub, "ann")

    hub.kill()
    restarted = (
        FAST_API + "c.Spawner.http_timeout = 30\nc.GPUDockerSpawner.reconcile_interval = 600\n"
    )
    hub.extra_config = gpulab_config(hub.workdir.name, extra=restarted)
    hub.start()
    wait_for("ann's server ready", lambda: (hub.server("ann") or {}).get("ready"), 40, hub=hub)
    server = hub.server("ann")
    assert server and server["ready"], hub.log_tail(200)
    assert led.get(aid).open
    assert "does not appear to be running" not in hub.log_tail(400)
    assert inspect(name)["State"]["Running"]
    led.close()

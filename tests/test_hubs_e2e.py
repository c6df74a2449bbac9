"""Two hubs of one lab: one PostgreSQL ledger, one Docker engine, two node names.

The README's "hub replicas": hub A (node ``…-a``) runs the declared lab of e2e_support, hub B
(node ``…-b``) an A40 of its own, both on one PostgreSQL ledger (a database of their own, made
for this module) and on the main engine, with one container prefix. Hub B starting, running its
reconcile passes every 2 s, meeting A's container under one of its own names, and restarting
never removes hub A's running GPU server, nor closes its allocation. Also here:
the lab's own module loggers write through the hub's log, with level and time.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import time

import pytest
import sqlalchemy as sa
from e2e_support import gpulab_config, remove_node_containers, require_docker
from hubtools import Hub

from jupyterhub_gpulab.ledger import Ledger

pytestmark = [pytest.mark.docker, pytest.mark.postgres]

POSTGRES_URL = os.environ.get("GPULAB_TEST_POSTGRES_URL")
B_INVENTORY = [{"uuid": "GPU-hubs-b-a40", "index": 0, "name": "NVIDIA A40", "memory": "48GiB"}]
KEEP = "c.JupyterHub.cleanup_servers = False\nc.JupyterHub.cleanup_proxy = False\n"


def running(container: str) -> str | None:
    """The id of ``container`` if it runs, else ``None``."""
    r = subprocess.run(
        ["docker", "inspect", "-f", "{{.State.Running}} {{.Id}}", container],
        capture_output=True,
        text=True,
    )
    state, _, cid = r.stdout.strip().partition(" ")
    return cid if r.returncode == 0 and state == "true" else None


@pytest.fixture(scope="module")
def database():
    """A PostgreSQL database of this module's own (others' tests share the test database)."""
    require_docker()
    if not POSTGRES_URL:
        if os.environ.get("CI"):
            pytest.fail("CI needs GPULAB_TEST_POSTGRES_URL")
        pytest.skip("GPULAB_TEST_POSTGRES_URL not set (scripts/ensure-postgres.sh prints one)")
    name = "gpulab_hubs_" + secrets.token_hex(4)
    admin = sa.create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    yield sa.make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    admin.dispose()


@pytest.fixture(scope="module")
def hubs(tmp_path_factory, database):
    """Hub A runs ann's MIG server; then hub B starts and runs bob's A40 server."""
    base = "hubs" + secrets.token_hex(3)
    root = tmp_path_factory.mktemp(base)
    on_ledger = f"c.GPULab.db_url = {database!r}\nc.GPUDockerSpawner.reconcile_interval = 2\n"
    a = Hub(root / "a", gpulab_config(f"{base}-a", extra=on_ledger))
    b = Hub(
        root / "b",
        gpulab_config(
            f"{base}-b",
            extra=on_ledger
            + KEEP
            + f"c.GPULab.inventory = {B_INVENTORY!r}\n"
            + f"c.DockerSpawner.prefix = {base + '-a'!r}\n",  # the same container names as A's
        ),
    )
    try:
        a.start()
        a.create_user("ann", ["students"])
        assert a.spawn("ann", {"profile": "mig"}).status_code in (201, 202)
        ann = a.wait_ready("ann")["state"]
        b.start()
        b.create_user("bob", ["researchers"])
        assert b.spawn("bob", {"profile": "a40"}).status_code in (201, 202)
        bob = b.wait_ready("bob")["state"]  # its start ran B's first reconcile pass
        ann_id = running(ann["object_name"])
        yield {"a": a, "b": b, "ann": ann, "bob": bob, "ann_id": ann_id, "node_a": f"{base}-a"}
    finally:
        for hub in (b, a):
            hub.stop()
        for node in (f"{base}-a", f"{base}-b"):
            remove_node_containers(node)


def assert_ann_untouched(hubs, database) -> None:
    a, ann = hubs["a"], hubs["ann"]
    assert hubs["ann_id"] and running(ann["object_name"]) == hubs["ann_id"], a.log_tail(100)
    assert a.server("ann")["ready"]
    led = Ledger(database)
    try:
        held = {x.user: (x.id, x.node) for x in led.open_allocations()}
        assert held["ann"] == (ann["gpulab_allocation"], hubs["node_a"])
        assert led.double_allocations() == []
    finally:
        led.close()


def test_the_second_hubs_passes_never_remove_the_first_hubs_server(hubs, database):
    b = hubs["b"]
    time.sleep(5)  # two more of B's passes
    assert_ann_untouched(hubs, database)
    assert hubs["ann"]["object_name"] not in b.log_tail(400)
    assert b.server("bob")["ready"] and running(hubs["bob"]["object_name"])


def test_a_user_of_both_hubs_is_refused_in_the_second_and_keeps_the_first(hubs, database):
    """Both hubs name containers alike: B finds A's container under ann's name, and neither
    reuses nor removes it."""
    b = hubs["b"]
    b.create_user("ann", ["students"])
    r = b.spawn("ann", {"profile": "cpu"})
    assert r.status_code == 503, r.text
    assert "another hub of this lab on this host uses the same" in r.json()["message"]
    assert "set c.GPUDockerSpawner.prefix" in b.log_tail(200)
    assert_ann_untouched(hubs, database)


def test_restarting_the_second_hub_keeps_both_hubs_servers(hubs, database):
    b, bob = hubs["b"], hubs["bob"]
    bob_id = running(bob["object_name"])
    b.stop()
    b.start()
    b.wait_ready("bob")
    time.sleep(5)  # B's restarted reconcile: bob's server restored, then passes
    assert_ann_untouched(hubs, database)
    assert running(bob["object_name"]) == bob_id
    assert "is not held by a running server" not in b.log_tail(400)


LEVEL_AND_TIME = r"^\[[DIWEC] \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} "


def test_the_labs_module_loggers_write_through_the_hubs_log(hubs):
    """``jupyterhub_gpulab.spawner.runtime``'s line about the lab's inventory, an INFO line of a
    module logger: in the hub's log with its level and time (it was dropped: no handler)."""
    lines = [ln for ln in hubs["b"].log_tail(2000).splitlines() if "1 device(s)" in ln]
    assert lines, hubs["b"].log_tail(200)
    assert re.match(LEVEL_AND_TIME.replace("[DIWEC]", "I"), lines[0]), lines[0]
    assert "jupyterhub_gpulab.spawner.runtime" in lines[0]

"""Two labs on one Docker engine, with real hubs and real containers.

Lab "prod" and lab "staging" each run a real JupyterHub with GPUDockerSpawner and their own
ledger, on the same engine, with what default settings give two labs on one server: the same node
name and the same container prefix. The engine is the GPU-simulating one
(``scripts/ensure-gpusim-docker.sh``, see ``test_spawner_gpusim.py``), so device requests for a
GPU UUID go through the engine's real NVIDIA driver path. Staging's inventory is prod's: two
ledgers hand out the same GPUs. Also here: a renamed ``c.GPULab.node_name`` and containers made
before lab ids, on the main engine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from e2e_support import GPUSIM_GATEWAY, GPUSIM_HOST, IMAGE, gdocker, gpulab_config, require_docker
from html_support import parse_html
from hubtools import Hub, free_port, wait_for
from leakcheck import unique
from service_support import PREFIX, login, user_token, wait_for_service

from jupyterhub_gpulab.ledger import Ledger, db

pytestmark = pytest.mark.docker

GPULAB = str(Path(sys.executable).with_name("gpulab"))


def running(container: str, docker=gdocker) -> str | None:
    """The id of ``container`` if it runs, else ``None``."""
    r = docker("inspect", container, check=False)
    if r.returncode != 0:
        return None
    info = json.loads(r.stdout)[0]
    return info["Id"] if info["State"]["Running"] else None


def service_lines(port: int, workdir: Path) -> str:
    return f"""
from jupyterhub_gpulab.hub.hubconfig import configure_service
c.Authenticator.admin_users = {{"admin"}}
c.GPULabService.cookie_secret_file = "{workdir}/gpulab_cookie_secret"
configure_service(c, config_file=__file__, url="http://127.0.0.1:{port}")
"""


@pytest.fixture(scope="module")
def labs(tmp_path_factory):
    """Prod runs ann's MIG server and dan's CPU server; a container started by hand holds the
    A40; then staging starts and bob's spawn runs its reconcile pass."""
    require_docker()
    if gdocker("info", check=False).returncode != 0:
        reason = f"no GPU-simulating engine at {GPUSIM_HOST} (scripts/ensure-gpusim-docker.sh)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    node = unique("labs")  # both labs: one host name, one container prefix
    root = tmp_path_factory.mktemp(node)
    gpusim = {"env": {"DOCKER_HOST": GPUSIM_HOST}, "gateway": GPUSIM_GATEWAY}
    prod = Hub(
        root / "prod",
        gpulab_config(node, attach_mode="device_request", extra='c.GPULab.lab_name = "prod"\n'),
        **gpusim,
    )
    port = free_port()
    staging = Hub(
        root / "staging",
        gpulab_config(
            node,
            attach_mode="device_request",
            extra='c.GPULab.lab_name = "staging"\nc.GPUDockerSpawner.reconcile_interval = 2\n'
            + service_lines(port, root / "staging"),
        ),
        **gpusim,
    )
    staging.service_port = port
    trainer = f"{node}-trainer-by-hand"
    try:
        prod.start()
        for user, groups, profile in (("ann", ["students"], "mig"), ("dan", [], "cpu")):
            prod.create_user(user, groups)
            assert prod.spawn(user, {"profile": profile}).status_code in (201, 202)
        states = {u: prod.wait_ready(u)["state"] for u in ("ann", "dan")}
        gdocker("run", "-d", "--name", trainer, "--gpus", "device=GPU-e2e0a400-0000-4000-8000-000000000002", IMAGE,
                "sleep", "infinity")  # fmt: skip
        ids = {u: running(s["object_name"]) for u, s in states.items()}
        assert all(ids.values())
        staging.start()
        staging.create_user("bob")
        assert staging.spawn("bob", {"profile": "cpu"}).status_code in (201, 202)
        staging.wait_ready("bob")  # its start ran staging's reconcile pass
        yield {
            "prod": prod,
            "staging": staging,
            "states": states,
            "ids": ids,
            "trainer": trainer,
        }
    finally:
        for hub in (staging, prod):
            hub.stop()
        out = gdocker("ps", "-aq", "--filter", f"label=org.jupyter.gpulab.node={node}").stdout
        gdocker("rm", "-f", trainer, *out.split(), check=False)


def test_one_labs_reconcile_never_removes_the_others_running_containers(labs):
    prod, states, ids = labs["prod"], labs["states"], labs["ids"]
    for user, state in states.items():
        assert running(state["object_name"]) == ids[user], f"{user}'s container was touched"
        assert prod.server(user)["ready"]
    led = Ledger(f"sqlite:///{prod.workdir}/gpulab.sqlite")
    assert [(a.user, a.slice_id) for a in led.open_allocations()] == [
        ("ann", "MIG-e2e00100-0000-4000-8000-000000000000")
    ]
    prod_lab = led.identity()
    led.close()
    staging_led = Ledger(f"sqlite:///{labs['staging'].workdir}/gpulab.sqlite")
    assert staging_led.identity().uuid != prod_lab.uuid
    assert staging_led.open_allocations() == []
    staging_led.close()
    info = json.loads(gdocker("inspect", states["ann"]["object_name"]).stdout)[0]
    assert info["Config"]["Labels"]["org.jupyter.gpulab.lab-id"] == prod_lab.uuid
    assert info["Config"]["Labels"]["org.jupyter.gpulab.lab-name"] == "prod"


def test_the_second_lab_says_which_containers_hold_its_gpus(labs):
    staging, ann = labs["staging"], labs["states"]["ann"]["object_name"]
    log = staging.log_tail(400)
    mine = [line for line in log.splitlines() if ann in line and "two ledgers" in line]
    assert (
        mine and "lab 'prod'" in mine[0] and "MIG-e2e00100-0000-4000-8000-000000000000" in mine[0]
    ), log
    # a line an admin can find: the hub's format, with level and time (it was a bare line)
    assert re.match(r"\[W \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} ", mine[0]), mine[0]
    by_hand = [line for line in log.splitlines() if labs["trainer"] in line]
    assert by_hand and "GPU-e2e0a400-0000-4000-8000-000000000002 by device request" in by_hand[0], (
        log
    )
    # gpulab check-config, as an admin runs it before a restart, on staging's config
    r = subprocess.run(
        [GPULAB, "check-config", "-f", str(staging.config_path)],
        capture_output=True,
        text=True,
        env=dict(os.environ, DOCKER_HOST=GPUSIM_HOST),
        cwd=staging.workdir,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    # warnings come first (this lab's 5 × 3 GiB T4 seats overcommit once contexts count)
    assert [line for line in lines if line.startswith("OK: ")][0].startswith("OK: 3 GPU(s)")
    ann_line = next(line for line in lines if ann in line)
    assert ann_line.startswith("warning: container ")
    assert "lab 'prod'" in ann_line and "user 'ann'" in ann_line
    assert "holds MIG-e2e00100-0000-4000-8000-000000000000 by device request" in ann_line
    assert "lab 'staging'" in ann_line and "two ledgers hand out the same GPU" in ann_line
    assert any(
        labs["trainer"] in line and "GPU-e2e0a400-0000-4000-8000-000000000002" in line
        for line in lines
    )
    # and the shared container prefix, before any user meets it
    assert any("c.GPUDockerSpawner.prefix" in line and "lab 'prod'" in line for line in lines)


def test_the_admin_page_and_api_show_the_other_labs_container(labs):
    staging, ann = labs["staging"], labs["states"]["ann"]["object_name"]
    wait_for_service(staging)
    admin = login(staging, "admin")
    page = parse_html(admin.get(staging.url + PREFIX, timeout=30).text)
    notice = page.find(id="foreign-containers")
    assert "another ledger hands out the same GPUs" in notice.text()
    item = notice.find("li", data_container=ann)
    assert "lab 'prod'" in item.text() and "MIG-e2e00100-0000-4000-8000-000000000000" in item.text()
    assert "staging" in page.find(id="lab-identity").text()
    token = user_token(staging, admin, "admin")
    inv = requests.get(
        staging.url + PREFIX + "api/inventory",
        headers={"Authorization": f"token {token}"},
        timeout=30,
    ).json()
    assert inv["lab"]["name"] == "staging"
    found = {f["container_name"]: f for f in inv["foreign_containers"]}
    assert found[ann]["lab_name"] == "prod" and found[ann]["user"] == "ann"
    assert found[ann]["devices"] == ["MIG-e2e00100-0000-4000-8000-000000000000"]
    assert found[labs["trainer"]]["lab"] is None
    assert found[labs["trainer"]]["devices"] == ["GPU-e2e0a400-0000-4000-8000-000000000002"]


def test_a_user_of_both_labs_is_refused_in_the_second_and_keeps_the_first(labs):
    staging, prod = labs["staging"], labs["prod"]
    dan = labs["states"]["dan"]["object_name"]
    staging.create_user("dan")
    r = staging.spawn("dan", {"profile": "cpu"})
    assert r.status_code == 503, r.text
    assert "another lab on this host uses the same container name" in r.json()["message"]
    assert "set c.GPUDockerSpawner.prefix" in staging.log_tail(200)
    assert running(dan) == labs["ids"]["dan"]  # prod's container: not removed, not replaced
    assert prod.server("dan")["ready"]


# -- one lab, on the main engine ------------------------------------------------------------------


@pytest.fixture
def main_engine_hubs(tmp_path):
    require_docker()
    made: list[tuple[Hub, str]] = []

    def make(node: str, extra: str = "") -> Hub:
        hub = Hub(tmp_path / node, gpulab_config(node, extra=extra))
        made.append((hub, node))
        return hub

    yield make
    for hub, node in made:
        hub.stop()
        # by the container prefix (``node``), not the node label: a test may rename the node,
        # and the containers started after that carry the new name
        out = subprocess.run(
            ["docker", "ps", "-a", "--filter", f"name={node}", "--format", "{{.ID}} {{.Names}}"],
            capture_output=True,
            text=True,
        ).stdout.split("\n")
        ids = [i for i, _, name in (line.partition(" ") for line in out) if name.startswith(node)]
        if ids:
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)


def mdocker(*args, check=True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


KEEP = "c.JupyterHub.cleanup_servers = False\nc.JupyterHub.cleanup_proxy = False\n"


def test_renaming_the_node_keeps_running_servers_and_their_slices(main_engine_hubs):
    node = unique("gpulabtest")
    hub = main_engine_hubs(node, KEEP + "c.GPUDockerSpawner.reconcile_interval = 2\n")
    hub.start()
    hub.create_user("ann", ["students"])
    assert hub.spawn("ann", {"profile": "mig"}).status_code in (201, 202)
    ann = hub.wait_ready("ann")["state"]
    hub.stop()
    # the admin names the host properly; containers and the ledger still say the old name
    renamed = node + "-renamed"
    hub.extra_config = hub.extra_config.replace(
        f"c.GPULab.node_name = {node!r}", f"c.GPULab.node_name = {renamed!r}"
    )
    hub.start()  # the prefix is unchanged: ann's container keeps its name
    hub.create_user("bob", ["students"])
    r = hub.spawn("bob", {"profile": "mig"})  # crashed: UNIQUE constraint failed: devices.uuid
    assert r.status_code in (201, 202), r.text
    bob = hub.wait_ready("bob")["state"]
    assert bob["gpulab_slice"] != ann["gpulab_slice"]
    time.sleep(3)  # a poll round
    assert hub.server("ann")["ready"] and running(ann["object_name"], mdocker)
    led = Ledger(f"sqlite:///{hub.workdir}/gpulab.sqlite")
    held = {a.user: (a.id, a.slice_id, a.node) for a in led.open_allocations()}
    assert held["ann"] == (ann["gpulab_allocation"], ann["gpulab_slice"], renamed)
    assert held["bob"][2] == renamed
    assert {d["node"] for d in led.devices()} == {renamed}
    assert led.double_allocations() == []
    led.close()
    assert "c.GPULab.node_name changed?" in hub.log_tail(300)
    # the service reads the same ledger and config: it starts too
    r = subprocess.run(
        [GPULAB, "check-config", "-f", str(hub.config_path)], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr


def legacy_container(name: str, labels: dict[str, str], gpu: str) -> str:
    """A container as the previous release started it: gpulab labels without a lab id."""
    args = ["run", "-d", "--name", name, "-e", f"NVIDIA_VISIBLE_DEVICES={gpu}"]
    for k, v in labels.items():
        args += ["--label", f"org.jupyter.gpulab.{k}={v}"]
    return mdocker(*args, IMAGE, "sleep", "infinity").stdout.strip()


def test_containers_from_before_lab_ids_are_told_apart_after_the_upgrade(main_engine_hubs):
    node = unique("gpulabtest")
    hub = main_engine_hubs(node, "c.GPUDockerSpawner.reconcile_interval = 2\n")
    url = f"sqlite:///{hub.workdir}/gpulab.sqlite"
    # this lab's ledger of the previous release: ann holds a MIG instance (her container runs),
    # bob's allocation was released by an admin while his container kept running
    from e2e_support import LAB

    from jupyterhub_gpulab.inventory import SliceKind, SliceRequest, load_declared

    led = Ledger(url)
    led.sync_inventory(load_declared(LAB, node=node), node=node)
    mig = SliceRequest(kind=SliceKind.MIG, mig_profile="1g.10gb")
    ann = led.claim(mig, user="ann", profile="mig", node=node).allocation
    bob = led.claim(mig, user="bob", profile="mig", node=node).allocation
    led.close()

    def labels(a, user):
        return {"allocation": a.id, "user": user, "server": "", "slice": a.slice_id, "node": node}

    ann_c = legacy_container(f"{node}-ann", labels(ann, "ann"), ann.slice_id)
    bob_c = legacy_container(f"{node}-bob", labels(bob, "bob"), bob.slice_id)
    # another lab on this engine, also from before lab ids: its allocation 2 is zoe's
    zoe_c = legacy_container(
        f"{node}-other-zoe", labels(bob, "zoe"), "GPU-e2e0a400-0000-4000-8000-000000000002"
    )
    led = Ledger(url)
    led.set_container(ann.id, ann_c, f"{node}-ann")
    led.set_container(bob.id, bob_c, f"{node}-bob")
    led.release(bob.id, "admin")
    led.close()
    engine = db.make_engine(url)
    from alembic import command

    command.downgrade(db.alembic_config(engine), "0002")
    engine.dispose()
    # the upgrade, then the first hub start of the new release
    hub.write_config()
    r = subprocess.run(
        [GPULAB, "upgrade-db", "-f", str(hub.config_path)], capture_output=True, text=True
    )
    assert r.returncode == 0 and f"0002 -> {db.head_revision()}" in r.stdout, r.stdout + r.stderr
    hub.start()
    hub.create_user("cat")
    assert hub.spawn("cat", {"profile": "cpu"}).status_code in (201, 202)
    hub.wait_ready("cat")  # its start started the reconcile
    # bob's container is ours and holds no open allocation: removed, as before lab ids
    wait_for("bob's orphan container removed", lambda: running(bob_c, mdocker) is None, 30)
    # ann's is ours too, and no server of this hub runs it: removed, her allocation closed
    wait_for("ann's unserved container removed", lambda: running(ann_c, mdocker) is None, 30)
    led = Ledger(url)
    assert led.open_allocations() == []
    assert led.get(ann.id).end_reason == "reconciled:no-server"
    # zoe's names our allocation 2 but is not the container we recorded for it: not ours, left
    # running (the previous release removed it), and reported as holding our A40
    assert running(zoe_c, mdocker) == zoe_c
    found = {f.container_name: f for f in led.foreign_containers()}
    assert found[f"{node}-other-zoe"].devices == ("GPU-e2e0a400-0000-4000-8000-000000000002",)
    assert found[f"{node}-other-zoe"].lab_label() == "a gpulab hub from before lab ids"
    led.close()
    mdocker("rm", "-f", zoe_c, check=False)

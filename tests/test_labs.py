"""Two labs on one Docker engine, without the engine: each ledger's lab id, the upgrade that gives
an older ledger one, a renamed ``c.GPULab.node_name``, and the rules that tell this lab's
containers from another's and the GPUs a container holds (``spawner/engine.py``).

The same rules on a real engine with two real hubs: ``test_labs_e2e.py``."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from ledger_support import LAB, backends, lab_inventory, make_url
from traitlets.config import Config

from jupyterhub_gpulab import clock
from jupyterhub_gpulab.hubapi.client import HubClient
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.lab.config import GPULab
from jupyterhub_gpulab.ledger import (
    Allocation,
    ForeignContainer,
    LabIdentity,
    Ledger,
    NoFreeSlice,
    db,
)
from jupyterhub_gpulab.ledger.schema import allocations, devices, slices
from jupyterhub_gpulab.service.state import LabState
from jupyterhub_gpulab.service.web.data import admin_data
from jupyterhub_gpulab.spawner.engine import (
    NONE,
    OTHER,
    OURS,
    UNKNOWN,
    Attached,
    attached,
    held,
    owner,
)

MIG_1G = SliceRequest(kind=SliceKind.MIG, mig_profile="1g.5gb")
OUR_LAB = "11111111-1111-4111-8111-111111111111"
THEIR_LAB = "22222222-2222-4222-8222-222222222222"


@pytest.fixture(params=backends())
def url(request, tmp_path):
    return make_url(request.param, tmp_path)


# -- the lab id ---------------------------------------------------------------------------------


def test_each_ledger_is_one_lab_with_an_id_made_once(url, tmp_path):
    first = Ledger(url)
    ident = first.identity()
    assert len(ident.uuid) == 36 and ident.name is None
    assert first.name_lab("staging") == LabIdentity(ident.uuid, "staging")
    first.close()
    again = Ledger(url)
    assert again.identity() == LabIdentity(ident.uuid, "staging")  # kept across restarts
    assert again.name_lab("") == LabIdentity(ident.uuid, None)
    again.close()
    other = Ledger(f"sqlite:///{tmp_path / 'other-lab.sqlite'}")
    assert other.identity().uuid != ident.uuid  # another ledger is another lab
    other.close()


def test_a_0002_ledger_upgrades_keeping_its_rows_and_gains_a_lab_id(url):
    # a ledger of the previous release, in use: devices, slices, an open and a closed allocation
    current = Ledger(url)
    current.sync_inventory(lab_inventory(), node="gpu01")
    held_ = current.claim(MIG_1G, user="ann", profile="mig")
    done = current.claim(MIG_1G, user="bob", profile="mig")
    current.set_container(held_.allocation.id, "c0ffee", "jupyter-ann")
    current.release(done.allocation.id, "stopped")
    current.close()
    engine = db.make_engine(url)
    from alembic import command

    command.downgrade(db.alembic_config(engine), "0002")
    assert db.current_revision(engine) == "0002"
    assert not sa.inspect(engine).has_table("lab")
    # the columns the 0002 schema has (later migrations add columns, e.g. 0005's to allocations)
    old_columns = {
        t.name: [c["name"] for c in sa.inspect(engine).get_columns(t.name)]
        for t in (devices, slices, allocations)
    }

    def rows(conn):
        return {
            t.name: sorted(
                tuple(r) for r in conn.execute(sa.select(*[t.c[n] for n in old_columns[t.name]]))
            )
            for t in (devices, slices, allocations)
        }

    with engine.connect() as conn:
        before = rows(conn)
    db.upgrade(engine)  # what `gpulab upgrade-db` runs
    with engine.connect() as conn:
        after = rows(conn)
        labs = conn.exec_driver_sql("SELECT id, uuid FROM lab").all()
    engine.dispose()
    assert after == before
    assert len(labs) == 1 and len(labs[0][1]) == 36
    upgraded = Ledger(url)
    assert upgraded.identity().uuid == labs[0][1]
    assert [a.id for a in upgraded.open_allocations()] == [held_.allocation.id]
    # the held slice is still held: the only other 1g.5gb goes to the next user
    assert upgraded.claim(MIG_1G, user="cat", profile="mig").slice.id == done.slice.id
    with pytest.raises(NoFreeSlice):
        upgraded.claim(MIG_1G, user="dan", profile="mig")
    upgraded.close()


# -- a renamed c.GPULab.node_name ----------------------------------------------------------------


def test_renaming_the_node_moves_devices_slices_and_open_allocations(url):
    led = Ledger(url)
    led.sync_inventory(lab_inventory(), node="gpu01")
    held_ = led.claim(MIG_1G, user="ann", profile="mig", node="gpu01")
    led.set_container(held_.allocation.id, "c0ffee", "jupyter-ann")
    led.set_drained("GPU-p40-0003", True, "fan")
    report = led.sync_inventory(lab_inventory(), node="lab-a")  # crashed: UNIQUE devices.uuid
    assert {u for u, _ in report.moved} == {d["uuid"] for d in LAB}
    assert {former for _, former in report.moved} == {"gpu01"}
    assert report.added == () and report.vanished == ()
    assert {d["node"] for d in led.devices()} == {"lab-a"}
    assert {s["node"] for s in led.slices()} == {"lab-a"}
    assert [(a.id, a.node) for a in led.open_allocations()] == [(held_.allocation.id, "lab-a")]
    # the slice stays held and the drain stays on
    assert led.claim(MIG_1G, user="bob", profile="mig").slice.id != held_.slice.id
    with pytest.raises(NoFreeSlice):
        led.claim(MIG_1G, user="cat", profile="mig")
    assert {d["uuid"]: d["drained"] for d in led.devices()}["GPU-p40-0003"] is True
    assert led.double_allocations() == []
    led.close()


async def test_the_service_starts_on_a_ledger_whose_node_was_renamed(tmp_path):
    url = f"sqlite:///{tmp_path / 'gpulab.sqlite'}"

    def gpulab(node: str) -> GPULab:
        c = Config()
        c.GPULab.db_url = url
        c.GPULab.node_name = node
        c.GPULab.inventory = LAB
        c.GPULab.lab_name = "physics"
        c.GPULab.profiles = [{"slug": "cpu", "display_name": "CPU", "image": "x"}]
        return GPULab(config=c)

    led = Ledger(url)
    LabState(gpulab("gpu01"), led).sync()
    held_ = led.claim(MIG_1G, user="ann", profile="mig", node="gpu01")
    state = LabState(gpulab("gpu01.physics.example.edu"), led)
    report = state.sync()  # what Service.start() runs first
    assert len(report.moved) == len(LAB)
    data = await admin_data(state, HubClient("http://127.0.0.1:9/hub/api", "x", timeout=1))
    nodes = data["inventory"]["nodes"]
    assert [n["name"] for n in nodes] == ["gpu01.physics.example.edu"]
    assert data["vanished"] == []  # the held MIG instance is not "gone" after the rename
    assert [a["id"] for a in data["allocations"]] == [held_.allocation.id]
    assert data["inventory"]["lab"] == {
        "id": led.identity().uuid,
        "name": "physics",
        "label": f"lab 'physics' ({led.identity().uuid[:8]})",
    }
    led.close()


# -- whose container is it ----------------------------------------------------------------------


def alloc(aid: int, user: str, server: str = "", container: str | None = None) -> Allocation:
    now = clock.utcnow()
    return Allocation(
        aid, "MIG-a", user, server, "p", "n", None, 1.0, container, None, now, None, None
    )


LEGACY = {
    "org.jupyter.gpulab.allocation": "7",
    "org.jupyter.gpulab.user": "ann",
    "org.jupyter.gpulab.server": "",
    "org.jupyter.gpulab.slice": "MIG-a",
    "org.jupyter.gpulab.node": "gpu01",
}


@pytest.mark.parametrize(
    ("labels", "ledger_rows", "expected"),
    [
        pytest.param({**LEGACY, "org.jupyter.gpulab.lab-id": OUR_LAB}, {}, OURS, id="our-lab-id"),
        pytest.param(
            {**LEGACY, "org.jupyter.gpulab.lab-id": THEIR_LAB},
            {7: alloc(7, "ann")},
            OTHER,
            id="their-lab-id-even-if-our-ledger-matches",
        ),
        pytest.param(
            LEGACY, {7: alloc(7, "ann", container="cid")}, OURS, id="legacy-recorded-here"
        ),
        pytest.param(LEGACY, {7: alloc(7, "ann")}, OURS, id="legacy-container-not-yet-recorded"),
        pytest.param(LEGACY, {7: alloc(7, "bob")}, OTHER, id="legacy-same-id-other-user"),
        pytest.param(
            LEGACY,
            {7: alloc(7, "ann", container="x")},
            OTHER,
            id="legacy-allocation-holds-another-container",
        ),
        pytest.param(LEGACY, {}, OTHER, id="legacy-allocation-unknown-here"),
        pytest.param(
            {k: v for k, v in LEGACY.items() if "allocation" not in k and "slice" not in k},
            {},
            UNKNOWN,
            id="legacy-cpu-server",
        ),
        pytest.param({"maintainer": "someone"}, {}, NONE, id="not-gpulab"),
    ],
)
def test_which_containers_are_ours(labels, ledger_rows, expected):
    assert owner(labels, "cid", OUR_LAB, ledger_rows) == expected


def test_without_a_ledger_nothing_is_ours():
    assert owner(LEGACY, "cid", None, {7: alloc(7, "ann")}) == OTHER


# -- which GPUs a container holds ---------------------------------------------------------------


def inspected(requests=None, env=(), runtime="runc") -> dict:
    return {
        "HostConfig": {"DeviceRequests": requests, "Runtime": runtime},
        "Config": {"Env": ["PATH=/usr/bin", *env]},
    }


NV = {"Driver": "nvidia", "Capabilities": [["gpu"]]}


@pytest.mark.parametrize(
    ("info", "gpulab", "ids", "every"),
    [
        pytest.param(
            inspected([{**NV, "DeviceIDs": ["MIG-a100-1g-0"]}]),
            False,
            {"MIG-a100-1g-0"},
            False,
            id="gpulab-device-request",
        ),
        pytest.param(
            inspected([{"Driver": "", "Count": -1, "Capabilities": [["gpu"]]}]),
            False,
            set(),
            True,
            id="gpus-all",
        ),
        pytest.param(
            inspected([{"Driver": "", "Count": 2, "Capabilities": [["gpu"]]}]),
            False,
            {"0", "1"},
            False,
            id="gpus-2-takes-the-first-two",
        ),
        pytest.param(
            inspected([{"Driver": "", "DeviceIDs": ["3"], "Capabilities": [["gpu"]]}]),
            False,
            {"3"},
            False,
            id="gpus-device-index",
        ),
        pytest.param(
            inspected([{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=GPU-a40-0001"]}]),
            False,
            {"GPU-a40-0001"},
            False,
            id="cdi",
        ),
        pytest.param(
            inspected([{"Driver": "", "Count": 1, "Capabilities": [["tpu"]]}]),
            False,
            set(),
            False,
            id="not-a-gpu-request",
        ),
        pytest.param(
            inspected(env=["NVIDIA_VISIBLE_DEVICES=all"]),
            False,
            set(),
            False,
            id="cuda-image-env-under-runc-holds-nothing",
        ),
        pytest.param(
            inspected(env=["NVIDIA_VISIBLE_DEVICES=all"], runtime="nvidia"),
            False,
            set(),
            True,
            id="env-all-under-the-nvidia-runtime",
        ),
        pytest.param(
            inspected(env=["NVIDIA_VISIBLE_DEVICES=GPU-t4-0002,1"], runtime="nvidia"),
            False,
            {"GPU-t4-0002", "1"},
            False,
            id="env-list",
        ),
        pytest.param(
            inspected(env=["NVIDIA_VISIBLE_DEVICES=MIG-a100-1g-1"]),
            True,
            {"MIG-a100-1g-1"},
            False,
            id="gpulab-env-mode",
        ),
        pytest.param(
            inspected(env=["NVIDIA_VISIBLE_DEVICES=void"]),
            True,
            set(),
            False,
            id="gpulab-cpu-server",
        ),
    ],
)
def test_which_gpus_a_container_holds(info, gpulab, ids, every):
    got = attached(info, gpulab=gpulab)
    assert (set(got.ids), got.every) == (ids, every)


def test_the_engines_default_runtime_reads_the_env_too():
    info = inspected(env=["NVIDIA_VISIBLE_DEVICES=2"], runtime="")
    assert not attached(info, default_runtime="runc")
    assert attached(info, default_runtime="nvidia").ids == {"2"}


def test_held_maps_ids_and_indices_onto_our_inventory():
    inv = lab_inventory()
    assert held(Attached(frozenset({"MIG-a100-1g-1"})), inv) == ("MIG-a100-1g-1",)
    # a whole GPU (by UUID or host index) reaches the MIG instances on it: the device is named
    assert held(Attached(frozenset({"0", "GPU-t4-0002"})), inv) == ("GPU-a100-0000", "GPU-t4-0002")
    assert held(Attached(every=True), inv) == tuple(d["uuid"] for d in LAB)
    assert held(Attached(frozenset({"GPU-elsewhere", "9"})), inv) == ()


# -- what the hub found, for the admin page ------------------------------------------------------


def test_the_hubs_findings_are_kept_per_node_until_its_next_look(url):
    led = Ledger(url)
    zoe = ForeignContainer(
        "b" * 64,
        "jupyter-zoe",
        THEIR_LAB,
        "prod",
        "zoe",
        ("MIG-a100-1g-0",),
        "NVIDIA_VISIBLE_DEVICES",
    )
    trainer = ForeignContainer(
        "c" * 64, "trainer", None, None, None, ("GPU-a40-0001",), "device request"
    )
    led.record_foreign("gpu01", [zoe, trainer])
    led.record_foreign("gpu02", [trainer])
    got = led.foreign_containers("gpu01")
    assert [(f.container_name, f.lab_label(), f.devices) for f in got] == [
        ("jupyter-zoe", "lab 'prod' (22222222)", ("MIG-a100-1g-0",)),
        ("trainer", None, ("GPU-a40-0001",)),
    ]
    assert got[0].seen_at is not None and got[0].seen_at.tzinfo is not None
    assert (
        got[1].describe()
        == "container trainer (cccccccccccc; not started by gpulab) holds GPU-a40-0001 by "
        "device request"
    )
    led.record_foreign("gpu01", [])  # the next look found none
    assert [f.container_name for f in led.foreign_containers()] == ["trainer"]
    led.close()


def test_a_bad_lab_name_is_listed_by_check_config(tmp_path, capsys):
    from jupyterhub_gpulab.cli import main

    cfg = tmp_path / "jupyterhub_config.py"
    cfg.write_text(
        "c = get_config()  # noqa\n"
        f"c.GPULab.db_url = 'sqlite:///{tmp_path}/gpulab.sqlite'\n"
        f"c.GPULab.inventory = {LAB!r}\n"
        "c.GPULab.profiles = [{'slug': 'cpu', 'display_name': 'CPU', 'image': 'x'}]\n"
        "c.GPULab.lab_name = 'physics department, building 4, room 112, the big GPU server by the window'\n"
    )
    assert main(["check-config", "-f", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert "c.GPULab.lab_name 'physics department" in err and "at most 64" in err

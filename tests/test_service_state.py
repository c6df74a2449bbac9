"""The service's view of the lab, without a hub: a real ledger (SQLite), NVML from the fake
pynvml, and the same data builders the pages and the API render."""

from __future__ import annotations

import pytest
from fake_nvml import A40_UUID, A100_MIGS, A100_UUID, FakeNVML, GiB
from ledger_support import LAB
from service_support import OLD_1G, rebooted_lab
from traitlets.config import Config

from jupyterhub_gpulab.hubapi.client import HubClient
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.lab.config import GPULab
from jupyterhub_gpulab.ledger import Ledger, NoFreeSlice
from jupyterhub_gpulab.service import actions
from jupyterhub_gpulab.service.state import NO_NVML, LabState
from jupyterhub_gpulab.service.web.data import admin_data

MIG_1G = SliceRequest(kind=SliceKind.MIG, mig_profile="1g.5gb")


def gpulab(**extra) -> GPULab:
    c = Config()
    c.GPULab.node_name = "node-a"
    c.GPULab.profiles = [
        {
            "slug": "mig-small",
            "display_name": "MIG",
            "image": "x",
            "slice": {"kind": "mig", "mig_profile": "1g.5gb"},
        }
    ]
    for k, v in extra.items():
        setattr(c.GPULab, k, v)
    return GPULab(config=c)


@pytest.fixture
def ledger(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'gpulab.sqlite'}")
    yield ledger
    ledger.close()


def unreachable_hub() -> HubClient:
    # nothing listens on port 9 of localhost: the hub "cannot be reached"
    return HubClient("http://127.0.0.1:9/hub/api", "unused", timeout=2)


async def test_mig_layout_changed_after_reboot_flags_allocation_and_never_hands_out_its_slice(
    ledger,
):
    before = LabState(gpulab(inventory_source="nvml"), ledger, nvml=FakeNVML.mixed_lab())
    before.sync()
    held = ledger.claim(MIG_1G, user="alice", profile="mig-small").allocation
    assert held.slice_id == OLD_1G == A100_MIGS[2][0]

    after = LabState(gpulab(inventory_source="nvml"), ledger, nvml=rebooted_lab())
    report = after.sync()

    assert [a.id for a in report.vanished_held] == [held.id]
    data = await admin_data(after, unreachable_hub())
    [row] = data["allocations"]
    assert row["vanished"] and row["user"] == "alice"
    assert [r["id"] for r in data["vanished"]] == [held.id]
    chips = {
        s["id"]: s
        for node in data["inventory"]["nodes"]
        for d in node["devices"]
        for s in d["slices"]
    }
    assert chips[OLD_1G]["vanished"] and not chips[OLD_1G]["available"]
    a100 = next(d for d in data["inventory"]["nodes"][0]["devices"] if d["uuid"] == A100_UUID)
    assert a100["layout"] == "MIG: 7g.40gb"

    # the admin releases the stale allocation: the vanished slice is still never handed out,
    # not even after the device is drained and returned to service
    assert await actions.release(after, NO_SERVERS, held.id, by="admin")
    await actions.drain(after, A100_UUID, "maintenance", by="admin")
    await actions.undrain(after, A100_UUID, by="admin")
    assert ledger.capacity(MIG_1G) == (0, 0)
    with pytest.raises(NoFreeSlice):
        ledger.claim(MIG_1G, user="bob", profile="mig-small")
    new = ledger.claim(
        SliceRequest(kind=SliceKind.MIG, mig_profile="7g.40gb"), user="bob", profile="x"
    )
    assert new.allocation.slice_id.startswith("MIG-5c1e7a90-7777")


async def test_refresh_reads_the_new_layout_and_reports_who_held_vanished_slices(ledger):
    fake = FakeNVML.mixed_lab()
    state = LabState(gpulab(inventory_source="nvml"), ledger, nvml=fake)
    state.sync()
    ledger.claim(MIG_1G, user="alice", profile="mig-small", server_name="train")
    state.nvml = rebooted_lab()  # the same service, after the GPU was re-partitioned

    message = await actions.refresh_inventory(state, by="admin")

    assert "alice (" + OLD_1G + ")" in message
    assert OLD_1G not in state.present_slice_ids()


async def test_live_utilisation_per_device_and_slice(ledger):
    fake = FakeNVML.mixed_lab()
    fake.set_utilization(A40_UUID, gpu_percent=40, memory_used=2 * GiB)
    fake.set_utilization(A100_MIGS[0][0], memory_used=3 * GiB)
    fake.set_utilization(A100_MIGS[1][0], memory_used=1 * GiB)
    state = LabState(gpulab(inventory_source="nvml"), ledger, nvml=fake)
    state.sync()
    state.take_sample()

    inv = (await admin_data(state, unreachable_hub(), parts=("inventory",)))["inventory"]

    assert inv["nvml"]["available"]
    devices = {d["uuid"]: d for d in inv["nodes"][0]["devices"]}
    assert devices[A40_UUID]["gpu_percent"] == 40
    assert devices[A40_UUID]["memory_used_bytes"] == 2 * GiB
    # MIG reports no utilisation rate; the device's memory in use is its instances' sum
    assert devices[A100_UUID]["gpu_percent"] is None
    assert devices[A100_UUID]["memory_used_bytes"] == 4 * GiB
    mig = {s["id"]: s for s in devices[A100_UUID]["slices"]}
    assert mig[A100_MIGS[0][0]]["memory_used_bytes"] == 3 * GiB


async def test_no_nvml_on_this_host_gives_a_reason_instead_of_numbers(ledger):
    state = LabState(gpulab(inventory=LAB), ledger, nvml=FakeNVML.library_missing())
    state.sync()
    state.take_sample()

    data = await admin_data(state, unreachable_hub())

    assert data["inventory"]["nvml"] == {
        "available": False,
        "message": NO_NVML,
        "sampled_at": data["inventory"]["nvml"]["sampled_at"],
    }
    assert all(
        d["gpu_percent"] is None and d["memory_used_bytes"] is None
        for d in data["inventory"]["nodes"][0]["devices"]
    )
    # the hub could not be asked: server state is unknown, nothing is called stale
    assert data["hub"]["reachable"] is False


async def test_drain_keeps_holders_and_stops_new_claims(ledger):
    state = LabState(gpulab(inventory=LAB), ledger, nvml=FakeNVML.library_missing())
    state.sync()
    a40 = SliceRequest(kind=SliceKind.GPU, model="A40")
    held = ledger.claim(a40, user="alice", profile="a40").allocation

    message = await actions.drain(state, "GPU-a40-0001", "fan noise", by="admin")

    assert "drained" in message
    assert ledger.get(held.id).open
    [device] = [d for d in ledger.devices() if d["uuid"] == "GPU-a40-0001"]
    assert device["drained"] and device["drain_reason"] == "fan noise"
    ledger.release(held.id, "stopped")
    with pytest.raises(NoFreeSlice):
        ledger.claim(a40, user="bob", profile="a40")
    await actions.undrain(state, "GPU-a40-0001", by="admin")
    assert ledger.claim(a40, user="bob", profile="a40").allocation.slice_id == "GPU-a40-0001"


class _NoServers:
    """The hub's answer for a user who runs nothing (the real hub is in test_service_culling)."""

    async def servers_of(self, user):
        return []


NO_SERVERS = _NoServers()


async def test_actions_on_what_does_not_exist_say_so(ledger):
    state = LabState(gpulab(inventory=LAB), ledger, nvml=FakeNVML.library_missing())
    state.sync()
    with pytest.raises(actions.ActionError) as e:
        await actions.drain(state, "GPU-nope", by="admin")
    assert e.value.status == 404
    with pytest.raises(actions.ActionError) as e:
        await actions.release(state, NO_SERVERS, 12345, by="admin")
    assert e.value.status == 404
    a = ledger.claim(SliceRequest(kind=SliceKind.SHARED), user="u", profile="p").allocation
    await actions.release(state, NO_SERVERS, a.id, by="admin")
    with pytest.raises(actions.ActionError) as e:
        await actions.release(state, NO_SERVERS, a.id, by="admin")
    assert e.value.status == 409 and "already closed" in e.value.message


def test_per_user_metric_series_only_when_enabled(ledger):
    """``c.GPULabService.metrics_user_labels``: who holds each slice, and each user's
    GPU-seconds this week; without it no series names a user."""
    from metrics_support import samples, value

    from jupyterhub_gpulab.service.app import GPULabService
    from jupyterhub_gpulab.service.metrics import Exposition

    state = LabState(gpulab(inventory_source="nvml"), ledger, nvml=FakeNVML.mixed_lab())
    state.sync()
    held = ledger.claim(MIG_1G, user="alice", profile="mig-small", server_name="hw1")
    assert GPULabService().metrics_user_labels is False
    plain = Exposition(state).render().decode()
    assert "alice" not in plain and "gpulab_slice_holder_info" not in plain
    m = samples(Exposition(state, user_labels=True).render().decode())
    who = dict(node="node-a", slice=held.slice.id, user="alice", server="hw1", profile="mig-small")
    assert value(m, "gpulab_slice_holder_info", **who) == 1
    assert value(m, "gpulab_user_used_gpu_seconds", user="alice", period="week") >= 0
    ledger.release(held.allocation.id, "stopped")
    m = samples(Exposition(state, user_labels=True).render().decode())
    assert value(m, "gpulab_slice_holder_info", **who) is None
    state.close()

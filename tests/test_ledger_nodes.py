"""Nodes in the ledger: a node out of service (drained, its agent silent, its engine down) hands out
none of its slices, and returns them when it is back; node agent tokens. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from ledger_support import backends, make_url

from jupyterhub_gpulab import clock
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest, load_declared
from jupyterhub_gpulab.ledger import NODE_TOKEN_PREFIX, EngineNode, Ledger, NoFreeSlice

GPU = SliceRequest(kind=SliceKind.GPU)


def two_nodes(ledger: Ledger) -> None:
    a = [{"uuid": "GPU-a", "index": 0, "name": "NVIDIA A40", "memory": "48GiB"}]
    b = [{"uuid": "GPU-b", "index": 0, "name": "NVIDIA A40", "memory": "48GiB"}]
    ledger.sync_inventory(load_declared(a, node="gpu1"), node="gpu1")
    ledger.sync_inventory(load_declared(b, node="gpu2"), node="gpu2")


@pytest.fixture(params=backends())
def ledger(request, tmp_path):
    led = Ledger(make_url(request.param, tmp_path))
    two_nodes(led)
    yield led
    led.close()


def free_nodes(ledger: Ledger) -> set[str]:
    return {s["node"] for s in ledger.slices() if s["available"] and s["held_by"] is None}


def test_every_synced_node_has_a_row_in_service(ledger):
    assert [(n.name, n.state, n.available) for n in ledger.nodes()] == [
        ("gpu1", "in-service", True),
        ("gpu2", "in-service", True),
    ]
    assert ledger.capacity(GPU) == (2, 2)


def test_free_count_counts_one_nodes_free_slices_when_asked(ledger):
    # the spawner's claim outlook counts the free slices a start may take: a Swarm course
    # server's on its course's node only (spawner/claimoutlook.py)
    held = ledger.claim(GPU, user="ann", profile="p", node=None)
    other = ({"gpu1", "gpu2"} - {held.slice.node}).pop()
    assert ledger.free_count(GPU) == 1
    assert ledger.free_count(GPU, node=held.slice.node) == 0
    assert ledger.free_count(GPU, node=other) == 1


def test_set_containers_records_each_allocation_s_own_container(ledger):
    # a storm's starts record their containers in one transaction (spawner core, aio)
    ann = ledger.claim(GPU, user="ann", profile="p", node=None)
    bob = ledger.claim(GPU, user="bob", profile="p", node=None)
    ledger.set_containers(
        [(ann.allocation.id, "c-ann", "jupyter-ann"), (bob.allocation.id, "c-bob", None)]
    )
    got = {a.user: (a.container_id, a.container_name) for a in ledger.open_allocations()}
    assert got == {"ann": ("c-ann", "jupyter-ann"), "bob": ("c-bob", None)}


def test_a_drained_node_hands_out_nothing_and_holders_keep_theirs(ledger):
    held = ledger.claim(GPU, user="ann", profile="p", node=None)
    node = held.slice.node
    other = ({"gpu1", "gpu2"} - {node}).pop()
    assert held.allocation.node == node  # the allocation is on its slice's node
    assert ledger.set_node_drained(other, True, "new PSU")
    assert ledger.node(other).why_out() == "drained: new PSU"
    with pytest.raises(NoFreeSlice):
        ledger.claim(GPU, user="bob", profile="p")
    assert ledger.capacity(GPU) == (0, 1)
    assert ledger.get(held.allocation.id).open  # draining closes nothing
    assert ledger.set_node_drained(other, False)
    assert ledger.claim(GPU, user="bob", profile="p").slice.node == other
    assert not ledger.set_node_drained("no-such-node", True)


def test_a_device_drained_on_a_node_back_in_service_stays_out(ledger):
    ledger.set_drained("GPU-a", True, "fan")
    ledger.set_node_drained("gpu1", True)
    ledger.set_node_drained("gpu1", False)
    assert free_nodes(ledger) == {"gpu2"}  # the device's own drain still holds
    ledger.set_drained("GPU-a", False)
    assert free_nodes(ledger) == {"gpu1", "gpu2"}
    # and a device undrained on a drained node stays out
    ledger.set_drained("GPU-a", True)
    ledger.set_node_drained("gpu1", True)
    ledger.set_drained("GPU-a", False)
    assert free_nodes(ledger) == {"gpu2"}


def test_a_silent_agent_takes_its_node_out_until_it_reports_again(ledger, at):
    ledger.record_report("gpu1", agent_version="1", interval_s=10)
    ledger.record_report("gpu2", agent_version="1", interval_s=10)
    at.move(30)
    ledger.record_report("gpu2", agent_version="1", interval_s=10)
    at.move(31)  # gpu1 silent for 61 s, gpu2 for 31 s
    assert ledger.expire_agents(60) == ["gpu1"]
    assert ledger.expire_agents(60) == []  # once
    assert ledger.node("gpu1").state == "unreachable"
    assert "stopped reporting" in ledger.node("gpu1").why_out()
    assert free_nodes(ledger) == {"gpu2"}
    assert ledger.record_report("gpu1", agent_version="1", interval_s=10) is True
    assert free_nodes(ledger) == {"gpu1", "gpu2"}


def test_a_node_without_an_agent_is_never_judged_by_one(ledger, at):
    at.move(10 * 86400)
    assert ledger.expire_agents(60) == []
    assert free_nodes(ledger) == {"gpu1", "gpu2"}


def test_the_orchestrators_view_moves_nodes_in_and_out(ledger):
    ready = {
        n: EngineNode(id=f"id-{n}", state="ready", availability="active") for n in ("gpu1", "gpu2")
    }
    assert ledger.record_engine("swarm", ready) == []
    assert ledger.node("gpu1").engine_id == "id-gpu1"
    changed = ledger.record_engine(
        "swarm", {**ready, "gpu2": EngineNode(id="id-gpu2", state="down", availability="active")}
    )
    assert changed == ["gpu2"]
    assert ledger.node("gpu2").state == "engine-down"
    assert free_nodes(ledger) == {"gpu1"}
    # a node the orchestrator no longer lists is out too
    assert ledger.record_engine("swarm", {"gpu1": ready["gpu1"]}) == []
    assert ledger.node("gpu2").engine_state == "missing"
    assert ledger.record_engine("swarm", ready) == ["gpu2"]
    assert free_nodes(ledger) == {"gpu1", "gpu2"}
    # Swarm's own availability counts: a paused node takes no new task
    ledger.record_engine(
        "swarm", {**ready, "gpu1": EngineNode(id="id-gpu1", state="ready", availability="pause")}
    )
    assert free_nodes(ledger) == {"gpu2"}


def test_a_new_inventory_on_a_node_out_of_service_stays_out(ledger):
    ledger.set_node_drained("gpu2", True)
    c = [{"uuid": "GPU-c", "index": 1, "name": "Tesla T4", "memory": "16GiB"}]
    b = [{"uuid": "GPU-b", "index": 0, "name": "NVIDIA A40", "memory": "48GiB"}]
    ledger.sync_inventory(load_declared(b + c, node="gpu2"), node="gpu2")
    assert {s["id"]: s["available"] for s in ledger.slices() if s["node"] == "gpu2"} == {
        "GPU-b": False,
        "GPU-c": False,
    }


def test_node_tokens_name_their_node_only(ledger):
    token = ledger.issue_node_token("gpu1")
    assert token.startswith(NODE_TOKEN_PREFIX) and len(token) > 40
    assert ledger.node_for_token(token) == "gpu1"
    assert ledger.node_for_token(token + "x") is None
    assert ledger.node_for_token("gpu1") is None
    assert ledger.node("gpu1").has_token and not ledger.node("gpu2").has_token
    # a new token replaces the old one; revoking refuses it
    again = ledger.issue_node_token("gpu1")
    assert ledger.node_for_token(token) is None and ledger.node_for_token(again) == "gpu1"
    assert ledger.revoke_node_token("gpu1")
    assert ledger.node_for_token(again) is None
    # a token for a node the ledger does not know yet makes its row (a new server joining)
    new = ledger.issue_node_token("gpu3")
    assert ledger.node_for_token(new) == "gpu3" and ledger.node("gpu3").available


def test_expiry_uses_the_ledgers_clock(ledger, at):
    ledger.record_report("gpu1", agent_version="1", interval_s=10)
    assert ledger.node("gpu1").agent_seen_at == clock.utcnow()
    assert ledger.expire_agents(60, now=clock.utcnow() + timedelta(seconds=59)) == []
    assert ledger.expire_agents(60, now=clock.utcnow() + timedelta(seconds=61)) == ["gpu1"]


def test_a_claim_for_one_node_takes_that_nodes_slice_or_none(ledger):
    """A Swarm course server's claim (``only_node``: the node holding its course volumes) never
    takes another node's slice, even where best fit would."""
    got = ledger.claim(GPU, user="ann", profile="p", only_node="gpu2")
    assert got.slice.node == "gpu2" and got.allocation.node == "gpu2"
    with pytest.raises(NoFreeSlice):  # gpu1's A40 is free, but not on gpu2
        ledger.claim(GPU, user="bob", profile="p", only_node="gpu2")
    assert ledger.claim(GPU, user="bob", profile="p").slice.node == "gpu1"

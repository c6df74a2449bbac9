"""The continuous reconcile's decisions (``spawner/reconcile.py``), without an engine or a hub:
which open allocations close (and why), which labelled containers go, and which containers a
server may start or adopt. The same rules run against a real hub and Docker in
test_spawner_lifecycle.py."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpulab.ledger import Allocation
from jupyterhub_gpulab.spawner.container import labels
from jupyterhub_gpulab.spawner.reconcile import (
    NO_SERVER,
    NOT_HELD,
    ActiveServer,
    LabObject,
    active_servers,
    foreign_reason,
    plan,
)

NODE = "node-a"
LAB_ID = "3f2c0c1e-0000-4000-8000-000000000001"
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)


def alloc(
    aid: int, user: str, server: str = "", slice_id: str = "MIG-1", node: str = NODE
) -> Allocation:
    return Allocation(
        id=aid,
        slice_id=slice_id,
        user=user,
        server_name=server,
        profile="mig",
        node=node,
        charge_group=None,
        share=1.0,
        container_id=None,
        container_name=None,
        started_at=T0,
        ended_at=None,
        end_reason=None,
    )


def container(
    user: str,
    aid: int | None,
    *,
    state: str = "running",
    server: str = "",
    slice_id: str | None = "MIG-1",
    name: str | None = None,
    node: str = NODE,
) -> LabObject:
    """A container as ``docker ps -a`` reports it, with the labels the spawner writes."""
    row = {
        "Id": f"{user}{aid}".ljust(64, "0"),
        "Names": [f"/{name or 'jupyter-' + user}"],
        "State": state,
        "Labels": labels(
            allocation_id=aid,
            user=user,
            server_name=server,
            profile="mig" if aid else "cpu",
            slice_id=slice_id if aid else None,
            node=node,
            lab=LAB_ID,
        ),
    }
    return LabObject.from_ps(row)


def running(aid: int | None, user: str) -> ActiveServer:
    return ActiveServer(pending=None, allocation_id=aid, object_name=f"jupyter-{user}")


def pending(aid: int | None, user: str, what: str = "spawn") -> ActiveServer:
    return ActiveServer(pending=what, allocation_id=aid, object_name=f"jupyter-{user}")


def closed(p) -> dict[int, str]:
    return {a.id: reason for a, reason in p.close}


def removed(p) -> set[str]:
    return {c.name for c, _ in p.remove}


# -- allocations ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "containers",
    [
        pytest.param([], id="never-created"),
        pytest.param([container("ann", 1, state="created")], id="created-never-started"),
        pytest.param([container("ann", 1)], id="running-never-ready"),
    ],
)
def test_an_allocation_whose_server_is_neither_running_nor_starting_closes(containers):
    """The hub was killed mid-spawn and the new one let the server go: whatever Docker holds,
    the allocation closes and its container goes, however young the allocation is."""
    p = plan([alloc(1, "ann")], containers, servers={})
    assert closed(p) == {1: NO_SERVER}
    assert removed(p) == {c.name for c in containers}


def test_a_waitlist_hold_is_kept_though_no_server_runs_on_it():
    """A slice held for the first in line of the waitlist has no server until they start one;
    the service lets the hold lapse, reconcile must not close it."""
    hold = dataclasses.replace(alloc(1, "ann"), hold_until=T0 + timedelta(minutes=5))
    assert closed(plan([hold, alloc(2, "bob")], [], servers={})) == {2: NO_SERVER}


@pytest.mark.parametrize("what", ["spawn", "check", "stop"])
def test_a_pending_server_keeps_its_allocation_with_or_without_a_container(what):
    # a spawn that claimed but has not yet recorded the id keeps it too (allocation_id None)
    for server in (pending(1, "ann", what), pending(None, "ann", what)):
        for containers in ([], [container("ann", 1, state="created")]):
            p = plan([alloc(1, "ann")], containers, {("ann", ""): server})
            assert p.close == () and p.remove == ()


def test_a_pending_server_holding_another_allocation_frees_the_leftover():
    p = plan(
        [alloc(1, "ann", slice_id="MIG-1"), alloc(2, "ann", slice_id="MIG-2")],
        [container("ann", 1, state="created")],
        {("ann", ""): pending(2, "ann")},
    )
    assert closed(p) == {1: NOT_HELD}
    # the old container carries the server's name: the spawn's own start replaces it
    assert removed(p) == set()


def test_a_running_server_keeps_its_own_allocation():
    # poll() watches the server's own container; the reconcile never races a fresh start
    for containers in ([container("ann", 1)], []):
        p = plan([alloc(1, "ann")], containers, {("ann", ""): running(1, "ann")})
        assert p.close == () and p.remove == ()


def test_a_running_server_that_lost_its_state_keeps_the_allocation_of_its_running_container():
    p = plan([alloc(1, "ann")], [container("ann", 1)], {("ann", ""): running(None, "ann")})
    assert p.close == () and p.remove == ()


@pytest.mark.parametrize(
    "containers",
    [
        pytest.param([], id="no-container"),
        pytest.param([container("ann", 1, state="created")], id="not-running"),
        pytest.param([container("ann", 1, name="other-name")], id="another-name"),
    ],
)
def test_a_running_server_without_it_frees_a_leftover_allocation(containers):
    """A CPU server (or one that holds another allocation) runs; an allocation of the same
    server name with no running container under that name is a leftover."""
    for server in (running(None, "ann"), running(7, "ann")):
        p = plan([alloc(1, "ann")], containers, {("ann", ""): server})
        assert closed(p) == {1: NOT_HELD}


def test_named_servers_are_told_apart():
    p = plan(
        [alloc(1, "ann", "a", slice_id="MIG-1"), alloc(2, "ann", "b", slice_id="MIG-2")],
        [],
        {("ann", "a"): running(1, "ann-a")},
    )
    assert closed(p) == {2: NO_SERVER}


# -- containers ----------------------------------------------------------------------------------


def test_a_container_of_a_closed_allocation_goes_unless_its_server_runs_it():
    c = container("bob", 9)
    assert removed(plan([], [c], {})) == {"jupyter-bob"}
    # bob's server runs under that name: its poll() re-adopts the slice or stops it
    assert plan([], [c], {("bob", ""): running(9, "bob")}).remove == ()
    assert plan([], [c], {("bob", ""): pending(None, "bob")}).remove == ()


def test_a_hub_never_removes_another_hubs_containers_of_one_ledger():
    """Hub B (node-b) shares the ledger and the engine with hub A (node-a), whose ann runs on
    allocation 1 and whose bob's allocation 2 is already closed: B's pass, with no server of its
    own, touches neither; A's own pass still removes bob's."""
    ann = container("ann", 1, node="node-a")
    bob = container("bob", 2, node="node-a", name="jupyter-bob")
    everything = [alloc(1, "ann", node="node-a")]
    p = plan(everything, [ann, bob], {}, "node-b")
    assert p == plan([], [], {}, "node-b")  # nothing closed, nothing removed
    assert removed(plan(everything, [ann, bob], {("ann", ""): running(1, "ann")}, "node-a")) == {
        "jupyter-bob"
    }
    # a container with no node label whose allocation is open on A: A's, not B's
    legacy = container("ann", 1, node="")
    assert plan(everything, [legacy], {}, "node-b").remove == ()
    # renamed c.GPULab.node_name: the allocation moved to node-b, its container says node-a
    moved = [alloc(1, "ann", node="node-b")]
    assert closed(plan(moved, [ann], {}, "node-b")) == {1: NO_SERVER}
    assert removed(plan(moved, [ann], {}, "node-b")) == {"jupyter-ann"}


def test_cpu_containers_hold_nothing_and_are_left_alone():
    assert plan([], [container("cat", None)], {}).remove == ()


def test_containers_of_open_allocations_are_kept():
    p = plan([alloc(1, "ann")], [container("ann", 1)], {("ann", ""): running(1, "ann")})
    assert p.remove == ()


# -- what a server may start or adopt ------------------------------------------------------------


def check(c, *, user="ann", server="", aid=None, slice_id=None, starting=False):
    return foreign_reason(
        c,
        user=user,
        server_name=server,
        allocation_id=aid,
        slice_id=slice_id,
        starting=starting,
    )


def test_a_cpu_server_never_adopts_a_container_holding_a_gpu():
    """The incident: a CPU server came back holding an A40 the ledger had given to someone
    else, because an old container made with that GPU was restarted."""
    a40 = container("ann", 5, slice_id="GPU-a40")
    why = check(a40)
    assert why == "it holds allocation 5 (slice GPU-a40), but this server holds no slice"


def test_a_gpu_server_never_adopts_a_container_of_another_slice():
    why = check(container("ann", 5, slice_id="GPU-a40"), aid=8, slice_id="MIG-1")
    assert "slice GPU-a40" in why and "allocation 8 (slice MIG-1)" in why


def test_a_starting_server_uses_only_a_container_made_for_this_allocation():
    old = container("ann", 5, slice_id="MIG-1")
    assert check(old, aid=8, slice_id="MIG-1", starting=True) is not None
    # once running, a re-adopted container keeps the labels of the allocation it was made for
    assert check(old, aid=8, slice_id="MIG-1") is None
    assert check(container("ann", 8), aid=8, slice_id="MIG-1", starting=True) is None


def test_another_servers_or_nodes_container_is_never_adopted():
    c = container("bob", 5)
    assert "'bob'" in check(c, aid=5, slice_id="MIG-1")
    assert check(container("ann", 5), server="other", aid=5, slice_id="MIG-1") is not None
    row = {"Id": "x" * 64, "Names": ["/jupyter-ann"], "State": "running", "Labels": {}}
    assert check(LabObject.from_ps(row)) == "it has no gpulab labels"


def test_matching_containers_are_used():
    assert check(container("ann", None)) is None
    assert check(container("ann", 5), aid=5, slice_id="MIG-1") is None


def test_inspect_and_ps_read_the_same_labels():
    c = container("ann", 5)
    obj = {
        "Id": c.id,
        "Name": "/jupyter-ann",
        "State": {"Status": "running", "Running": True},
        "Config": {"Labels": labels(
            allocation_id=5, user="ann", server_name="", profile="mig", slice_id="MIG-1", node=NODE,
            lab=LAB_ID,
        )},
    }  # fmt: skip
    assert LabObject.from_inspect(obj) == c


# -- JupyterHub's view ---------------------------------------------------------------------------


def test_hub_servers_lists_active_servers_with_what_they_hold():
    from types import SimpleNamespace as NS

    def sp(pending, ready, aid, name):
        return NS(
            pending=pending, active=bool(pending or ready), allocation_id=aid, object_name=name
        )

    users = [
        NS(name="ann", spawners={"": sp(None, True, 1, "j-ann"), "b": sp(None, False, None, "x")}),
        NS(name="bob", spawners={"": sp("spawn", False, None, "j-bob")}),
    ]
    assert active_servers(users) == {
        ("ann", ""): ActiveServer(None, 1, "j-ann"),
        ("bob", ""): ActiveServer("spawn", None, "j-bob"),
    }

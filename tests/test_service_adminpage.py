"""The admin page reads a window of devices and counts, not the whole lab: its figures stay those
of the whole-lab builders (:func:`~jupyterhub_gpulab.service.web.data.admin_data` cut by
:func:`~jupyterhub_gpulab.service.web.paging.device_window`, and
:func:`~jupyterhub_gpulab.fairuse.accounting.usage`) on a lab of three nodes, a vanished slice
on each GPU node and every edge of a GPU-hours period."""

from __future__ import annotations

from datetime import timedelta

import pytest
from ledger_support import LAB, seats_lab

from jupyterhub_gpulab.fairuse.accounting import usage
from jupyterhub_gpulab.hubapi.client import HubClient
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest, load_declared
from jupyterhub_gpulab.lab.config import GPULab
from jupyterhub_gpulab.ledger import Ledger
from jupyterhub_gpulab.service.state import LabState
from jupyterhub_gpulab.service.web.admindata import admin_page_data, period_sums
from jupyterhub_gpulab.service.web.data import admin_data
from jupyterhub_gpulab.service.web.paging import Page, device_window
from jupyterhub_gpulab.service.web.plotview import device_charts
from jupyterhub_gpulab.service.web.usageview import usage_view

MIG_1G = SliceRequest(kind=SliceKind.MIG, mig_profile="1g.5gb")
SEAT = SliceRequest(kind=SliceKind.SHARED)
B_LAB = seats_lab(3, seats=2, memory_per_seat="4GiB")


def state_of(ledger: Ledger, inventory: list[dict]) -> LabState:
    profiles = [
        {"slug": "mig", "display_name": "MIG", "image": "x",
         "slice": {"kind": "mig", "mig_profile": "1g.5gb"}},
        {"slug": "seat", "display_name": "Seat", "image": "x", "slice": {"kind": "shared"}},
    ]  # fmt: skip
    gpulab = GPULab(node_name="node-a", inventory=inventory, profiles=profiles,
                    group_policies={"course": {"max_slices": 1}})  # fmt: skip
    state = LabState(gpulab, ledger)
    state.sync()
    return state


@pytest.fixture
def ledger(tmp_path, at):
    led = Ledger(f"sqlite:///{tmp_path / 'gpulab.sqlite'}")
    yield led
    led.close()


async def test_the_device_window_totals_and_alert_are_the_whole_labs(ledger, at):
    state_of(ledger, LAB)
    ledger.sync_inventory(load_declared(B_LAB, node="node-b"), node="node-b")
    ledger.issue_node_token("cpu-1")  # a node without GPUs
    for i in range(2):
        ledger.claim(MIG_1G, user=f"mig{i}", profile="mig", charge_groups=[("course", None)])
    for i in range(5):
        ledger.claim(SEAT, user=f"ada{i}", profile="seat",
                     only_node="node-b" if i < 3 else "node-a")  # fmt: skip
    ledger.record_refusal("bob", "mig", "quota", "group full")
    # one MIG instance leaves node-a's inventory, a seated GPU leaves node-b's
    state = state_of(ledger, [d for d in LAB if d["uuid"] != "GPU-a100-0000"])
    ledger.sync_inventory(load_declared(B_LAB[1:], node="node-b"), node="node-b")

    whole = await admin_data(state, HubClient("http://127.0.0.1:9/hub/api", "x", timeout=1),
                             parts=("inventory", "usage", "vanished"))  # fmt: skip
    # both MIG holders on node-a, the seats on node-b's first T4
    assert {(r["node"], r["kind"]) for r in whole["vanished"]} == {
        ("node-a", "mig"), ("node-b", "shared")
    }  # fmt: skip
    for offset, limit in ((0, 2), (4, 3), (5, 1), (7, 50), (0, 50), (100, 5)):
        got = await admin_page_data(state, Page(offset=offset, limit=limit))
        nodes, total = device_window(whole["inventory"]["nodes"], offset, limit)
        assert got["inventory"] == {**whole["inventory"], "nodes": nodes}, (offset, limit)
        assert got["devices_total"] == total == 8
        for key in ("vanished", "groups", "refusals_24h", "taken_at"):
            assert got[key] == whole[key], key


def test_the_databases_gpu_hours_are_usages_at_every_edge_of_the_period(ledger, at):
    state = state_of(ledger, LAB)
    gone = ledger.claim(SEAT, user="ada", profile="seat", charge_groups=[("g1", None)])
    ledger.claim(SEAT, user="bob", profile="seat")  # charged to no group, open throughout
    at.move(3600)
    ledger.release(gone.allocation.id, "stopped")  # ends exactly as the period starts
    start = at.now
    at.move(1800)
    ledger.claim(MIG_1G, user="cy", profile="mig", charge_groups=[("g2", None)])
    brief = ledger.claim(SEAT, user="dee", profile="seat", charge_groups=[("g1", None)])
    ledger.release(brief.allocation.id, "stopped")  # no time at all: listed at 0
    at.move(1800)
    ledger.claim(SEAT, user="eve", profile="seat", charge_groups=[("g2", None)])  # starts now
    for end in (start + timedelta(days=1), start + timedelta(minutes=45)):
        expected = usage(ledger.allocations_between(start, end), start, end, at.now)
        got = period_sums(state, start, end)
        # SQLite's julianday() keeps milliseconds: seconds agree to a thousandth
        assert got.by_user == pytest.approx(expected.by_user, abs=1e-3)
        assert got.by_group == pytest.approx(expected.by_group, abs=1e-3)
        assert {**usage_view(got), "rows": []} == {**usage_view(expected), "rows": []}
    assert set(got.by_user) == {"bob", "cy", "dee"}  # eve started after the shorter period


def test_a_gpu_without_figures_gets_no_chart_unless_asked(ledger, at):
    state = state_of(ledger, LAB)  # declared, no NVML: the sampler records unknown figures
    state.take_sample()
    shown = {"GPU-a40-0001", "GPU-t4s-0004"}
    assert [c["uuid"] for c in device_charts(state, 3600, shown)] == sorted(shown)
    assert device_charts(state, 3600, shown, empty=False) == []

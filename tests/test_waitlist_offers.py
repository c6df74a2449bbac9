"""The waitlist's offer as the service makes it (``fairuse/offers.py`` on a real SQLite ledger and
a lab read from config): the GPU-hour budget is checked again when a slice frees, a user whose
budget ran out in the meantime is passed over and told why and until when (their entry, their
notice), and the next in line gets the slice. No hub, no engine."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from clock_support import HOUR, MINUTE
from ledger_support import lab_inventory, make_url, seats_lab
from traitlets.config import Config

from jupyterhub_gpulab.fairuse.offers import offer_limits
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.lab.config import GPULab
from jupyterhub_gpulab.ledger import Ledger
from jupyterhub_gpulab.ledger.waitlist import SKIP_RULE
from jupyterhub_gpulab.service.web.queueapi import my_entries

SEAT = SliceRequest(kind=SliceKind.SHARED)
TWO_SEATS = seats_lab(seats=2, memory_per_seat="6GiB")
PROFILES = [
    {"slug": "seat", "display_name": "T4 seat", "image": "img", "slice": {"kind": "shared"}}
]
#: 0.04 GPU-hours a week: 4.8 minutes on a half-GPU seat
POLICIES = {"students": {"gpu_hours": 0.04, "period": "week"}}
GROUPS = {"ann": ["students"], "bob": ["students"]}


@pytest.fixture
def clock_start():
    return datetime(2026, 12, 2, 15, 0, tzinfo=timezone.utc)  # a Wednesday


@pytest.fixture
def lab():
    c = Config()
    c.GPULab.inventory = TWO_SEATS
    c.GPULab.profiles = PROFILES
    c.GPULab.group_policies = POLICIES
    return GPULab(config=c).load()


@pytest.fixture
def ledger(tmp_path, at):
    led = Ledger(make_url("sqlite", tmp_path))
    led.sync_inventory(lab_inventory(TWO_SEATS))
    yield led
    led.close()


def entitle(lab, ledger):
    def check(entry):
        return offer_limits(lab, ledger, entry.user, entry.profile, GROUPS[entry.user], False)

    return check


def test_a_user_whose_budget_ran_out_in_the_queue_is_skipped_and_told_until_when(lab, ledger, at):
    # ann used a seat for 6 minutes (0.05 GPU-hours of her 0.04) before she queued
    mine = ledger.claim(SEAT, user="ann", profile="seat", server_name="")
    at.move(6 * MINUTE)
    ledger.release(mine.allocation.id, "stopped")
    held = [ledger.claim(SEAT, user=u, profile="seat", server_name="x") for u in ("u0", "u1")]
    ledger.join_waitlist("ann", "seat", SEAT)
    ledger.join_waitlist("bob", "seat", SEAT)
    at.move(HOUR)
    ledger.release(held[0].allocation.id, "stopped")

    offered = ledger.offer_next(entitle(lab, ledger), 5 * MINUTE)

    # the slice goes to bob, next in line, whose budget is untouched
    assert [e.user for e in offered] == ["bob"]
    assert [a.user for a in ledger.open_allocations() if a.hold_until] == ["bob"]
    # ann's entry and her notice say why, until when, in digits that are not "0.0"
    [entry] = my_entries(ledger, "ann")
    assert entry["state"] == "refused" and entry["position"] is None
    says = (
        "Skipped in the queue for T4 seat: your GPU-hour budget is spent until Monday "
        "2026-12-07 00:00 UTC (you have used 0.05 of 0.04 GPU-hours this week (students))."
    )
    assert entry["message"].startswith(says), entry["message"]
    [notice] = ledger.warnings("ann")
    assert notice.rule == SKIP_RULE and notice.message == entry["message"]

    # queueing again clears the notice; the new entry waits
    ledger.join_waitlist("ann", "seat", SEAT)
    assert ledger.warnings("ann") == []
    assert [e["state"] for e in my_entries(ledger, "ann")] == ["waiting"]


def test_a_skip_notice_ends_after_a_day(lab, ledger, at):
    mine = ledger.claim(SEAT, user="ann", profile="seat", server_name="")
    at.move(6 * MINUTE)
    ledger.release(mine.allocation.id, "stopped")
    ledger.join_waitlist("ann", "seat", SEAT)
    ledger.offer_next(entitle(lab, ledger), 5 * MINUTE)
    assert [w.rule for w in ledger.warnings("ann")] == [SKIP_RULE]
    at.move(23 * HOUR)
    ledger.expire_offers()
    assert [w.rule for w in ledger.warnings("ann")] == [SKIP_RULE]
    at.move(2 * HOUR)
    ledger.expire_offers()
    assert ledger.warnings("ann") == []

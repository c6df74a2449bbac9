"""Usage accounting: weighted GPU-seconds, sums per user / group / profile, CSV, and a hub
restart that loses nothing (allocations from a real ledger on SQLite)."""

from __future__ import annotations

import csv
import io
from datetime import datetime, timedelta, timezone

import pytest
from clock_support import HOUR

from jupyterhub_gpulab.fairuse.accounting import (
    CSV_COLUMNS,
    gpu_seconds,
    slice_kind,
    to_csv,
    usage,
)
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest, load_declared
from jupyterhub_gpulab.ledger import Allocation, Ledger

T0 = datetime(2026, 12, 7, 8, 0, tzinfo=timezone.utc)  # a Monday
H = timedelta(hours=1)

LAB = [
    {
        "uuid": "GPU-h100-0",
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "memory": "80GiB",
        "mig": [{"uuid": f"MIG-h100-0-{j}", "profile": "1g.10gb"} for j in range(5)]
        + [{"uuid": "MIG-h100-0-2g", "profile": "2g.20gb"}],
    },
    {"uuid": "GPU-a40-1", "index": 1, "name": "NVIDIA A40", "memory": "48GiB"},
    {
        "uuid": "GPU-t4-2",
        "index": 2,
        "name": "Tesla T4",
        "memory": "16GiB",
        "shared": {"seats": 4, "memory_per_seat": "4GiB", "compute_share": 0.25},
    },
]
MIG_1G = SliceRequest(kind=SliceKind.MIG, mig_profile="1g.10gb")
WHOLE = SliceRequest(kind=SliceKind.GPU)
SEAT = SliceRequest(kind=SliceKind.SHARED)


def alloc(start, end=None, share=1.0, user="ann", group="students", profile="p", sid="GPU-x"):
    return Allocation(
        id=1,
        slice_id=sid,
        user=user,
        server_name="",
        profile=profile,
        node="n",
        charge_group=group,
        share=share,
        container_id=None,
        container_name=None,
        started_at=start,
        ended_at=end,
        end_reason=None if end is None else "stopped",
    )


@pytest.mark.parametrize(
    ("start", "end", "share", "now", "expected_s"),
    [
        pytest.param(T0 + H, T0 + 2 * H, 1.0, T0 + 12 * H, 3600, id="inside-the-window"),
        pytest.param(T0 - H, T0 + H, 1.0, T0 + 12 * H, 3600, id="started-before-the-window"),
        pytest.param(T0 + 9 * H, T0 + 11 * H, 1.0, T0 + 12 * H, 3600, id="ends-after-the-window"),
        pytest.param(T0 - 2 * H, T0 - H, 1.0, T0 + 12 * H, 0, id="before-the-window"),
        pytest.param(
            T0 + H, T0 + 2 * H, 1 / 7, T0 + 12 * H, 3600 / 7, id="mig-1g-counts-a-seventh"
        ),
        pytest.param(T0 + H, T0 + 2 * H, 0.25, T0 + 12 * H, 900, id="seat-counts-its-share"),
        pytest.param(T0 + 8 * H, None, 1.0, T0 + 9 * H, 3600, id="open-counts-up-to-now"),
        pytest.param(T0 + 9 * H, None, 1.0, T0 + 12 * H, 3600, id="open-stops-at-window-end"),
    ],
)
def test_gpu_seconds(start, end, share, now, expected_s):
    got = gpu_seconds(alloc(start, end, share), T0, T0 + 10 * H, now)
    assert got == pytest.approx(expected_s)


def test_usage_sums_per_user_group_and_profile():
    allocs = [
        alloc(T0, T0 + 7 * H, 1 / 7, "ann", "students", "pytorch-1g", "MIG-1"),
        alloc(T0, T0 + 2 * H, 1.0, "ann", "research", "pytorch-a40", "GPU-a40"),
        alloc(T0, T0 + 4 * H, 0.25, "ben", "students", "tf-seat", "GPU-t4/seat-1"),
        alloc(T0, None, 1 / 7, "ben", None, "pytorch-1g", "MIG-2"),
    ]
    u = usage(allocs, T0, T0 + 24 * H, now=T0 + 7 * H)
    assert u.hours("ann") == pytest.approx(1 + 2)
    assert u.hours("ben") == pytest.approx(1 + 1)
    assert u.by_group["students"] / 3600 == pytest.approx(2)
    assert u.by_group["research"] / 3600 == pytest.approx(2)
    assert u.by_group[""] / 3600 == pytest.approx(1)
    assert u.by_profile["pytorch-1g"] / 3600 == pytest.approx(2)
    assert u.total / 3600 == pytest.approx(5)
    assert [(r.user, r.slice_kind) for r in u.rows] == [
        ("ann", "gpu"),
        ("ann", "mig"),
        ("ben", "mig"),
        ("ben", "shared"),
    ]


def test_csv_export_reads_back_with_a_header_and_hours():
    allocs = [
        alloc(T0, T0 + 6 * H, 1 / 7, "ann", "students", "pytorch-1g", "MIG-1"),
        alloc(T0, T0 + H, 1 / 7, "ann", "students", "pytorch-1g", "MIG-2"),
    ]
    text = to_csv(usage(allocs, T0, T0 + 24 * H, T0 + 24 * H).rows)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert rows == [
        {
            "period_start": "2026-12-07T08:00:00+00:00",
            "period_end": "2026-12-08T08:00:00+00:00",
            "user": "ann",
            "group": "students",
            "profile": "pytorch-1g",
            "slice_kind": "mig",
            "allocations": "2",
            "gpu_seconds": "3600.0",
            "gpu_hours": "1.0000",
        }
    ]


@pytest.mark.parametrize("name", ["=HYPERLINK(1)", "+1", "-1", "@SUM(A1)"])
def test_csv_never_starts_a_cell_with_a_formula(name):
    text = to_csv(usage([alloc(T0, T0 + H, user=name)], T0, T0 + H, T0 + H).rows)
    row = next(csv.DictReader(io.StringIO(text)))
    assert row["user"] == "'" + name


@pytest.mark.parametrize(
    ("sid", "kind"),
    [("MIG-5c1e7a90-1111", "mig"), ("GPU-t4-2/seat-3", "shared"), ("GPU-a40-1", "gpu")],
)
def test_slice_kind_from_the_slice_id(sid, kind):
    assert slice_kind(alloc(T0, sid=sid)) == kind


# -- with a real ledger ---------------------------------------------------------------------------


@pytest.fixture
def clock_start():
    """Where ``at`` (conftest.py) starts."""
    return T0


def test_ledger_weights_each_allocation_by_its_slice(tmp_path, at):
    ledger = Ledger(f"sqlite:///{tmp_path / 'gpulab.sqlite'}")
    ledger.sync_inventory(load_declared(LAB))
    mig = ledger.claim(MIG_1G, user="ann", profile="pytorch-1g").allocation
    whole = ledger.claim(WHOLE, user="ben", profile="pytorch-a40").allocation
    seat = ledger.claim(SEAT, user="cat", profile="tf-seat").allocation
    at.move(7 * HOUR)
    for a in (mig, whole, seat):
        ledger.release(a.id, "stopped")
    u = usage(ledger.allocations_between(T0, at.now), T0, at.now, at.now)
    ledger.close()
    assert u.hours("ann") == pytest.approx(1.0)  # 7 h of 1/7
    assert u.hours("ben") == pytest.approx(7.0)
    assert u.hours("cat") == pytest.approx(7 * 0.25)


def test_hub_restart_mid_period_keeps_the_accounting(tmp_path, at):
    url = f"sqlite:///{tmp_path / 'gpulab.sqlite'}"
    ledger = Ledger(url)
    ledger.sync_inventory(load_declared(LAB))
    done = ledger.claim(
        MIG_1G, user="ann", profile="pytorch-1g", charge_groups=[("students", None)]
    )
    at.move(2 * HOUR)
    ledger.release(done.allocation.id, "stopped")
    ledger.claim(WHOLE, user="ann", profile="pytorch-a40", charge_groups=[("students", None)])
    at.move(HOUR)
    week_end = T0 + timedelta(days=7)
    before = usage(ledger.allocations_between(T0, at.now), T0, week_end, at.now)
    ledger.close()  # the hub goes down with ann's A40 still held

    at.move(HOUR)
    reopened = Ledger(url)
    after = usage(reopened.allocations_between(T0, at.now), T0, week_end, at.now)
    reopened.close()
    assert before.hours("ann") == pytest.approx(2 / 7 + 1)
    # the open allocation kept counting across the restart; nothing was lost or doubled
    assert after.hours("ann") == pytest.approx(2 / 7 + 2)
    assert after.by_group == {"students": pytest.approx((2 / 7 + 2) * 3600)}

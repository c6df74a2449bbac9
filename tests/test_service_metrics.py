"""The service's ``/services/gpulab/metrics``: refused without the scope, and its figures follow
what happens in the ledger (a real hub starts the real service; the ledger is the one it reads).
"""

from __future__ import annotations

import secrets
import time
from datetime import timedelta

import pytest
import requests
import sqlalchemy as sa
from metrics_support import samples, value
from service_support import (
    PREFIX,
    login,
    running_service_hub,
    user_token,
)

from jupyterhub_gpulab import clock
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.ledger.schema import allocations, bookings

TOKEN = secrets.token_hex(16)
PROMETHEUS = f"""
from jupyterhub_gpulab.hub.hubconfig import configure_prometheus
configure_prometheus(c, api_token={TOKEN!r})
"""
A40 = SliceRequest(kind=SliceKind.GPU, model="A40")
SEAT = SliceRequest(kind=SliceKind.SHARED)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with running_service_hub(tmp_path_factory.mktemp("metrics-hub"), extra=PROMETHEUS) as hub:
        yield hub


def scrape(hub, token: str | None = TOKEN) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.get(hub.url + PREFIX + "metrics", headers=headers, timeout=30)


def metrics(hub) -> dict:
    r = scrape(hub)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("text/plain; version=")
    return samples(r.text)


def test_metrics_need_the_metrics_scope(hub):
    r = scrape(hub, None)
    assert r.status_code == 403
    assert "custom:gpulab:metrics" in r.json()["message"]
    # a token fit for the hub's /hub/metrics only is told what else it needs
    admin = login(hub, "admin")
    r = admin.post(f"{hub.url}/hub/api/users/admin/tokens", json={"scopes": ["read:metrics"]},
                   headers={"X-XSRFToken": admin.cookies.get("_xsrf", path="/hub/")})  # fmt: skip
    assert r.status_code == 201, r.text
    r = scrape(hub, r.json()["token"])
    assert r.status_code == 403 and "access:services!service=gpulab" in r.json()["message"]
    student = user_token(hub, login(hub, "student"), "student")
    r = scrape(hub, student)
    assert r.status_code == 403, r.text
    assert r.json() == {"status": 403, "message": "This needs the scope custom:gpulab:metrics."}
    # readers of gpulab (instructors) hold it through custom:gpulab:read
    instructor = user_token(hub, login(hub, "instructor"), "instructor")
    assert scrape(hub, instructor).status_code == 200
    # the same token scrapes the hub's own /hub/metrics
    r = requests.get(hub.url + "/hub/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200 and "jupyterhub_running_servers" in r.text


def test_slices_devices_culls_warnings_and_drift_follow_the_ledger(hub, ledger):
    m = metrics(hub)
    free = dict(node="lab-node", kind="gpu", mig_profile="", profile="")
    assert value(m, "gpulab_slices", **free, state="free") == 3  # the A40, T4 and P40
    assert value(m, "gpulab_slices", **free, state="held") == 0
    assert value(m, "gpulab_slices", **free, state="drained") == 0
    seats = dict(node="lab-node", kind="shared", mig_profile="", profile="")
    assert value(m, "gpulab_slices", **seats, state="free") == 4
    assert value(m, "gpulab_devices", node="lab-node", state="in_service") == 5
    assert value(m, "gpulab_server_cull_total", rule="gpu-idle") == 0
    assert value(m, "gpulab_budget_exhaustion_total", group="students") == 0
    assert value(m, "gpulab_allocations_without_container", node="lab-node") == 0

    a40 = ledger.claim(A40, user="researcher", profile="a40", charge_groups=[("researchers", None)])
    seat = ledger.claim(SEAT, user="student", profile="shared-seat",
                        charge_groups=[("students", 3)])  # fmt: skip
    ledger.set_drained("GPU-p40-0003", True, "fan")
    ledger.set_warning("student", "", "gpu-idle", "idle", clock.utcnow() + timedelta(minutes=9))
    # the seat's server never got a container, 10 minutes on
    with ledger.engine.begin() as conn:
        conn.execute(
            allocations.update()
            .where(allocations.c.id == seat.allocation.id)
            .values(started_at=clock.utcnow() - timedelta(minutes=10))
        )
        # the A40 has run for half an hour: 1,800 GPU-seconds this week, and counting
        conn.execute(
            allocations.update()
            .where(allocations.c.id == a40.allocation.id)
            .values(started_at=clock.utcnow() - timedelta(minutes=30))
        )
    ledger.set_container(a40.allocation.id, "c0ffee", "jupyter-researcher")
    try:
        m = metrics(hub)
        assert value(m, "gpulab_slices", **{**free, "profile": "a40"}, state="held") == 1
        assert value(m, "gpulab_slices", **free, state="free") == 1
        assert value(m, "gpulab_slices", **free, state="drained") == 1
        assert value(m, "gpulab_slices", **{**seats, "profile": "shared-seat"}, state="held") == 1
        assert value(m, "gpulab_devices", node="lab-node", state="drained") == 1
        assert value(m, "gpulab_cull_warnings", rule="gpu-idle") == 1
        assert value(m, "gpulab_allocations_without_container", node="lab-node") == 1
        # neither server runs on the hub: both are stale once the service asked the hub after
        # they started (it asks every 2 s here)
        deadline = time.monotonic() + 15
        while value(m, "gpulab_allocations_stale", node="lab-node") != 2:
            assert time.monotonic() < deadline, value(
                m, "gpulab_allocations_stale", node="lab-node"
            )
            time.sleep(0.5)
            m = metrics(hub)

        ledger.release(seat.allocation.id, "culled:budget")
        ledger.release(a40.allocation.id, "culled:gpu-idle")
        m = metrics(hub)
        assert value(m, "gpulab_server_cull_total", rule="budget") == 1
        assert value(m, "gpulab_server_cull_total", rule="gpu-idle") == 1
        assert value(m, "gpulab_budget_exhaustion_total", group="students") == 1
        assert value(m, "gpulab_budget_exhaustion_total", group="researchers") == 0
        assert value(m, "gpulab_allocations_without_container", node="lab-node") == 0
        # the value, in seconds, weighted by share: the A40's whole half hour and more for the
        # researchers, a quarter of the seat's ten minutes for the students; only what ran this
        # week (Monday 00:00 UTC, quota_timezone) counts, so early on a Monday less of either
        ran = {a.id: a for a in ledger.allocations_between(clock.utcnow() - timedelta(hours=1),
                                                           clock.utcnow())}  # fmt: skip
        now = clock.utcnow()
        monday = now.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(now.weekday())

        def this_week_s(a):
            return (a.ended_at - max(a.started_at, monday)).total_seconds()

        a40, seat = ran[a40.allocation.id], ran[seat.allocation.id]
        assert (a40.ended_at - a40.started_at).total_seconds() >= 1800
        used = value(m, "gpulab_group_used_gpu_seconds", group="researchers", period="week")
        assert used == pytest.approx(this_week_s(a40), abs=1)
        used = value(m, "gpulab_group_used_gpu_seconds", group="students", period="week")
        assert used == pytest.approx(0.25 * this_week_s(seat), abs=1)
    finally:
        ledger.set_drained("GPU-p40-0003", False)
        ledger.clear_warnings("student", "")
        for a in ledger.open_allocations():
            ledger.release(a.id, "test-cleanup")
        with ledger.engine.begin() as conn:
            conn.execute(sa.delete(allocations))


def test_reserved_slices_and_reservation_seats_follow_a_booking(hub, ledger):
    """A course session keeping 3 of the 4 shared seats: they leave ``free`` for ``reserved``
    (with the profile they are kept for); a member's claim moves one to ``held`` and to the
    claimed seats; when the session starts the seats count in phase ``session``."""
    now = clock.utcnow()
    seats = dict(node="lab-node", kind="shared", mig_profile="")
    booking = ledger.book(holder="ml101", groups=["ml101"], profile="shared-seat", request=SEAT,
                          count=3, starts_at=now + timedelta(minutes=10),
                          ends_at=now + timedelta(hours=2), lead_s=1800, grace_s=900)  # fmt: skip
    try:
        m = metrics(hub)
        assert value(m, "gpulab_slices", **seats, profile="", state="free") == 1
        assert value(m, "gpulab_slices", **seats, profile="shared-seat", state="reserved") == 3
        assert value(m, "gpulab_reservation_seats", phase="lead", state="unclaimed") == 3
        assert value(m, "gpulab_reservation_seats", phase="session", state="unclaimed") == 0
        # a whole GPU is untouched by a booking of seats
        whole = dict(node="lab-node", kind="gpu", mig_profile="", profile="")
        assert value(m, "gpulab_slices", **whole, state="reserved") == 0
        assert value(m, "gpulab_slices", **whole, state="free") == 3

        member = ledger.claim(SEAT, user="student", profile="shared-seat", groups=["ml101"])
        assert member.allocation.booking_id == booking.id
        m = metrics(hub)
        assert value(m, "gpulab_slices", **seats, profile="shared-seat", state="held") == 1
        assert value(m, "gpulab_slices", **seats, profile="shared-seat", state="reserved") == 2
        assert value(m, "gpulab_slices", **seats, profile="", state="free") == 1
        assert value(m, "gpulab_reservation_seats", phase="lead", state="claimed") == 1

        with ledger.engine.begin() as conn:  # the session began 5 minutes ago
            conn.execute(
                bookings.update()
                .where(bookings.c.id == booking.id)
                .values(starts_at=clock.utcnow() - timedelta(minutes=5))
            )
        m = metrics(hub)
        assert value(m, "gpulab_reservation_seats", phase="session", state="unclaimed") == 2
        assert value(m, "gpulab_reservation_seats", phase="lead", state="unclaimed") == 0
        ledger.release(member.allocation.id, "stopped")
    finally:
        ledger.cancel_booking(booking.id)
    m = metrics(hub)
    assert value(m, "gpulab_slices", **seats, profile="", state="free") == 4
    assert value(m, "gpulab_slices", **seats, profile="", state="reserved") == 0


def test_no_user_names_in_labels_unless_enabled(hub, ledger):
    a = ledger.claim(A40, user="rob-the-user", profile="a40", server_name="train")
    try:
        text = scrape(hub).text
        labels = {k for name, ls in samples(text) for k, _ in ls}
        assert "user" not in labels and "rob-the-user" not in text
    finally:
        ledger.release(a.allocation.id, "stopped")


def test_a_node_its_orchestrator_cannot_run_tasks_on_is_engine_out(hub, ledger):
    from jupyterhub_gpulab.ledger.nodes import EngineNode

    def states(node):
        m = metrics(hub)
        return {
            st: value(m, "gpulab_nodes", node=node, state=st)
            for st in ("in_service", "drained", "unreachable", "engine_out")
        }

    ready = EngineNode(id="id-swn9", state="ready", availability="active")
    ledger.record_engine("swarm", {"swn9": ready})
    assert states("swn9") == {"in_service": 1, "drained": 0, "unreachable": 0, "engine_out": 0}
    # Swarm reports it down, then paused: out of service either way, one state for alerts
    for engine_node in (
        EngineNode(id="id-swn9", state="down", availability="active"),
        EngineNode(id="id-swn9", state="ready", availability="pause"),
    ):
        ledger.record_engine("swarm", {"swn9": engine_node})
        assert ledger.node("swn9").state.startswith("engine-")
        assert states("swn9") == {"in_service": 0, "drained": 0, "unreachable": 0, "engine_out": 1}

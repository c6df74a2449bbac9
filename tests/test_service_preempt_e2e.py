"""Priority preemption as a researcher lives it, on a real hub with the gpulab service and real
containers: the only A40 is held by a student whose GPU has sat idle; a researcher (priority 10)
is refused, joins the queue, the student's server is warned, then stopped through the culler's
path (``culled:preempt``), the freed slice is held for the researcher, whose spawn takes it; the
student's page says why their server went. No GPU reports a figure here, so the lab counts
unknown utilisation as idle (as the demo does)."""

from __future__ import annotations

import pytest
import requests
from e2e_support import PROFILES, new_hub, remove_node_containers, require_docker
from hubtools import free_port, wait_for
from service_support import PREFIX, ledger_for, login, user_token, wait_for_service

pytestmark = pytest.mark.docker

GPU = {"slug": "gpu", "display_name": "Whole A40", "image": PROFILES[0]["image"],
       "slice": {"kind": "gpu", "model": "A40"}, "mem_limit": "1G"}  # fmt: skip


def extra(port: int) -> str:
    profiles = [p for p in PROFILES if p["slug"] != "a40"] + [GPU]
    return f"""
from jupyterhub_gpulab.hub.hubconfig import configure_service
c.GPULab.profiles = {profiles!r}
c.GPULab.group_policies = {{
    "students": {{"profiles": ["gpu", "cpu"], "max_slices_per_user": 1, "preemptible": True}},
    "researchers": {{"profiles": ["gpu", "cpu"], "max_slices_per_user": 1, "priority": 10}},
}}
configure_service(c, config_file=__file__, url="http://127.0.0.1:{port}")
import os
c.GPULabService.cookie_secret_file = os.path.join(os.path.dirname(__file__), "gpulab_cookie")
c.GPULabService.sample_interval = 1
c.GPULabService.cull_every = "1s"
c.GPULabService.cull_warn_before = "4s"
c.GPULabService.max_sample_gap = "10s"
c.GPULabService.unknown_utilization = "idle"
c.GPULabService.preemption = True
c.GPULabService.preempt_min_idle = "2s"
c.GPULabService.waitlist_every = 1
c.GPULabService.waitlist_hold = "60s"
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    require_docker()
    hub = new_hub(tmp_path_factory.mktemp("preempt-e2e"), extra=extra(free_port()))
    try:
        hub.start()
        wait_for_service(hub)
        hub.create_user("student1", ["students"])
        hub.create_user("res1", ["researchers"])
        yield hub
    finally:
        hub.stop()
        remove_node_containers(hub.workdir.name)


def test_a_queued_researcher_gets_the_idle_students_gpu_after_a_warning(hub):
    ledger = ledger_for(hub)
    try:
        r = hub.spawn("student1", {"profile": "gpu"})
        assert r.status_code in (201, 202), r.text
        hub.wait_ready("student1")
        [held] = ledger.open_allocations("student1")
        # the researcher is refused, and queues instead of trying again later
        r = hub.spawn("res1", {"profile": "gpu"})
        assert r.status_code == 503 and "Join the waitlist" in r.json()["message"], r.text
        session = login(hub, "res1")
        token = user_token(hub, session, "res1")
        joined = requests.post(hub.url + PREFIX + "api/waitlist", json={"profile": "gpu"},
                               headers={"Authorization": f"token {token}"}, timeout=30)  # fmt: skip
        assert joined.status_code == 201, joined.text
        # the student is warned first (hub home page and their gpulab page) …
        warned = wait_for(
            "a preempt warning",
            lambda: [w for w in ledger.warnings("student1") if w.rule == "preempt"],
            30,
            hub,
        )
        assert "res1 is waiting" in warned[0].message
        assert ledger.get(held.id).ended_at is None  # not stopped yet
        # … then stopped through the culler's path, and the slice held for the researcher
        hold = wait_for("the offer", lambda: ledger.open_allocations("res1"), 60, hub)[0]
        assert hold.slice_id == held.slice_id and hold.hold_until is not None
        assert ledger.get(held.id).end_reason == "culled:preempt"
        [p] = ledger.preemptions("student1")
        assert p.for_user == "res1" and "higher priority" in p.reason
        r = hub.spawn("res1", {"profile": "gpu"})
        assert r.status_code in (201, 202), r.text
        hub.wait_ready("res1")
        assert [a.id for a in ledger.open_allocations("res1")] == [hold.id]
        page = login(hub, "student1").get(hub.url + PREFIX + "me", timeout=30).text
        assert "given to a user with higher priority" in page
        hub.stop_server("res1")
    finally:
        ledger.close()

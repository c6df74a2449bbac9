"""The culler end to end, on each spawner backend: a real hub runs GPUDockerSpawner (real
containers, attach mode "env", the declared lab of e2e_support) or GPUSwarmSpawner (real services
on the test Swarm, the same lab reported by node agents), and the gpulab service as a managed
service, with real time and short timeouts. No GPU reports a figure for a MIG instance here (an
A100: Ampere), so the lab counts unknown utilisation as idle
(``c.GPULabService.unknown_utilization = "idle"``, as the demo does)."""

from __future__ import annotations

import pytest
from e2e_support import PROFILES, backend_params, new_hub, require_docker
from html_support import parse_html
from hubtools import free_port, wait_for
from service_support import ledger_for, login, wait_for_service

pytestmark = pytest.mark.docker

GPU_IDLE_S = 8


def service_extra(port: int | None) -> str:
    """The culler's settings; the service too (``port``), where the hub's base has none (the
    Swarm hub runs one for its node agents)."""
    profiles = [
        {**p, "gpu_idle_timeout": f"{GPU_IDLE_S}s"} if p["slug"] == "mig" else p for p in PROFILES
    ]
    service = (
        "from jupyterhub_gpulab.hub.hubconfig import configure_service\n"
        f'configure_service(c, config_file=__file__, url="http://127.0.0.1:{port}")'
        if port
        else ""
    )
    return f"""
c.GPULab.profiles = {profiles!r}
{service}
import os
c.GPULabService.cookie_secret_file = os.path.join(os.path.dirname(__file__), "gpulab_cookie")
c.GPULabService.sample_interval = 1
c.GPULabService.cull_every = "1s"
c.GPULabService.cull_warn_before = "3s"
c.GPULabService.max_sample_gap = "10s"
c.GPULabService.unknown_utilization = "idle"
"""


@pytest.fixture(scope="module", params=backend_params())
def hub(request, tmp_path_factory):
    require_docker()
    if request.param == "swarm":
        from swarm_support import new_swarm_hub

        hub = new_swarm_hub(tmp_path_factory.mktemp("culling-swarm"), extra=service_extra(None))
    else:
        hub = new_hub(tmp_path_factory.mktemp("culling-e2e"), extra=service_extra(free_port()))
    try:
        hub.start()
        wait_for_service(hub)
        hub.create_user("student1", ["students"])
        yield hub
    finally:
        hub.close()


def test_a_real_server_over_an_idle_slice_is_warned_then_culled(hub):
    ledger = ledger_for(hub)
    try:
        r = hub.spawn("student1", {"profile": "mig"})
        assert r.status_code in (201, 202), r.text
        hub.wait_ready("student1")
        [held] = ledger.open_allocations("student1")
        session = login(hub, "student1")

        warning = wait_for(
            "a gpu-idle warning",
            lambda: [w for w in ledger.warnings("student1") if w.rule == "gpu-idle"],
            GPU_IDLE_S + 20,
            hub,
        )[0]
        home = parse_html(session.get(hub.url + "/hub/home", timeout=30).text)
        announcement = home.find("div", cls="announcement").text()
        assert "Your server will be stopped at" in announcement
        assert warning.message in announcement

        wait_for("the cull", lambda: not ledger.get(held.id).open, 30, hub)
        wait_for(
            "the end reason",
            lambda: ledger.get(held.id).end_reason == "culled:gpu-idle",
            15,
            hub,
        )
        assert hub.server("student1") is None
        assert hub.object_ids() == []  # the container (or service) was removed
        home = parse_html(session.get(hub.url + "/hub/home", timeout=30).text)
        assert "Your server was stopped" in home.find("div", cls="announcement").text()
    finally:
        ledger.close()

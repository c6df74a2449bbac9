"""The hub log of refused spawns, on a real JupyterHub with its real proxy and real containers
(GPUDockerSpawner in ``env`` attach mode, as test_spawner_e2e.py).

- Routine refusals are one INFO line each in the hub log, counted as failures in the hub's
  metrics; the spawner never touches the deprecated ``Spawner.db``.
"""

from __future__ import annotations

import html
import json
import secrets
import time

import pytest
from e2e_support import PROFILES, gpulab_config, remove_node_containers, require_docker
from hubtools import Hub
from prometheus_client.parser import text_string_to_metric_families
from test_spawner_e2e import _FormParser, login

pytestmark = pytest.mark.docker

#: The hub's test token may read metrics.
METRICS = "c.JupyterHub.authenticate_prometheus = False\n"


def lab_config(node: str, seat_slug: str = "seat") -> str:
    """The e2e lab with the T4-seat profile under ``seat_slug``; users in no group get the
    default policy (one slice at a time, every open profile). Servers outlive a hub restart."""
    profiles = [{**p, "slug": seat_slug} if p["slug"] == "seat" else p for p in PROFILES]
    return gpulab_config(
        node,
        extra=METRICS
        + "c.JupyterHub.cleanup_servers = False\nc.JupyterHub.cleanup_proxy = False\n"
        + f"c.GPULab.profiles = {profiles!r}\n"
        + 'c.GPULab.group_policies = {"researchers": {"max_slices_per_user": 3}}\n',
    )


def new_lab_hub(tmp_path, seat_slug: str = "seat") -> Hub:
    node = "gpulabtest" + secrets.token_hex(3)
    return Hub(tmp_path / node, lab_config(node, seat_slug))


@pytest.fixture
def hub_factory(tmp_path):
    require_docker()
    hubs = []

    def make(**kw):
        h = new_lab_hub(tmp_path, **kw)
        hubs.append(h)
        return h

    yield make
    for h in hubs:
        h.stop()
        remove_node_containers(h.workdir.name)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    require_docker()
    h = new_lab_hub(tmp_path_factory.mktemp("opts"))
    h.start()
    yield h
    h.stop()
    remove_node_containers(h.workdir.name)


def post_without_body(hub: Hub, user: str, name: str = ""):
    """``POST /hub/api/users/<user>/server`` with no body at all: an admin's "start"."""
    return hub.api("POST", hub.server_path(user, name))


def ready_event(hub: Hub, user: str) -> dict:
    """The progress stream's last event for a started server (its ready event)."""
    r = hub.api("GET", f"/users/{user}/server/progress")
    assert r.status_code == 200, r.text
    events = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:")]
    assert events and events[-1].get("ready"), events
    return events[-1]


def form_of(session, hub: Hub, user: str, name: str = "") -> tuple[_FormParser, str]:
    page = session.get(f"{hub.url}/hub/spawn/{user}" + (f"/{name}" if name else ""))
    assert page.status_code == 200, page.text[:500]
    p = _FormParser()
    p.feed(page.text)
    return p, html.unescape(page.text)


def spawn_failures(hub: Hub) -> dict[str, float]:
    """JupyterHub's spawn metric: failed spawns counted by reason."""
    r = hub.api("GET", "/../metrics")
    assert r.status_code == 200, r.text[:300]
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            if (
                s.name == "jupyterhub_server_spawn_duration_seconds_count"
                and s.labels.get("status") == "failure"
            ):
                counts[s.labels["reason"]] = counts.get(s.labels["reason"], 0) + s.value
    return counts


def wait_no_server(hub: Hub, user: str, seconds: float = 3) -> None:
    """No server appears for ``user`` in ``seconds`` (a spawn would show within a second)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert hub.server(user) is None, hub.server(user)
        time.sleep(0.3)


# --- the hub log ----------------------------------------------------------------------------------


def test_routine_refusals_are_one_info_line_and_counted_as_failures(hub):
    hub.create_user("finn")
    before = spawn_failures(hub).get("quota", 0)
    assert hub.spawn("finn", {"profile": "mig"}).status_code in (201, 202)
    hub.wait_ready("finn")
    start = hub.log_path.stat().st_size
    # the same quota refusal from the API, the form and a link
    assert hub.spawn("finn", {"profile": "seat"}, name="two").status_code == 429
    s = login(hub, "finn")
    p, _ = form_of(s, hub, "finn", "two")
    assert s.post(hub.url + p.action, data={"profile": "seat"}).status_code == 429
    assert s.get(f"{hub.url}/hub/spawn/finn/three?profile=seat").status_code == 429
    log = hub.log_path.read_text(errors="replace")[start:]
    assert "Traceback" not in log
    errors = [line for line in log.splitlines() if line.startswith("[E ")]
    assert errors == []
    assert log.count("SpawnRefused(reason=quota)") >= 3
    assert spawn_failures(hub).get("quota", 0) == before + 3
    hub.stop_server("finn")
    # the spawner never asked JupyterHub for its deprecated shared database session
    assert "Spawner.db is deprecated" not in hub.log_path.read_text(errors="replace")

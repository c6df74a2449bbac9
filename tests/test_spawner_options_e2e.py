"""Saved choices, the spawn form, spawn links and the hub log, on a real JupyterHub with its real
proxy and real containers (GPUDockerSpawner in ``env`` attach mode, as test_spawner_e2e.py).

- A start without options means the profile this server last started with, else the default,
  and says so when the saved one no longer applies; a refused request never becomes the saved
  choice (JupyterHub saves every start's options before the spawner sees them).
- The form and the REST API refuse the same options with the same message; a GET link must name
  its profile, so a cross-site link cannot spend anyone's slice.
- Routine refusals are one INFO line each in the hub log, counted as failures in the hub's
  metrics; the spawner never touches the deprecated ``Spawner.db``.
"""

from __future__ import annotations

import json
import time

import pytest
from e2e_support import (
    PROFILES,
    SpawnPage,
    gpulab_config,
    hub_login,
    remove_node_containers,
    require_docker,
)
from html_support import parse_html
from hubtools import Hub
from leakcheck import unique
from prometheus_client.parser import text_string_to_metric_families

from jupyterhub_gpulab.ledger import Ledger

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
    node = unique("gpulabtest")
    return Hub(tmp_path / node, lab_config(node, seat_slug))


@pytest.fixture
def hub_maker():
    """The shared ``hub_factory`` makes this module's hubs (its own profiles)."""
    return new_lab_hub


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


def form_of(session, hub: Hub, user: str, name: str = "") -> tuple[SpawnPage, str]:
    page = session.get(f"{hub.url}/hub/spawn/{user}" + (f"/{name}" if name else ""))
    assert page.status_code == 200, page.text[:500]
    p = SpawnPage(page.text)
    return p, p.text


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


# --- the saved choice -----------------------------------------------------------------------------


def test_a_renamed_saved_profile_starts_the_default_and_tells_the_user(hub_factory):
    hub = hub_factory(seat_slug="tensorflow-seat")
    hub.start()
    hub.create_user("ann")
    r = hub.spawn("ann", {"profile": "tensorflow-seat"})
    assert r.status_code in (201, 202), r.text
    assert hub.wait_ready("ann")["state"]["gpulab_profile"] == "tensorflow-seat"
    hub.stop_server("ann")
    # the admin renames the slug and restarts the hub
    hub.stop()
    hub.extra_config = lab_config(hub.workdir.name, seat_slug="tf-seat")
    hub.start()
    said = (
        "Your saved choice 'tensorflow-seat' no longer applies (there is no such profile any more)"
    )
    # the form says so before anything starts, and preselects the default
    p, page = form_of(hub_login(hub, "ann"), hub, "ann")
    assert f"{said}; pick another below." in page
    assert p.radios["mig"]["checked"]
    # an admin's start, no body: the default profile, and the user is told why
    r = post_without_body(hub, "ann")
    assert r.status_code in (201, 202), r.text
    server = hub.wait_ready("ann")
    assert server["state"]["gpulab_profile"] == "mig"
    assert server["user_options"] == {"profile": "mig"}
    ready = ready_event(hub, "ann")
    notice = f"{said}, so this server starts with the default, 'mig' (PyTorch (MIG 1g.10gb))."
    assert notice in ready["message"]
    assert notice in parse_html(ready["html_message"]).text()
    assert notice in hub.log_path.read_text()  # and the admin, in the hub log
    # a later restart keeps telling the hub (and the culler) what the server runs
    hub.stop()
    hub.start()
    assert hub.server("ann")["user_options"] == {"profile": "mig"}


def test_a_refused_request_never_becomes_the_saved_choice(hub_factory):
    hub = hub_factory()
    hub.start()
    hub.create_user("bob")
    hub.create_user("cat")
    assert hub.spawn("bob", {"profile": "seat"}).status_code in (201, 202)
    hub.wait_ready("bob")
    hub.stop_server("bob")
    for refused in ({"profile": 3}, {"profile": "cpu", "image": "busybox"}):
        for user in ("bob", "cat"):
            r = hub.spawn(user, refused)
            assert r.status_code == 400, r.text
    hub.stop()
    hub.start()  # what was saved survives a restart
    # bob's last valid profile, cat's (who never started) the default; nobody is told anything
    for user, profile in (("bob", "seat"), ("cat", "mig")):
        r = post_without_body(hub, user)
        assert r.status_code in (201, 202), r.text
        assert hub.wait_ready(user)["state"]["gpulab_profile"] == profile
        assert "saved choice" not in ready_event(hub, user)["message"]


# --- the form and links ---------------------------------------------------------------------------


def test_the_form_refuses_an_unknown_field_as_the_api_does(hub):
    hub.create_user("dave")
    bad = {"profile": "cpu", "image": "busybox"}
    before = spawn_failures(hub).get("bad-choice", 0)
    api = hub.spawn("dave", bad)
    assert api.status_code == 400
    message = api.json()["message"]
    assert message.startswith("Unknown option 'image'; the only option is 'profile'.")
    s = hub_login(hub, "dave")
    p, _ = form_of(s, hub, "dave")
    r = s.post(hub.url + p.action, data=bad)
    assert r.status_code == 400
    assert f"Error: {message}" in SpawnPage(r.text).text
    wait_no_server(hub, "dave")
    # both were refused by the spawner, and JupyterHub counted both as failed spawns
    assert spawn_failures(hub).get("bad-choice", 0) == before + 2


CROSS_SITE = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}  # fmt: skip


def test_a_cross_site_get_never_starts_a_server(hub):
    hub.create_user("erin")
    led = Ledger(f"sqlite:///{hub.workdir}/gpulab.sqlite")
    s = hub_login(hub, "erin")
    for query, says in (
        ("x=1", "A link that starts a server must name its profile (?profile=slug); this one names only 'x'."),
        ("", None),  # the form, as always
        ("profile=mig&x=1", "Unknown option 'x'; the only option is 'profile'."),
        ("opt-x=1&next=/hub/home", "A link that starts a server must name its profile"),
    ):  # fmt: skip
        r = s.get(f"{hub.url}/hub/spawn/erin?{query}", headers=CROSS_SITE, allow_redirects=False)
        assert r.status_code == (400 if says else 200), (query, r.status_code)
        if says:
            assert f"Error: {says}" in SpawnPage(r.text).text
        wait_no_server(hub, "erin", seconds=1.5)
    assert led.open_allocations(user="erin") == []
    # a link that names its profile is JupyterHub's spawn link, and starts it
    r = s.get(f"{hub.url}/hub/spawn/erin?profile=cpu", allow_redirects=False)
    assert r.status_code == 302 and "/spawn-pending/erin" in r.headers["Location"]
    assert hub.wait_ready("erin")["state"]["gpulab_profile"] == "cpu"
    hub.stop_server("erin")
    led.close()


# --- the hub log ----------------------------------------------------------------------------------


def test_routine_refusals_are_one_info_line_and_counted_as_failures(hub):
    hub.create_user("finn")
    before = spawn_failures(hub).get("quota", 0)
    assert hub.spawn("finn", {"profile": "mig"}).status_code in (201, 202)
    hub.wait_ready("finn")
    start = hub.log_path.stat().st_size
    # the same quota refusal from the API, the form and a link
    assert hub.spawn("finn", {"profile": "seat"}, name="two").status_code == 429
    s = hub_login(hub, "finn")
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

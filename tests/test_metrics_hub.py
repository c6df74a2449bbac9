"""gpulab's metrics at the hub's own ``/hub/metrics``: a real hub, a real spawn, a refusal, a stop.

The series exist at 0 before their first event (label values created up front), count what a user
did, and are served with JupyterHub's (same ``read:metrics`` scope).
"""

from __future__ import annotations

import pytest
from e2e_support import new_hub
from metrics_support import samples, value

from jupyterhub_gpulab.errors import STATUS_BY_REASON

pytestmark = pytest.mark.docker

METRICS_ROLE = """
import os
c.GPULab.dcgm_job_mapping_dir = os.path.join(os.getcwd(), "dcgm-job-map")
c.JupyterHub.load_roles.append(
    {"name": "prometheus", "scopes": ["read:metrics"], "services": ["tests"]}
)
"""


@pytest.fixture
def hub_maker():
    def make(tmp_path, **kw):
        return new_hub(tmp_path, extra=METRICS_ROLE + kw.pop("extra", ""), **kw)

    return make


def scrape(hub) -> dict:
    r = hub.api("GET", "/../metrics")
    assert r.status_code == 200, r.text
    return samples(r.text)


def test_spawns_refusals_claims_and_releases_are_counted_at_hub_metrics(hub_factory):
    hub = hub_factory().start()
    hub.create_user("ann", ["students"])
    # before any spawn: every refusal reason and the claim series are there, at 0
    m = scrape(hub)
    for reason in STATUS_BY_REASON:
        assert value(m, "gpulab_server_spawn_refused_total", reason=reason) == 0, reason
    assert value(m, "gpulab_slice_claim_duration_seconds_count", kind="mig", outcome="claimed") == 0
    # …and each configured profile's spawns, before any spawner exists (so a Prometheus that
    # scraped before the first spawn sees it in increase())
    for profile in ("mig", "cpu", "a40"):
        assert value(m, "gpulab_server_spawn_total", profile=profile, outcome="success") == 0

    assert hub.spawn("ann", {"profile": "mig"}).status_code in (201, 202)
    hub.wait_ready("ann")
    r = hub.spawn("ann", {"profile": "a40"}, name="big")  # researchers only
    assert r.status_code == 400, r.text
    r = hub.spawn("ann", {"profile": "seat"}, name="second")  # one slice per student
    assert r.status_code == 429, r.text

    m = scrape(hub)
    assert value(m, "gpulab_server_spawn_total", profile="mig", outcome="success") == 1
    assert value(m, "gpulab_server_spawn_total", profile="a40", outcome="refused") == 1
    assert value(m, "gpulab_server_spawn_total", profile="seat", outcome="refused") == 1
    # profiles nobody started yet are listed at 0
    assert value(m, "gpulab_server_spawn_total", profile="cpu", outcome="success") == 0
    assert value(m, "gpulab_server_spawn_refused_total", reason="not-entitled") == 1
    assert value(m, "gpulab_server_spawn_refused_total", reason="quota") == 1
    assert value(m, "gpulab_server_spawn_refused_total", reason="no-free-slice") == 0
    assert value(m, "gpulab_slice_claim_duration_seconds_count", kind="mig", outcome="claimed") == 1
    claim_s = value(m, "gpulab_slice_claim_duration_seconds_sum", kind="mig", outcome="claimed")
    assert 0 < claim_s < 5
    assert value(m, "gpulab_slice_release_total", reason="stopped") == 0

    hub.stop_server("ann")
    m = scrape(hub)
    assert value(m, "gpulab_slice_release_total", reason="stopped") == 1
    assert value(m, "gpulab_slice_release_total", reason="failed") == 0


def test_job_mapping_files_follow_a_real_spawn_and_stop(hub_factory):
    """dcgm-exporter's files name the holder while the server runs (the T4 seats are GPU 1, the
    A40 GPU 2 of the e2e lab) and are gone once it stopped."""
    from dcgm_support import dcgm_read

    hub = hub_factory().start()
    folder = hub.workdir / "dcgm-job-map"
    hub.create_user("ann", ["students"])
    hub.create_user("rob", ["researchers"])
    assert hub.spawn("ann", {"profile": "seat"}).status_code in (201, 202)
    assert hub.spawn("rob", {"profile": "a40"}, name="train").status_code in (201, 202)
    hub.wait_ready("ann")
    hub.wait_ready("rob", "train")
    assert dcgm_read(folder) == {"1": ["ann"], "2": ["rob/train"]}
    hub.stop_server("rob", "train")
    assert dcgm_read(folder) == {"1": ["ann"]}
    hub.stop_server("ann")
    assert dcgm_read(folder) == {}

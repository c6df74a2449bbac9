"""A real Prometheus scrapes the hub's ``/hub/metrics`` and the service's metrics with a token
(``configure_prometheus``), and sees what an admin would look for: a spawn, a refusal, a slice
held then freed. The shipped alert rules pass ``promtool check`` and their unit tests, and every
query of the shipped Grafana dashboard is valid PromQL that finds gpulab's series.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess

import pytest
import requests
from e2e_support import remove_node_containers, require_docker
from prometheus_support import REPO, RULES, Prometheus, require
from service_support import start_hub, wait_for_service

DASHBOARD = REPO / "grafana" / "gpulab-dashboard.json"
TOKEN = secrets.token_hex(16)
NODE = "gpulabprom" + secrets.token_hex(3)
EXTRA = f"""
from jupyterhub_gpulab.hub.hubconfig import configure_prometheus
configure_prometheus(c, api_token={TOKEN!r})
c.JupyterHub.spawner_class = "gpulab"
c.GPUDockerSpawner.attach_mode = "env"
c.GPULab.node_name = {NODE!r}
c.DockerSpawner.prefix = {NODE!r}
c.DockerSpawner.pull_policy = "never"
c.Spawner.start_timeout = 60
"""


def test_the_alert_rules_pass_promtool_check_and_their_unit_tests():
    promtool = require("promtool")
    check = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 9 rules found" in check.stdout
    tests = subprocess.run(
        [promtool, "test", "rules", "gpulab-alerts.test.yml"],
        cwd=RULES.parent,
        capture_output=True,
        text=True,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr


def dashboard_queries() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [t["expr"] for p in panels for t in p["targets"]]


@pytest.mark.docker
def test_prometheus_sees_a_spawn_a_refusal_and_a_slice_changing_state(tmp_path):
    require_docker()
    hub = start_hub(tmp_path / "hub", extra=EXTRA)
    prom = None
    try:
        wait_for_service(hub)
        target = hub.url.removeprefix("http://")
        prom = Prometheus(
            tmp_path / "prometheus",
            [
                ("jupyterhub", target, "/hub/metrics", TOKEN),
                ("gpulab", target, "/services/gpulab/metrics", TOKEN),
            ],
        ).start()
        prom.wait_for('up{job="jupyterhub"}', 1)
        prom.wait_for('up{job="gpulab"}', 1)
        held = 'sum(gpulab_slices{job="gpulab",kind="shared",state="held"})'
        prom.wait_for(held, 0)
        prom.wait_for('gpulab_server_spawn_refused_total{reason="not-entitled"}', 0)

        assert hub.spawn("student", {"profile": "shared-seat"}).status_code in (201, 202)
        hub.wait_ready("student")
        r = hub.spawn("student", {"profile": "a40"}, name="big")
        assert r.status_code == 400, r.text

        spawned = 'gpulab_server_spawn_total{profile="shared-seat",outcome="success"}'
        prom.wait_for(spawned, 1)
        prom.wait_for('gpulab_server_spawn_refused_total{reason="not-entitled"}', 1)
        prom.wait_for('gpulab_server_spawn_total{profile="a40",outcome="refused"}', 1)
        prom.wait_for(held, 1)
        prom.wait_for(
            'gpulab_slices{job="gpulab",kind="shared",state="held",profile="shared-seat"}', 1
        )
        hub.stop_server("student")
        prom.wait_for(held, 0)
        prom.wait_for('gpulab_slice_release_total{reason="stopped"}', 1)
        # the slice was held and is free again: Prometheus kept both
        assert prom.value(f"max_over_time({held}[5m:1s])") == 1

        # the shipped alert rules are loaded by a real Prometheus; none fires on a healthy lab
        rules = requests.get(prom.url + "/api/v1/rules", timeout=10).json()["data"]["groups"]
        assert len(rules[0]["rules"]) == 9
        firing = prom.query('ALERTS{alertstate="firing"}')
        assert firing == [], firing

        # every dashboard query is valid; each gpulab one finds series (utilisation needs NVML,
        # which this host lacks; rates need two samples of a counter that moved)
        for expr in dashboard_queries():
            result = prom.query(expr)
            if re.search(r"\bgpulab_", expr) and not re.search(r"utilization|increase|rate", expr):
                assert result, f"the dashboard's {expr!r} finds nothing"
    finally:
        if prom is not None:
            prom.stop()
        hub.stop()
        remove_node_containers(NODE)

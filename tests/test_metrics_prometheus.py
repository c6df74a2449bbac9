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
from leakcheck import unique
from prometheus_support import REPO, RULES, Prometheus, require
from service_support import real_servers, start_hub, wait_for_service

DASHBOARD = REPO / "grafana" / "gpulab-dashboard.json"
TOKEN = secrets.token_hex(16)
NODE = unique("gpulabprom")
EXTRA = f"""
from jupyterhub_gpulab.hub.hubconfig import configure_prometheus
configure_prometheus(c, api_token={TOKEN!r})
""" + real_servers(NODE)


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


#: Grafana's built-in panel types (grafana/public/app/plugins/panel)
GRAFANA_PANELS = {"timeseries", "bargauge", "stat", "gauge", "table", "barchart", "text",
                  "heatmap", "piechart", "state-timeline", "status-history", "histogram"}  # fmt: skip


def test_the_dashboard_is_an_importable_grafana_dashboard():
    """What Grafana's import needs: the data source asked for (``__inputs``) and used by every
    panel and query, unique panel ids and per-panel refIds, built-in panel types, and a grid of
    24 columns whose panels do not overlap."""
    d = json.loads(DASHBOARD.read_text())
    [ds] = d["__inputs"]
    assert ds["type"] == "datasource" and ds["pluginId"] == "prometheus"
    uid = "${" + ds["name"] + "}"
    assert d["uid"] and d["title"] and isinstance(d["schemaVersion"], int)
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in d["panels"]:
        assert p["type"] in GRAFANA_PANELS, p["type"]
        assert p["datasource"] == {"type": "prometheus", "uid": uid}, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]
        assert all(t["datasource"]["uid"] == uid and t["expr"] for t in p["targets"])
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine


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

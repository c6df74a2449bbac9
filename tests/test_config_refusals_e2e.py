"""A configuration gpulab refuses is said, not crashed on: a real hub per refused kind.

The spawner refuses some of its settings when it loads them (``c.DockerSpawner.remove = False``,
the hardening's, an unknown ``attach_mode``), and the lab refuses bad ``c.GPULab`` values. The
hub built a spawner for each request that touches a server, so each of them was a bare HTTP 500
"Internal Server Error" with a traceback at ERROR. Now every page still works, every spawn is
refused with a JSON ``{"status", "message"}`` naming the setting, and the hub's log has the
message ``gpulab check-config`` prints for it, at ERROR, without a traceback.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from e2e_support import gpulab_config, require_docker
from hubtools import Hub

pytestmark = pytest.mark.docker

GPULAB = str(Path(sys.executable).with_name("gpulab"))

#: (setting line, the name the user is told, what check-config and the hub log say)
KINDS = [
    pytest.param(
        "c.DockerSpawner.remove = False",
        "c.DockerSpawner.remove",
        "remove = False is refused",
        id="remove-false",
    ),
    pytest.param(
        "c.GPUDockerSpawner.pids_limit = 0",
        "c.GPUDockerSpawner.pids_limit",
        "c.GPUDockerSpawner.pids_limit 0 is no limit",
        id="pids-limit",
    ),
    pytest.param(
        'c.GPUDockerSpawner.cap_add = ["SYS_ADMIN"]',
        "c.GPUDockerSpawner.cap_add",
        "c.GPUDockerSpawner.cap_add 'SYS_ADMIN' is refused",
        id="cap-add",
    ),
    pytest.param(
        'c.DockerSpawner.extra_host_config = {"privileged": True}',
        "c.DockerSpawner.extra_host_config",
        "c.DockerSpawner.extra_host_config['privileged'] is refused",
        id="extra-host-config",
    ),
    pytest.param(
        'c.GPUDockerSpawner.attach_mode = "nvidia"',
        "c.GPUDockerSpawner.attach_mode",
        "c.GPUDockerSpawner.attach_mode 'nvidia'",
        id="attach-mode",
    ),
    pytest.param(
        'c.GPULab.group_policies = ["students"]',
        None,
        "The 'group_policies' trait of a GPULab instance expected a dict",
        id="gpulab-trait",
    ),
]


@pytest.mark.parametrize(("line", "named", "says"), KINDS)
def test_a_refused_setting_refuses_every_spawn_saying_why(tmp_path, line, named, says):
    require_docker()
    node = "gpulabtest" + secrets.token_hex(3)
    hub = Hub(tmp_path / node, gpulab_config(node, extra=line + "\n"))
    hub.start()
    try:
        # gpulab check-config, as the admin runs it: exit 1 with the message
        r = subprocess.run(
            [GPULAB, "check-config", "-f", str(hub.config_path)], capture_output=True, text=True
        )
        assert r.returncode == 1 and says in r.stderr, r.stdout + r.stderr
        # the spawn page a login lands on says why; the other pages still answer
        ann = requests.Session()
        ann.get(f"{hub.url}/hub/login")
        page = ann.post(
            f"{hub.url}/hub/login",
            data={"username": "ann", "password": "x", "_xsrf": ann.cookies.get("_xsrf")},
        )
        assert page.url.endswith("/hub/spawn"), page.url
        assert page.status_code == 500 and "The GPU lab is misconfigured" in page.text
        assert "Traceback" not in page.text and (named is None or named in page.text)
        assert ann.get(f"{hub.url}/hub/home").status_code == 200
        for _attempt in range(2):  # every spawn, not only the first
            r = hub.spawn("ann", {"profile": "cpu"})
            assert r.status_code == 500, r.text
            body = r.json()
            assert body["status"] == 500 and "misconfigured" in body["message"], body
            if named:
                assert named in body["message"], body
            assert hub.server("ann") is None
        log = hub.log_tail(400)
        lines = [ln for ln in log.splitlines() if says in ln]
        assert lines, log
        assert any(ln.startswith("[E ") for ln in log.splitlines() if "gpulab" in ln), log
        assert "Traceback" not in log, log
    finally:
        hub.stop()

"""The idle rule asks a server for busy kernels before stopping it: a busy kernel saves it.

Stood in: the single-user server. The test image (``images/build-singleuser.sh`` without
JupyterLab) has no ipykernel, so a real server there has no kernel to be busy; the image with
JupyterLab would add ~130 MB and a build to every CI run for this one test. So the hub's
``SimpleLocalProcessSpawner`` runs ``standin_singleuser.py``, which answers ``…/api/kernels``
with what the test writes to its home. Everything else is real: the hub, its proxy, the
service's request through the proxy with its own token (``access:servers``), the culler's pass.
Real servers and their spawner: test_service_culling.py.
"""

from __future__ import annotations

import json
import secrets
from datetime import datetime, timezone
from pathlib import Path

import pytest
from clock_support import MINUTE
from culling_support import lab_config, rules, running, step
from fake_nvml import FakeNVML
from inprocess_support import InProcessService, inprocess_service_hub

STANDIN = Path(__file__).with_name("standin_singleuser.py")


@pytest.fixture(scope="module")
def token():
    return secrets.token_hex(16)


@pytest.fixture(scope="module")
def hub(tmp_path_factory, token):
    workdir = tmp_path_factory.mktemp("kernels-hub")
    home = workdir / "home"
    spawner = f"""
import sys
c.JupyterHub.spawner_class = "simple"
c.Spawner.cmd = [sys.executable, {str(STANDIN)!r}]
c.SimpleLocalProcessSpawner.home_dir_template = {str(home) + "/{username}"!r}
c.GPULab.node_name = "kernels-{secrets.token_hex(3)}"
"""
    today = datetime.now(timezone.utc).date()
    with inprocess_service_hub(
        workdir, token, extra=lab_config(today) + spawner,
        users={"eve": ["students"], "fay": ["students"]},
        nvml=FakeNVML.mixed_lab(), proxy_url=True,
    ) as hub:  # fmt: skip
        hub.home = home
        yield hub


# ``at`` (conftest.py) moves this process's clock only: this hub's gpulab keeps real time (no
# server holds a GPU)


@pytest.fixture
def svc(hub, token, at, ledger):
    svc = InProcessService(hub, token, nvml=FakeNVML.mixed_lab()).start()
    yield svc
    svc.stop()
    hub.stop_all_servers()


def test_only_a_busy_kernel_saves_a_server_from_the_idle_rule(hub, svc, at, ledger):
    """CPU servers (no slice) with their tabs closed: the idle rule. Before stopping one the
    culler asks it for its kernels (this hub grants the service access:servers)."""
    for user in ("eve", "fay"):
        r = hub.spawn(user)
        assert r.status_code in (201, 202), r.text
        hub.wait_ready(user, timeout=30)
    busy = hub.home / "fay" / "kernels.json"
    busy.write_text(json.dumps([{"id": "k1", "name": "python3", "execution_state": "busy"}]))
    try:
        for _ in range(19):
            step(svc, hub, at, MINUTE)  # 19 minutes (the hub's clock started a few seconds late)
        assert rules(ledger, "eve") == rules(ledger, "fay") == {"idle"}

        step(svc, hub, at, 2 * MINUTE)

        assert not running(hub, "eve") and rules(ledger, "eve") == {"culled:idle"}
        assert running(hub, "fay") and rules(ledger, "fay") == set()  # warning withdrawn
    finally:
        busy.unlink()

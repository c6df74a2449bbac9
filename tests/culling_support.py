"""Helpers for the culler's hub tests (test_service_culling.py and its stand-in kernel test):
the lab, a clock the test moves, and a step that samples and runs one culler pass.

Time: the service runs in the test process, where ``jupyterhub_gpulab.clock.utcnow`` is
monkeypatched; the hub's gpulab code (the spawner's claims and releases, budgets, the home-page
announcement) runs in the hub process, which reads the same frozen time from a file the test
writes (the ``at`` fixture of ``conftest.py`` with ``clock_file``; ``hub_fakes.py`` installs the
reader from the hub's config).
JupyterHub's own times (``last_activity``, a server's ``started``) stay real: the tests post
activity at their moved time, and the hub keeps the newest.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

from html_support import parse_html

TESTS = Path(__file__).resolve().parent
IMAGE = os.environ.get("GPULAB_TEST_IMAGE", "gpulab/singleuser:6.1.1")
LIMITS = {"gpu_idle_timeout": "10m", "idle_timeout": "15m", "max_age": "30m"}


def profiles(image: str = IMAGE) -> list[dict]:
    return [
        {"slug": "cpu", "display_name": "CPU", "image": image, "default": True,
         "idle_timeout": "20m"},
        {"slug": "a40", "display_name": "A40", "image": image,
         "slice": {"kind": "gpu", "model": "A40"}, **LIMITS},
        {"slug": "p40", "display_name": "P40", "image": image,
         "slice": {"kind": "gpu", "model": "P40"}, **LIMITS},
        # any whole GPU (the mixed lab has three): the demand-aware GPU-idle rule's test
        {"slug": "anygpu", "display_name": "Any GPU", "image": image,
         "slice": {"kind": "gpu"}, **LIMITS},
    ]  # fmt: skip


POLICIES = {
    "students": {"max_slices_per_user": 3},
    "researchers": {"max_slices_per_user": 3},
    # 12 minutes of a whole GPU per term
    "capped": {"gpu_hours": 0.2, "period": "term", "max_slices_per_user": 1},
}


def lab_config(today, *, image: str = IMAGE) -> str:
    """The gpulab and culler part of the hub's config (the spawner is the caller's)."""
    return f"""
c.GPULab.inventory = []
c.GPULab.inventory_source = "nvml"
c.GPULab.profiles = {profiles(image)!r}
c.GPULab.group_policies = {POLICIES!r}
c.GPULab.term_start = "{today - timedelta(days=30)}"
c.GPULab.term_end = "{today + timedelta(days=30)}"
c.GPULabService.cull_every = "1h"   # the tests run each pass themselves
c.GPULabService.cull_warn_before = "2m"
c.GPULabService.max_sample_gap = "5m"
# the service may stop students' and capped users' servers, not researchers': a researcher's
# stop fails as a refused hub request does. It may ask servers for their kernels.
for role in c.JupyterHub.load_roles:
    if role["name"] == "gpulab-service":
        role["scopes"] = [s for s in role["scopes"] if s != "admin:servers"] + [
            "admin:servers!group=students", "admin:servers!group=capped", "access:servers"]
"""


# -- running the culler -----------------------------------------------------------------------


def step(svc, hub, at, seconds: float, *, tabs=(), culler=None):
    """``seconds`` pass (``at``: the ``conftest.py`` clock); the servers in ``tabs`` (``(user, name)``) have an open tab, whose
    activity the hub records; the service samples the GPUs and runs one culler pass (the
    service's, or ``culler``: one built with other settings on the service's state and hub)."""
    at.move(seconds)
    stamp = at.now.isoformat().replace("+00:00", "Z")
    for user, name in tabs:
        r = hub.api(
            "POST",
            f"/users/{user}/activity",
            json={"last_activity": stamp, "servers": {name: {"last_activity": stamp}}},
        )
        assert r.status_code == 200, r.text
    svc.call(svc.service.sample)
    return svc.call((culler or svc.service.culler).run_pass)


def running(hub, user: str, name: str = "") -> bool:
    server = hub.server(user, name)
    return bool(server and server.get("ready"))


def rules(ledger, user: str, name: str = "") -> set[str]:
    return {w.rule for w in ledger.warnings(user) if w.server_name == name}


def home_announcement(session, hub) -> str:
    page = parse_html(session.get(hub.url + "/hub/home", timeout=30).text)
    found = page.find_all("div", cls="announcement")
    return found[0].text() if found else ""


def eventually(check, what: str, timeout: float = 30):
    """``check()``'s first truthy result within ``timeout`` seconds (a stop the hub finishes
    after answering 202 ends the allocation a moment later)."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found or time.monotonic() > deadline:
            assert found, f"{what} within {timeout}s"
            return found
        time.sleep(0.2)

"""Refusals stay fast while the engine is busy: a real hub, real containers, a slow `docker stop`.

DockerSpawner runs every engine call on one shared thread. A refused spawn made no container, so it
must not wait in that queue behind other servers' creates, starts and stops (issue 8.8).
"""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
from e2e_support import slow_stop_hub
from hubtools import wait_for

from jupyterhub_gpulab.ledger import Ledger

pytestmark = pytest.mark.docker

#: jupyterhub-singleuser ignores SIGWINCH, so `docker stop` waits the whole stop timeout.
SLOW_STOP = 'c.DockerSpawner.extra_create_kwargs = {"stop_signal": "SIGWINCH", "stop_timeout": 30}'


@pytest.fixture
def hub(tmp_path):
    with slow_stop_hub(tmp_path, SLOW_STOP) as h:
        yield h


def test_a_refusal_does_not_wait_for_another_servers_slow_stop(hub):
    for u in ("ann", "bob", "cat"):
        hub.create_user(u, ["students"])
    names = {}
    for u in ("ann", "bob"):  # both 1g.10gb MIG slices are now held
        assert hub.spawn(u, {"profile": "mig"}).status_code in (201, 202)
        names[u] = hub.wait_ready(u)["state"]["object_name"]
    # ann's stop holds the engine thread for up to 30 s (her slice stays held until it ends)
    stopper = threading.Thread(target=hub.api, args=("DELETE", hub.server_path("ann")))
    stopper.start()
    try:
        stopping = f"Stopping container {names['ann']}"
        wait_for(
            f"{stopping!r} in the hub log",
            lambda: stopping in hub.log_path.read_text(errors="replace"),
            30,
            hub,
            every=0.1,
        )
        time.sleep(0.5)
        t0 = time.monotonic()
        r = hub.spawn("cat", {"profile": "mig"})
        elapsed = time.monotonic() - t0
        assert r.status_code == 503, r.text
        assert "No free MIG 1g.10gb slice (0 of 2 free)" in r.json()["message"]
        assert elapsed < 3.0, f"the refusal took {elapsed:.1f} s behind a docker stop"
        assert hub.server("cat") is None
    finally:
        subprocess.run(["docker", "kill", names["ann"]], capture_output=True)
        stopper.join(60)
    # the stop still ended cleanly: ann's slice is free again, bob's is still his
    deadline = time.monotonic() + 30
    while hub.server("ann") is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    led = Ledger(f"sqlite:///{hub.workdir}/gpulab.sqlite")
    try:
        assert [a.user for a in led.open_allocations()] == ["bob"]
    finally:
        led.close()

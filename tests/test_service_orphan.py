"""A hub killed with SIGKILL leaves its managed gpulab service running (JupyterHub starts it in a
session of its own) on the service's port. The service must notice that its hub is gone and
exit, so that the restarted hub's service listens there instead of crash-looping on "Address
already in use". A real hub, its real proxy, the real service process."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
from service_support import login, make_hub, service_pid, start_hub, wait_for_service


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie waiting for its new parent to reap it does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def hubs():
    started, pids = [], []
    yield started, pids
    for hub in started:
        hub.stop()
    for pid in pids:  # services this test's hubs started, if one outlived its hub
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_killed_hubs_service_exits_and_the_restarted_hubs_service_answers(tmp_path, hubs):
    started, pids = hubs
    hub = start_hub(tmp_path)
    started.append(hub)
    wait_for_service(hub)
    old = service_pid(hub)
    pids.append(old)

    hub.kill()  # the hub alone: its proxy and its service keep running
    t0 = time.monotonic()
    exited_after: list[float] = []

    def watch():
        while alive(old) and time.monotonic() - t0 < 30:
            time.sleep(0.05)
        exited_after.append(time.monotonic() - t0)

    watcher = threading.Thread(target=watch)
    watcher.start()
    hub.start()  # at once, as systemd's Restart=always would
    restarted_at = hub.log_path.read_text(errors="replace").count("Starting service 'gpulab'")
    watcher.join()
    assert not alive(old), "the killed hub's service still runs"
    print(f"the orphaned service exited {exited_after[0]:.2f} s after its hub was killed")
    assert exited_after[0] < 5

    wait_for_service(hub)
    new = service_pid(hub)
    pids.append(new)
    assert new != old
    # the service that answers is the restarted hub's: its OAuth works for a user
    r = login(hub, "student").get(hub.url + "/services/gpulab/me", timeout=30)
    assert r.status_code == 200
    # ... and it started once, without crash-looping on the port
    log = hub.log_path.read_text(errors="replace")
    assert log.count("Starting service 'gpulab'") == restarted_at
    assert "Service gpulab exited with status" not in log


def test_a_service_whose_port_is_still_held_waits_for_it_instead_of_crash_looping(tmp_path, hubs):
    """A hub restarted before its predecessor's service let go of the port: the new service
    waits for the port (c.GPULabService.listen_timeout) rather than exit and be restarted."""
    started, pids = hubs
    hub = make_hub(tmp_path)
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", hub.service_port))
    holder.listen()
    message = f"Port {hub.service_port} is in use"

    def let_go_once_seen():  # JupyterHub waits for its services as it starts
        deadline = time.monotonic() + 60  # a slow start under load must not free it early
        while time.monotonic() < deadline:
            if hub.log_path.exists() and message in hub.log_path.read_text(errors="replace"):
                break
            time.sleep(0.2)
        time.sleep(1)  # the service waits a while longer, then binds
        holder.close()

    threading.Thread(target=let_go_once_seen, daemon=True).start()
    start_hub(tmp_path, hub=hub)
    started.append(hub)
    pids.append(service_pid(hub))
    wait_for_service(hub)
    log = hub.log_path.read_text(errors="replace")
    assert message in log
    assert "Service gpulab exited with status" not in log
    assert log.count("Starting service 'gpulab'") == 1

"""The service's listings of the hub's active users (hubapi/client.py) on a real hub: callers
asking at the same moment share one listing, and a later call lists again."""

from __future__ import annotations

import asyncio
import time

from hubtools import Hub

from jupyterhub_gpulab.hubapi.client import HubClient


def listings(hub: Hub, at_least: int) -> int:
    """How many pages of active users the hub has answered (its request log, which it writes
    just after the answer): waits until ``at_least``, then a moment for any more."""
    deadline = time.monotonic() + 10
    while True:
        lines = hub.log_path.read_text(errors="replace").splitlines()
        n = sum("GET /hub/api/users?state=" in line for line in lines)
        if n >= at_least or time.monotonic() > deadline:
            time.sleep(0.5)
            lines = hub.log_path.read_text(errors="replace").splitlines()
            return sum("GET /hub/api/users?state=" in line for line in lines)
        time.sleep(0.05)


async def test_the_culler_and_the_refresh_asking_at_once_share_one_listing(tmp_path):
    # every minute the culler's pass and the service's refresh fell on the same second, each
    # listing every active user a page of 200 at a time on the hub's one event loop (0.1-0.2 s
    # a page at 1,000 users during a storm of starts: benchmarks/scale.py)
    hub = Hub(tmp_path / "hub", "").start()
    try:
        client = HubClient(hub.url + "/hub/api/", hub.token)
        active, users = await asyncio.gather(client.refresh_active(), client.active_users())
        assert (active, users) == ({}, [])
        assert listings(hub, 1) == 1
        assert client.active == {} and client.active_at is not None
        await client.active_users()  # nothing is kept once answered: a later call asks again
        assert listings(hub, 2) == 2
    finally:
        hub.stop()

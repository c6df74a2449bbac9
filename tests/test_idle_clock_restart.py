"""What the README's Quick start promises about the GPU-idle clock ("stops every GPU server 20
minutes after its start") holds only while the gpulab service watches: its samples live in
memory, so after a hub restart (which restarts the hub-managed service) the clock of every
running server starts again. The README says so next to the promise, and the culler does
exactly that (engine-free: the culler's own rules on the samples a restarted service has)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

from jupyterhub_gpulab.fairuse.culler import Limits, Server, Settings, gpu_idle_since
from jupyterhub_gpulab.inventory.model import Utilization

README = Path(__file__).resolve().parents[1] / "README.md"
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)


def test_the_quick_starts_promise_says_a_hub_restart_restarts_the_clock():
    text = " ".join(README.read_text().split())
    promise = text.index("20 minutes after its start")
    nearby = text[promise : promise + 600]
    assert re.search(r"hub restart restarts the service, and every running server's clock", nearby)


def test_after_a_restart_the_clock_counts_from_the_first_sample_the_service_took():
    server_started = T0
    restarted = T0 + timedelta(minutes=15)  # the service came back; its history is empty
    samples = [Utilization(0.0, 2**30, at=restarted + timedelta(seconds=10 * i)) for i in range(30)]
    server = Server(
        user="ann", name="", profile="seat", started_at=server_started,
        limits=Limits(gpu_idle_timeout=20 * 60), has_gpu=True, samples=samples,
    )  # fmt: skip
    now = samples[-1].at
    # idle since the service's first look, not since the server's start 15 minutes earlier
    assert gpu_idle_since(server, now, Settings(threshold_percent=5.0)) == restarted

"""What the README's Quick start promises about the GPU-idle clock ("stops every GPU server 20
minutes after its start") across a hub restart: the service's samples live in memory, but the
clock is kept in the ledger, so it continues. The README says so next to the promise; without a
stored clock the culler counts from its first sample (engine-free: the culler's own rules on the
samples a restarted service has). The stored clock itself is tested in test_idle_clock_kept.py
and, through a real hub and service, in test_service_culling.py."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

from jupyterhub_gpulab.fairuse.culler import Limits, Server, Settings, gpu_idle_since
from jupyterhub_gpulab.inventory.model import Utilization

README = Path(__file__).resolve().parents[1] / "README.md"
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)


def test_the_quick_starts_promise_says_the_clock_survives_a_hub_restart():
    text = " ".join(README.read_text().split())
    promise = text.index("20 minutes after its start")
    nearby = text[promise : promise + 600]
    assert re.search(r"every running server's clock continues", nearby)


def test_without_a_stored_clock_a_restart_counts_from_the_first_sample_the_service_took():
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

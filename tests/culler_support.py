"""The culler's pure tests' clock and servers (``test_fairuse_culler.py``,
``test_fairuse_spare.py``): one-minute passes from :data:`T0`, a utilisation sample every 10 s
(the service's defaults)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from jupyterhub_gpulab.fairuse.culler import Limits, Server, Settings
from jupyterhub_gpulab.inventory.model import Utilization

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
MIN = timedelta(minutes=1)
STUDENT = Limits(idle_timeout=2 * 3600, gpu_idle_timeout=30 * 60, max_age=8 * 3600)
SETTINGS = Settings(threshold_percent=5.0, warn_before_s=600)


def samples(until: datetime, gpu_at, start: datetime = T0, every_s: int = 10) -> list[Utilization]:
    """One sample every ``every_s`` from ``start`` to ``until``; ``gpu_at(t)`` gives the percent."""
    out, t = [], start
    while t <= until:
        out.append(Utilization(gpu_at(t), 2**30, at=t))
        t += timedelta(seconds=every_s)
    return out


def gpu_server(now, gpu_at, last_activity, name="", limits=STUDENT, **kw) -> Server:
    return Server(
        user="alice",
        name=name,
        profile="pytorch-1g",
        started_at=T0,
        limits=limits,
        last_activity=last_activity(now) if callable(last_activity) else last_activity,
        has_gpu=True,
        samples=samples(now, gpu_at),
        **kw,
    )

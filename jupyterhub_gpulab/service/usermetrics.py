"""The service's per-user Prometheus series (``c.GPULabService.metrics_user_labels``): user names
become label values, so they are apart from the lab-wide series of :mod:`.metrics`, which
registers this collector only when an admin opts in."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from .. import clock
from ..fairuse.quota import period_window
from ..ledger.census import gpu_seconds_by_group
from .state import LabState

__all__ = ["UserCollector"]


class UserCollector:
    """Per-user series, only with ``c.GPULabService.metrics_user_labels`` (user names become
    label values: one series per open allocation and per user active this week):

    - ``gpulab_slice_holder_info{node, slice, user, server, profile}`` 1 for each held slice
      (join it with ``gpulab_slice_utilization_percent`` ``on (slice)`` for a holder's
      utilisation);
    - ``gpulab_user_used_gpu_seconds{user, period="week"}``: weighted GPU-seconds this week.
    """

    def __init__(self, state: LabState):
        self.state = state

    def collect(self) -> Iterator[Metric]:
        state, now = self.state, clock.utcnow()
        info = GaugeMetricFamily(
            "gpulab_slice_holder_info",
            "1 for each held slice, naming its holder (metrics_user_labels)",
            labels=["node", "slice", "user", "server", "profile"],
        )
        for a in state.ledger.open_allocations():
            info.add_metric([a.node, a.slice_id, a.user, a.server_name or "", a.profile or ""], 1)
        yield info
        start, end = period_window("week", now, tz=state.lab.tz)
        used = GaugeMetricFamily(
            "gpulab_user_used_gpu_seconds",
            "Weighted GPU-seconds each user used in this period (metrics_user_labels)",
            labels=["user", "period"],
        )
        for user, s in sorted(
            gpu_seconds_by_group(state.ledger, start, end, now, by="user").items()
        ):
            used.add_metric([user, "week"], s)
        yield used

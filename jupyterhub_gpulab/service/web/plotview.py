"""The figures the pages plot (:mod:`.charts`) with their table fallbacks: each device's
utilisation over the sampler's history (a line per slice), GPU-hours per group per week, and a
user's GPU-hours against their budget with their slices' recent utilisation.

Blocking where it reads the ledger (:func:`weekly_gpu_hours`): call through ``aio.call``.
Utilisation comes from the service's sampler (``LabState.history``), never a new NVML read.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ... import clock
from ...clock import midnight_utc
from ...fairuse.quota import period_window
from ...inventory import SliceKind
from ...inventory.model import Slice
from ...ledger.census import gpu_seconds_per_period
from ..state import LabState
from .charts import Series, bar_chart, line_chart

#: The most points one line holds (the sampler keeps up to span / interval samples).
MAX_POINTS = 180
#: Weeks of GPU-hours on the admin page, this one included.
WEEKS = 4
NO_GROUP = "(no group)"


def slice_label(s: Slice) -> str:
    """A short name for a slice on its device's chart: ``whole GPU``, ``1g.10gb #2``, ``seat 3``."""
    if s.kind is SliceKind.MIG:
        return f"{s.mig_profile} #{s.rank % 1000 + 1}"
    if s.kind is SliceKind.SHARED:
        return f"seat {(s.seat or 0) + 1}"
    return "whole GPU"


def _series(state: LabState, s: Slice, label: str, since: datetime) -> Series:
    samples = [u for u in state.history(s.id) if u.at is not None and u.at >= since]
    step = max(1, -(-len(samples) // MAX_POINTS))
    kept = samples[::step]
    if samples and kept[-1] is not samples[-1]:
        kept.append(samples[-1])  # the last point is the latest sample, as the API shows it
    return Series(label, tuple((u.at.timestamp(), u.gpu_percent) for u in kept))


def _rows(series: list[Series]) -> list[dict]:
    rows = []
    for s in series:
        known = [y for _, y in s.points if y is not None]
        rows.append(
            {
                "label": s.label,
                "last": s.last,
                "mean": sum(known) / len(known) if known else None,
                "max": max(known) if known else None,
                "samples": len(known),
            }
        )
    return rows


def _times(state: LabState, now: datetime, span_s: float) -> tuple[tuple[float, float], tuple]:
    start = now - timedelta(seconds=span_s)
    tz = state.lab.tz
    fmt = "%H:%M" if span_s <= 86400 else "%d %b %H:%M"
    return (start.timestamp(), now.timestamp()), (
        start.astimezone(tz).strftime(fmt),
        now.astimezone(tz).strftime(fmt) + " (now)",
    )


def device_charts(
    state: LabState, span_s: float, only: set[str] | None = None, *, empty: bool = True
) -> list[dict]:
    """Per device of the inventory (only the GPU UUIDs in ``only`` when given: the admin page's
    window of devices): ``{"uuid", "title", "svg", "rows"}``, ``rows`` one per slice
    (``label``, ``last``, ``mean``, ``max`` percent, ``samples``). Without ``empty``, a device
    with no figure in the span has none (an empty chart and table are 3 kB of nothing)."""
    now = clock.utcnow()
    x_range, x_labels = _times(state, now, span_s)
    since = now - timedelta(seconds=span_s)
    by_device: dict[str, list[Slice]] = {}
    inventories = state.node_inventories()
    several = len(inventories) > 1
    for inv in inventories.values():
        for s in inv.slices:
            if only is None or s.device_uuid in only:
                by_device.setdefault(s.device_uuid, []).append(s)
    charts = []
    for node, inv in sorted(inventories.items()):
        for d in inv.devices:
            if only is not None and d.uuid not in only:
                continue
            chart = _device_chart(state, d, by_device, since, span_s, x_range, x_labels,
                                  node if several else None, empty)  # fmt: skip
            if chart is not None:
                charts.append(chart)
    return charts


def _device_chart(
    state, d, by_device, since, span_s, x_range, x_labels, node, empty
) -> dict | None:
    series = [_series(state, s, slice_label(s), since) for s in by_device.get(d.uuid, [])]
    if not empty and not any(y is not None for s in series for _, y in s.points):
        return None
    where = f"{node}: " if node else ""
    title = (
        f"{where}{d.describe()}: utilisation over the last {span_s / 3600:g} h, a line per slice"
    )
    return {
        "uuid": d.uuid,
        "title": title,
        "svg": line_chart(series, title=title, x_range=x_range, x_labels=x_labels),
        "rows": _rows(series),
    }


def weekly_gpu_hours(state: LabState, weeks: int = WEEKS) -> dict:
    """GPU-hours charged to each group in each of the last ``weeks`` calendar weeks (this one
    included, in ``quota_timezone``): ``{"weeks": [{"start_date", "end_date"}], "groups",
    "hours": {(start_date, group): h}, "svg"}`` (blocking: reads the ledger)."""
    now, tz = clock.utcnow(), state.lab.tz
    this_start, _ = period_window("week", now, tz=tz)
    first_day = this_start.astimezone(tz).date()
    days = [first_day - timedelta(days=7 * k) for k in reversed(range(weeks))]
    periods = [(midnight_utc(day, tz), midnight_utc(day + timedelta(days=7), tz)) for day in days]
    per_week = gpu_seconds_per_period(state.ledger, periods, now)
    hours: dict[tuple[str, str], float] = {}
    groups: set[str] = set()
    weeks_view = []
    for day, by_group in zip(days, per_week):
        weeks_view.append(
            {"start_date": day.isoformat(), "end_date": (day + timedelta(7)).isoformat()}
        )
        for group, seconds in by_group.items():
            if seconds <= 0:
                continue
            name = group or NO_GROUP
            groups.add(name)
            hours[(day.isoformat(), name)] = round(seconds / 3600.0, 4)
    ordered = sorted(groups, key=lambda g: (g == NO_GROUP, g))
    title = f"GPU-hours per group, each of the last {weeks} weeks (week starting)"
    svg = bar_chart(
        [w["start_date"] for w in weeks_view], ordered, hours, title=title, chart_id="weekly-hours"
    )
    return {"weeks": weeks_view, "groups": ordered, "hours": hours, "title": title, "svg": svg}


def user_charts(state: LabState, data: dict, span_s: float) -> dict:
    """The user page's charts from its data (:func:`~.data.user_data`): ``budget`` (GPU-hours
    used in the period against the budget, if any) and ``utilisation`` (their slices' recent
    samples, a line per slice; ``None`` without slices)."""
    gh = data["gpu_hours"]
    limit = gh["budget"]["limit_hours"] if gh["budget"] else None
    period = "this budget period" if gh["budget"] else "this week"
    title = f"My GPU-hours {period}" + (f" against my budget of {limit:g} h" if limit else "")
    budget = {
        "title": title,
        "used": gh["used_hours"],
        "limit": limit,
        "svg": bar_chart(
            [period],
            ["used"],
            {(period, "used"): gh["used_hours"]},
            title=title,
            limit=limit,
            chart_id="my-hours",
            height=180,
        ),
    }
    mine = {s["slice_id"]: s for s in data.get("slices", [])}
    by_id = {s.id: s for inv in state.node_inventories().values() for s in inv.slices}
    held = [by_id[sid] for sid in mine if sid in by_id]
    if not held:
        return {"budget": budget, "utilisation": None}
    now = clock.utcnow()
    x_range, x_labels = _times(state, now, span_s)
    since = now - timedelta(seconds=span_s)
    series = [
        _series(state, s, f"{mine[s.id]['server_name'] or 'default'}: {slice_label(s)}", since)
        for s in held
    ]
    title = f"My slices' utilisation over the last {span_s / 3600:g} h"
    return {
        "budget": budget,
        "utilisation": {
            "title": title,
            "svg": line_chart(series, title=title, x_range=x_range, x_labels=x_labels),
            "rows": _rows(series),
        },
    }

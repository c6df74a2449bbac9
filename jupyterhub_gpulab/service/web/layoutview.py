"""The MIG layout schedule as the admin page and the inventory API show it: the schedule itself
(``c.GPULab.mig_schedule``) and, on each scheduled GPU, its current and next layout with the
time of the change (:func:`~..layouts.decisions`, the pass's own decisions)."""

from __future__ import annotations

from datetime import datetime

from ...inventory.layoutschedule import LayoutSchedule
from ...ledger import aio
from ..layouts import decisions
from ..state import LabState


def schedule_view(schedule: LayoutSchedule) -> list[dict]:
    """Each entry: ``gpus`` (``"all"`` or UUIDs), both layouts, ``class_windows`` (as
    ``"class window mon,wed 08:00–18:00"``), ``follow_bookings``, ``drain_lead_s`` (seconds)."""
    return [
        {
            "gpus": "all" if e.gpus is None else list(e.gpus),
            "class_layout": e.class_text,
            "research_layout": e.research_text,
            "class_windows": [w.describe() for w in e.windows],
            "follow_bookings": e.follow_bookings,
            "drain_lead_s": e.drain_lead_s,
        }
        for e in schedule.entries
    ]


async def add_layouts(state: LabState, inventory: dict, now: datetime | None = None) -> None:
    """Put ``mig_schedule`` (:func:`schedule_view`) on ``inventory`` (an
    :func:`~.views.inventory_view`) and a ``layout_plan`` on each of its devices: ``None`` for a GPU
    the schedule does not cover, else ``current``, ``target``, ``phase`` (class/research),
    ``why``, ``next_layout``, ``next_change_at``, ``next_why``, ``drain``, ``relay_due``,
    ``holders_by`` (times ISO 8601, UTC)."""
    found = await aio.call(decisions, state, now)
    by_uuid = {d.uuid: {k: v for k, v in d.to_dict().items() if k != "uuid"} for d, _, _ in found}
    inventory["mig_schedule"] = schedule_view(state.lab.schedule)
    for node in inventory.get("nodes", ()):
        for dev in node.get("devices", ()):
            dev["layout_plan"] = by_uuid.get(dev["uuid"])

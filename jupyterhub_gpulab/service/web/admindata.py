"""What the admin page (``GET /services/gpulab/``) reads, at the cost of what it shows: a lab of
1,300 GPUs, 15,000 slices and 10,000 open allocations is not read whole on every view.

- the Devices section: one window of GPUs (``?devices_offset=``) with their slices and holders,
  the lab's totals counted by the database;
- the vanished-slice alert: one narrow row per open allocation, whole rows for those flagged;
- the groups table: the database's counts per group;
- GPU-hours of a period: sums per user and group from the database
  (:func:`~...ledger.census.usage_sums`, the figures of
  :func:`~...fairuse.accounting.usage`).

The JSON API keeps :func:`.data.admin_data` (the whole inventory) and :func:`.data.usage_data`
(with the CSV's rows).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ... import clock
from ...fairuse.accounting import Usage, usage
from ...ledger import aio
from ...ledger.census import usage_sums
from ...ledger.listing import devices_page, open_allocations_by_id, open_uncharged, slice_totals
from ..state import LabState
from . import labview, usageview, views
from .layoutview import add_layouts
from .paging import Page


async def admin_page_data(state: LabState, devices: Page) -> dict:
    """The page's ``data`` but the allocations table, the GPU-hours and the charts: ``node``,
    ``taken_at``, ``inventory`` (the nodes of ``devices``' window of GPUs, CPU-only nodes
    always; ``totals`` of the whole lab), ``devices_total``, ``vanished``, ``groups`` and
    ``refusals_24h``, as :func:`.data.admin_data` and :func:`.paging.device_window` give them."""

    def read():
        ledger = state.ledger
        now = clock.utcnow()
        rows, found, per_node, holders = devices_page(
            ledger, offset=devices.offset, limit=devices.limit
        )
        gone, gone_slices = open_allocations_by_id(ledger, state.vanished_open())
        return {
            "now": now,
            "rows": rows,
            "slices": found,
            "per_node": per_node,
            "holders": holders,
            "present": state.present_among(found),
            "nodes": ledger.nodes(),
            "totals": slice_totals(ledger),
            "gone": gone,
            "gone_slices": gone_slices,
            "open_by_group": ledger.open_by_group(),
            "uncharged": open_uncharged(ledger),
            "refusals": ledger.refusals_since(now - timedelta(hours=24)),
            "identity": ledger.identity(),
            "foreign": ledger.foreign_containers(),
        }

    r = await aio.call(read)
    sample = state.sample
    inv = views.inventory_view(
        r["rows"],
        r["slices"],
        r["present"],
        state.node,
        sample.by_slice,
        sample.problem,
        sample.taken_at,
        holders=r["holders"],
        nodes=r["nodes"],
    )
    # a node with GPUs only while some are in the window (paging.device_window's rule)
    inv["nodes"] = [n for n in inv["nodes"] if n["devices"] or n["name"] not in r["per_node"]]
    inv["totals"] = r["totals"]
    inv["lab"] = labview.lab_view(r["identity"], state.gpulab.lab_name)
    inv["foreign_containers"] = labview.foreign_view(r["foreign"])
    await add_layouts(state, inv, r["now"])
    return {
        "node": state.node,
        "taken_at": views.iso(r["now"]),
        "inventory": inv,
        "devices_total": sum(r["per_node"].values()),
        "vanished": views.allocation_view(
            r["gone"], r["gone_slices"], set(), state.node, {}, None, None, r["now"]
        ),
        "groups": views.group_view(
            state.lab.policies,
            r["open_by_group"],
            uncharged=r["uncharged"],
            default=state.lab.default_policy,
        ),
        "refusals_24h": views.refusal_view(r["refusals"]),
    }


async def usage_summary(state: LabState) -> dict:
    """``GET api/usage``'s lab figures as the admin page reads them: ``totals`` (the lab's
    slices counted by the database), ``groups`` and ``refusals_24h`` (what :func:`.data.
    admin_data` gives, without reading every device and open allocation)."""

    def read():
        ledger, now = state.ledger, clock.utcnow()
        return (slice_totals(ledger), ledger.open_by_group(), open_uncharged(ledger),
                ledger.refusals_since(now - timedelta(hours=24)))  # fmt: skip

    totals, by_group, uncharged, refusals = await aio.call(read)
    return {
        "totals": totals,
        "groups": views.group_view(
            state.lab.policies, by_group, uncharged=uncharged, default=state.lab.default_policy
        ),
        "refusals_24h": views.refusal_view(refusals),
    }


async def users_usage_rows(
    state: LabState, start: datetime, end: datetime, users: list[str]
) -> list[dict]:
    """The CSV's rows (:func:`~.usageview.usage_view`'s ``rows``) of ``users`` only in
    ``[start, end)``: the allocations of a page of users, not everyone's."""
    if not users:
        return []

    def read():
        found = state.ledger.allocations_between(start, end, users=users)
        return usage(found, start, end, clock.utcnow())

    return usageview.usage_view(await aio.call(read), state.lab.tz)["rows"]


def period_sums(state: LabState, start: datetime, end: datetime) -> Usage:
    """GPU-seconds per user and charge group in ``[start, end)`` summed by the database (no
    CSV rows; blocking: call it in a thread)."""
    by_user: dict[str, float] = {}
    by_group: dict[str, float] = {}
    for (user, group), seconds in usage_sums(state.ledger, start, end, clock.utcnow()).items():
        by_user[user] = by_user.get(user, 0.0) + seconds
        by_group[group] = by_group.get(group, 0.0) + seconds
    return Usage(start, end, (), by_user, by_group)


async def page_usage(state: LabState, start: datetime, end: datetime) -> dict:
    """GPU-hours used in ``[start, end)`` as :func:`~.usageview.usage_view` shows them (its
    ``rows`` empty: the page links the CSV for those)."""
    return usageview.usage_view(await aio.call(period_sums, state, start, end), state.lab.tz)

"""Gather what a page or an API answer shows: ledger reads (in a thread), the hub's servers and
the latest utilisation sample, turned into views (:mod:`.views`)."""

from __future__ import annotations

import logging
from datetime import datetime

from ... import clock
from ...fairuse.accounting import Usage, usage
from ...fairuse.quota import budget_window, period_window, user_budget
from ...hubapi.client import HubClient, HubError
from ...lab.policy import PolicyContext
from ...lab.profiles import entitled_in
from ...ledger import aio
from ...ledger.listing import open_allocations_page
from ..state import LabState
from . import labview, usageview, views
from .layoutview import add_layouts
from .paging import Page

log = logging.getLogger(__name__)


async def hub_servers(hub: HubClient):
    """The hub's running servers (refreshed periodically by the app); asked now if never."""
    if hub.active is None:
        try:
            await hub.refresh_active()
        except HubError as e:
            log.warning("Cannot list servers from the hub: %s", e.message)
    return hub.active, hub.active_at


async def admin_data(
    state: LabState, hub: HubClient, parts=("inventory", "allocations", "usage")
) -> dict:
    snap, present = await aio.call(
        lambda: (
            state.snapshot(devices="inventory" in parts, usage="usage" in parts),
            state.present_slice_ids(),
        )
    )
    sample = state.sample
    out: dict = {"node": state.node, "taken_at": views.iso(snap.taken_at)}
    if "inventory" in parts:
        out["inventory"] = views.inventory_view(
            snap.devices,
            snap.slices,
            present,
            state.node,
            sample.by_slice,
            sample.problem,
            sample.taken_at,
            holders={a.id: a.user for a in snap.allocations},
            nodes=snap.nodes,
        )
        identity, foreign = await aio.call(
            lambda: (state.ledger.identity(), state.ledger.foreign_containers())
        )
        out["inventory"]["lab"] = labview.lab_view(identity, state.gpulab.lab_name)
        out["inventory"]["foreign_containers"] = labview.foreign_view(foreign)
        await add_layouts(state, out["inventory"])
    if "allocations" in parts:
        servers, servers_at = await hub_servers(hub)
        rows = views.allocation_view(
            snap.allocations,
            {s["id"]: s for s in snap.slices},
            present,
            state.node,
            sample.by_slice,
            servers,
            servers_at,
            snap.taken_at,
        )
        out["allocations"] = rows
        out["hub"] = {"reachable": servers is not None, "servers_at": views.iso(servers_at)}
        out["vanished"] = [r for r in rows if r["vanished"]]
        out["stale"] = [r for r in rows if r["stale"]]
    elif "vanished" in parts:  # the admin page: its table reads one page (allocations_page)
        gone = [a for a in snap.allocations if a.slice_id not in present]
        by_id = {s["id"]: s for s in snap.slices} if gone else {}
        out["vanished"] = views.allocation_view(
            gone, by_id, present, state.node, {}, None, None, snap.taken_at
        )
    if "usage" in parts:
        out["groups"] = views.group_view(
            state.lab.policies,
            snap.open_by_group,
            snap.allocations,
            default=state.lab.default_policy,
        )
        out["refusals_24h"] = views.refusal_view(snap.refusals)
    return out


async def allocations_page(
    state: LabState, hub: HubClient, page: Page
) -> tuple[list[dict], int, dict]:
    """``(rows, total, hub)``: one :class:`~.paging.Page` of the open allocations as
    :func:`~.views.allocation_view` rows, how many match its filters, and the hub's answer
    (``{"reachable", "servers_at"}``). Reads the page's rows and slices only."""

    def read():
        return open_allocations_page(
            state.ledger, offset=page.offset, limit=page.limit, sort=page.sort,
            descending=page.descending, filters=page.filters,
        )  # fmt: skip

    allocs, total, slices_by_id = await aio.call(read)
    servers, servers_at = await hub_servers(hub)
    rows = views.allocation_view(
        allocs,
        slices_by_id,
        state.present_among(slices_by_id.values()),
        state.node,
        state.sample.by_slice,
        servers,
        servers_at,
        clock.utcnow(),
    )
    return rows, total, {"reachable": servers is not None, "servers_at": views.iso(servers_at)}


async def user_data(state: LabState, hub: HubClient, user: dict) -> dict:
    name = user["name"]
    groups = user.get("groups") or []
    is_admin = bool(user.get("admin"))
    lab = state.lab
    try:
        servers = await hub.servers_of(name) if user.get("kind", "user") == "user" else []
    except HubError as e:
        log.warning("Cannot read %s's servers from the hub: %s", name, e.message)
        servers = None
    ctx = PolicyContext.for_user(groups, is_admin, lab)
    entitled = entitled_in(lab.profiles, ctx)

    def read():
        ledger = state.ledger
        return (
            ledger.open_allocations(name),
            {s["id"]: s for s in ledger.slices()},
            {
                p.slug: ledger.capacity(state.image_needs.request_for(p))
                for p in entitled
                if p.wants_gpu
            },
            ledger.open_by_group(),
        )

    def fair_use():
        return _budget(state, name, ctx), state.ledger.warnings(name)

    allocations, slices_by_id, capacity, open_by_group = await aio.call(read)
    budget, warnings = await aio.call(fair_use)
    data = views.user_view(
        user=name,
        ctx=ctx,
        servers=servers,
        allocations=allocations,
        slices_by_id=slices_by_id,
        utilisation=state.sample.by_slice,
        entitled=entitled,
        capacity=capacity,
        open_by_group=open_by_group,
    )
    data["hub"] = {"reachable": servers is not None}
    data["nvml"] = {"available": state.sample.problem is None, "message": state.sample.problem}
    data["gpu_hours"] = budget
    running = {s.name for s in servers or () if s.state != "stopped"}
    data["warnings"] = usageview.warnings_view(warnings, running)
    return data


def _budget(state: LabState, name: str, ctx: PolicyContext) -> dict:
    """``name``'s governing GPU-hour budget and their use in its period (without a budget: in
    this calendar week), recomputed from the ledger (runs in a thread)."""
    lab, now = state.lab, clock.utcnow()
    week = period_window("week", now, tz=lab.tz)
    start = min(budget_window(ctx, now), week[0])
    own = state.ledger.allocations_between(start, now, user=name)
    budget = user_budget(name, ctx, own, now)
    used = budget.used_hours if budget else usage(own, week[0], week[1], now).hours(name)
    return usageview.budget_view(budget, used, week, lab.tz)


def period_usage(state: LabState, start: datetime, end: datetime) -> Usage:
    """Weighted GPU-seconds of every allocation in ``[start, end)``, from the ledger (blocking:
    call it in a thread)."""
    now = clock.utcnow()
    return usage(state.ledger.allocations_between(start, end), start, end, now)


async def usage_data(state: LabState, start: datetime, end: datetime) -> tuple[Usage, dict]:
    """GPU-hours used in ``[start, end)``: the accounting and its view."""
    u = await aio.call(period_usage, state, start, end)
    return u, usageview.usage_view(u, state.lab.tz)

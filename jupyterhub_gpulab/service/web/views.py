"""Pure builders of what the pages and the JSON API show: plain, JSON-ready dicts.

No I/O: the inputs are ledger rows, the latest inventory ids and utilisation sample, and the
hub's view of running servers. The admin page, the user page and ``/api/*`` all render these,
so the HTML and the JSON never disagree.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime

from ...clock import as_utc
from ...hubapi.servers import HubServer
from ...inventory import Utilization
from ...inventory.model import describe_slice as describe
from ...inventory.model import isolation
from ...inventory.slices import tensor_memory
from ...lab.policy import GroupPolicy, PolicyContext
from ...lab.profile import Profile
from ...ledger import Allocation, Node
from ...units import format_bytes
from .seatview import seat_view


def iso(dt: datetime | None) -> str | None:
    dt = as_utc(dt)
    return dt.isoformat().replace("+00:00", "Z") if dt else None


def _util(u: Utilization | None) -> dict:
    return {"gpu_percent": u and u.gpu_percent, "memory_used_bytes": u and u.memory_used_bytes}


def describe_slice(row: Mapping) -> str:
    """A ledger slice row in the words of :func:`~...inventory.model.describe_slice`."""
    return describe(
        row["kind"],
        row["device_index"],
        row["device_name"],
        row["memory_bytes"],
        mig_profile=row["mig_profile"],
        seat=row["seat"],
        seats=row["seats"],
        share=row["share"],
    )


def _layout(slices: list[dict], device: Mapping) -> str:
    if device["mig_enabled"]:
        counts = Counter(
            s["mig_profile"] for s in slices if s["kind"] == "mig" and not s["vanished"]
        )
        parts = [f"{p} ×{n}" if n > 1 else p for p, n in sorted(counts.items())]
        return "MIG: " + (", ".join(parts) if parts else "no instances")
    seats = [s for s in slices if s["kind"] == "shared" and not s["vanished"]]
    if seats:
        return f"{len(seats)} shared seats of {format_bytes(seats[0]['memory_bytes'])}"
    return "whole GPU"


def _device_util(kind_slices: list[dict]) -> dict:
    """A device's figures: a whole GPU's or a seat's (seats report their device), or for a MIG
    device the sum of its instances' memory (MIG reports no utilisation rate)."""
    live = [s for s in kind_slices if not s["vanished"]]
    if not live:
        return {"gpu_percent": None, "memory_used_bytes": None}
    if live[0]["kind"] != "mig":
        return {
            "gpu_percent": live[0]["gpu_percent"],
            "memory_used_bytes": live[0]["memory_used_bytes"],
        }
    used = [s["memory_used_bytes"] for s in live if s["memory_used_bytes"] is not None]
    return {"gpu_percent": None, "memory_used_bytes": sum(used) if used else None}


def node_view(n: Node) -> dict:
    """One node: its service state and why it is out, its agent, its orchestrator's view."""
    return {
        "name": n.name,
        "state": n.state,
        "available": n.available,
        "why_out": n.why_out(),
        "drained": n.drained,
        "drain_reason": n.drain_reason,
        "agent": {
            "seen_at": iso(n.agent_seen_at),
            "version": n.agent_version,
            "interval_s": n.agent_interval_s,
            "has_token": n.has_token,
        },
        "engine": {
            "kind": n.engine,
            "id": n.engine_id,
            "state": n.engine_state,
            "availability": n.engine_availability,
            "address": n.address,
        },
        "hostname": n.hostname,
        "cpus": n.cpus,
        "memory_bytes": n.memory_bytes,
    }


def _bare_node(name: str) -> dict:
    """A node the ledger's devices name but its ``nodes`` table does not (yet)."""
    return {
        "name": name,
        "state": "in-service",
        "available": True,
        "why_out": None,
        "drained": False,
        "drain_reason": None,
        "agent": {"seen_at": None, "version": None, "interval_s": None, "has_token": False},
        "engine": {"kind": None, "id": None, "state": None, "availability": None, "address": None},
        "hostname": None,
        "cpus": None,
        "memory_bytes": None,
    }


def inventory_view(
    devices: list[dict],
    slices: list[dict],
    present: set[str],
    node: str,
    utilisation: Mapping[str, Utilization],
    nvml_problem: str | None,
    sampled_at: datetime | None = None,
    holders: Mapping[int, str] | None = None,
    nodes: Iterable[Node] = (),
) -> dict:
    """Nodes → devices → slices, with each node's service state (``nodes``, the ledger's; a
    node without GPUs is listed too), drain state, MIG layout or seats, and live figures.

    A slice whose id is not in ``present`` (the latest inventory read of its node) is
    ``vanished``: it is never handed out, and an allocation on it is flagged."""
    holders = holders or {}
    by_device: dict[str, list[dict]] = defaultdict(list)
    for s in slices:
        vanished = s["id"] not in present
        by_device[s["device_uuid"]].append(
            {
                "id": s["id"],
                "kind": s["kind"],
                "description": describe_slice(s),
                "mig_profile": s["mig_profile"],
                "seat": s["seat"],
                "seats": s["seats"],
                "memory_bytes": s["memory_bytes"],
                "share": s["share"],
                "isolation": isolation(s["kind"])[0],
                "available": bool(s["available"]),
                "vanished": vanished,
                "held_by": s["held_by"],
                "holder": holders.get(s["held_by"]) if s["held_by"] is not None else None,
                **_util(None if vanished else utilisation.get(s["id"])),
                **seat_view(s["kind"], s["memory_bytes"], utilisation.get(s["id"])),
            }
        )
    by_node: dict[str, list[dict]] = defaultdict(list)
    totals = Counter()
    for d in devices:
        dslices = by_device.get(d["uuid"], [])
        for s in dslices:
            totals["slices"] += 1
            if s["held_by"] is not None:
                totals["held"] += 1
            elif s["available"]:
                totals["free"] += 1
            else:
                totals["out_of_service"] += 1
        by_node[d["node"]].append(
            {
                "uuid": d["uuid"],
                "index": d["index"],
                "name": d["name"],
                "memory_bytes": d["memory_bytes"],
                "compute_capability": d["compute_capability"],
                "mig_enabled": bool(d["mig_enabled"]),
                "vgpu_type": d["vgpu_type"],
                "present": bool(d["present"]),
                "drained": bool(d["drained"]),
                "drain_reason": d["drain_reason"],
                "layout": _layout(dslices, d),
                **_device_util(dslices),
                "slices": dslices,
            }
        )
    rows = {n.name: node_view(n) for n in nodes}
    return {
        "nvml": {
            "available": nvml_problem is None,
            "message": nvml_problem,
            "sampled_at": iso(sampled_at),
        },
        "nodes": [
            {**(rows[n] if n in rows else _bare_node(n)), "devices": by_node.get(n, [])}
            for n in sorted(set(rows) | set(by_node))
        ],
        "totals": {k: totals.get(k, 0) for k in ("slices", "free", "held", "out_of_service")},
    }


def allocation_view(
    allocations: Iterable[Allocation],
    slices_by_id: Mapping[str, Mapping],
    present: set[str],
    node: str,
    utilisation: Mapping[str, Utilization],
    servers: Mapping[tuple[str, str], HubServer] | None,
    servers_at: datetime | None,
    now: datetime,
) -> list[dict]:
    """Every open allocation with its slice, the hub's view of its server and live figures.

    ``stale``: the hub runs no such server (and the allocation is older than the hub's answer):
    the slice is held for nothing, an admin may release it. ``vanished``: its slice left the
    inventory. ``servers=None`` means the hub could not be asked (``server`` is ``unknown``)."""
    rows = []
    for a in allocations:
        s = slices_by_id.get(a.slice_id)
        vanished = a.slice_id not in present
        server = servers.get((a.user, a.server_name)) if servers is not None else None
        state = "unknown" if servers is None else (server.state if server else "not running")
        stale = (
            servers is not None
            and server is None
            and servers_at is not None
            and as_utc(a.started_at) < servers_at
        )
        rows.append(
            {
                "id": a.id,
                "user": a.user,
                "server_name": a.server_name,
                "profile": a.profile,
                "slice_id": a.slice_id,
                "slice": describe_slice(s) if s else a.slice_id,
                "kind": s["kind"] if s else None,
                "node": a.node,
                "charge_group": a.charge_group,
                "started_at": iso(a.started_at),
                "held_seconds": max(0, int((now - as_utc(a.started_at)).total_seconds())),
                "server": state,
                "last_activity": iso(server.last_activity) if server else None,
                "stale": bool(stale),
                "vanished": vanished,
                **_util(None if vanished else utilisation.get(a.slice_id)),
                **seat_view(
                    s["kind"] if s else None,
                    s["memory_bytes"] if s else None,
                    None if vanished else utilisation.get(a.slice_id),
                ),
            }
        )
    return rows


def group_view(
    policies: Mapping[str, GroupPolicy],
    open_by_group: Mapping[str, int],
    allocations: Iterable[Allocation] = (),
    uncharged: int | None = None,
    default: GroupPolicy | None = None,
) -> list[dict]:
    """Per group: slices charged to it against its cap and its per-user limit; groups without a
    policy (removed from the config) have no limits. ``uncharged``: else counted in allocations.
    ``default``: ``c.GPULab.default_policy`` (its group ``(default)``: users in no policy's
    group), shown with its limits as the others are."""
    uncharged = sum(a.charge_group is None for a in allocations) if uncharged is None else uncharged
    if default is not None:
        policies = {**policies, default.group: default}

    def row(group: str | None, p: GroupPolicy | None, held: int) -> dict:
        cap = p.max_slices if p else None
        return {
            "group": group,
            "held": held,
            "max_slices": cap,
            "max_slices_per_user": p.max_slices_per_user if p else None,
            "priority": p.priority if p else 0,
            "profiles": list(p.profiles) if p and p.profiles is not None else None,
            "full": cap is not None and held >= cap,
            "configured": p is not None,
        }

    rows = [row(g, policies.get(g), open_by_group.get(g, 0))
            for g in sorted(set(policies) | set(open_by_group))]  # fmt: skip
    if uncharged:
        rows.append(row(None, None, uncharged))
    return rows


def refusal_view(refusals: Mapping[str, int]) -> list[dict]:
    return [
        {"reason": r, "count": n}
        for r, n in sorted(refusals.items(), key=lambda kv: (-kv[1], kv[0]))
    ]


def my_slice(a: Allocation, s: Mapping | None, utilisation: Mapping[str, Utilization]) -> dict:
    kind = s["kind"] if s else None
    level, explained = isolation(kind) if s else ("unknown", "this slice left the inventory")
    return {
        "allocation": a.id,
        "server_name": a.server_name,
        "profile": a.profile,
        "slice_id": a.slice_id,
        "description": describe_slice(s) if s else a.slice_id,
        "kind": kind,
        "gpu_model": s["device_name"] if s else None,
        "memory_bytes": s["memory_bytes"] if s else None,
        "tensor_memory": tensor_memory(kind, s["memory_bytes"]) if s else "unknown",
        "mig_profile": s["mig_profile"] if s else None,
        "isolation": level,
        "isolation_detail": explained,
        "started_at": iso(a.started_at),
        "node": a.node,
        **_util(utilisation.get(a.slice_id)),
        **seat_view(kind, s["memory_bytes"] if s else None, utilisation.get(a.slice_id)),
    }


def user_view(
    *,
    user: str,
    ctx: PolicyContext,
    servers: list[HubServer] | None,
    allocations: list[Allocation],
    slices_by_id: Mapping[str, Mapping],
    utilisation: Mapping[str, Utilization],
    entitled: Iterable[Profile],
    capacity: Mapping[str, tuple[int, int]],
    open_by_group: Mapping[str, int],
) -> dict:
    """The user page: my servers and their slices, my groups' limits and my use of them, and
    the free capacity of every profile I may pick. ``ctx``: my policies (computed once for the
    request, :meth:`~...lab.policy.PolicyContext.for_user`)."""
    mine = ctx.policies
    by_server = {a.server_name: a for a in allocations}
    server_rows = []
    for srv in servers or []:
        a = by_server.get(srv.name)
        server_rows.append(
            {
                "name": srv.name,
                "state": srv.state,
                "url": srv.url,
                "last_activity": iso(srv.last_activity),
                "started": iso(srv.started),
                "slice": my_slice(a, slices_by_id.get(a.slice_id), utilisation) if a else None,
            }
        )
    profiles = []
    for p in entitled:
        free, total = capacity.get(p.slug, (None, None))
        profiles.append(
            {
                "slug": p.slug,
                "display_name": p.display_name,
                "description": p.description,
                "gpu": p.slice.describe(),
                "wants_gpu": p.wants_gpu,
                "free": free,
                "total": total,
                "mine": sum(1 for a in allocations if a.profile == p.slug),
            }
        )
    return {
        "user": user,
        "groups": sorted(ctx.groups),
        "servers": server_rows,
        "slices": [my_slice(a, slices_by_id.get(a.slice_id), utilisation) for a in allocations],
        "limits": {
            "held": len(allocations),
            "max_slices_per_user": ctx.user_limit,
            "policies": [
                {
                    "group": p.group,
                    "max_slices_per_user": p.max_slices_per_user,
                    "max_slices": p.max_slices,
                    "group_held": open_by_group.get(p.group, 0),
                    "profiles": list(p.profiles) if p.profiles is not None else None,
                }
                for p in mine
            ],
        },
        "profiles": profiles,
    }

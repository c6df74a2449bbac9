"""The JSON Schemas of the API's response bodies (OpenAPI 3.1 = JSON Schema 2020-12).

Every object lists the fields it always carries as ``required``: a client may rely on them, and
the hub tests validate every real response against these schemas, so a renamed or dropped field
fails there. ``null`` is allowed only where the value can truly be absent ("null: ..." says when).

Long because it is one document: each response body's schema, cross-referenced by name (split
by resource, the parts would import one another's shapes).
"""

from __future__ import annotations

NUM = {"type": ["number", "null"]}
INT = {"type": ["integer", "null"]}
STR = {"type": ["string", "null"]}
STRING = {"type": "string"}
INTEGER = {"type": "integer"}
NUMBER = {"type": "number"}
BOOL = {"type": "boolean"}
TIME = {"type": "string", "format": "date-time"}
TIME_OR_NULL = {"type": ["string", "null"], "format": "date-time"}
STRINGS = {"type": "array", "items": STRING}
STRINGS_OR_NULL = {"type": ["array", "null"], "items": STRING}
KIND = {"type": "string", "enum": ["gpu", "mig", "shared"]}
UTIL = {"gpu_percent": NUM, "memory_used_bytes": INT}
#: what holds a shared seat's cap, and its use against the cap (service/web/seatview.py)
SEAT = {
    "seat_check": {
        "type": ["string", "null"],
        "enum": ["framework-capped, host-enforced", "soft", None],
        "description": "shared seats: whether the host checks the seat's GPU memory against its "
        "cap (framework-capped, host-enforced) or only the framework's hook holds it (soft); "
        "null for whole GPUs and MIG",
    },
    "seat_memory": {
        "type": ["string", "null"],
        "description": "a host-checked seat's use against its cap, 'GPU memory 0.8 of 1 GiB'",
    },
}


def ref(name: str) -> dict:
    """A reference to ``components/schemas/<name>``."""
    return {"$ref": f"#/components/schemas/{name}"}


def obj(properties: dict, description: str | None = None, *, nullable: bool = False) -> dict:
    """An object that always carries every one of ``properties``."""
    schema = {
        "type": ["object", "null"] if nullable else "object",
        "required": list(properties),
        "properties": properties,
    }
    if description:
        schema["description"] = description
    return schema


def array(items: dict, description: str | None = None) -> dict:
    schema = {"type": "array", "items": items}
    if description:
        schema["description"] = description
    return schema


def _described(schema: dict, description: str) -> dict:
    return {**schema, "description": description}


STATUS_MESSAGE = {"status": INTEGER, "message": STRING}

SLICE = obj(
    {
        "id": STRING,
        "kind": KIND,
        "description": STRING,
        "mig_profile": STR,
        "seat": INT,
        "seats": INT,
        "memory_bytes": INTEGER,
        "share": NUMBER,
        "isolation": {"type": "string", "enum": ["hard", "soft"]},
        "available": _described(BOOL, "in service: not drained, present"),
        "vanished": _described(BOOL, "gone from the latest inventory read"),
        "held_by": _described(INT, "id of the open allocation holding it"),
        "holder": _described(STR, "the user holding it"),
        **UTIL,
        **SEAT,
    }
)

#: a scheduled GPU's plan (service/web/layoutview.py); null: not scheduled
LAYOUT_PLAN = obj(
    {**dict.fromkeys(("current", "next_layout", "next_why"), STR),
     **dict.fromkeys(("target", "phase", "why"), STRING),
     **dict.fromkeys(("next_change_at", "holders_by"), TIME_OR_NULL),
     "drain": BOOL, "relay_due": BOOL},
    nullable=True,
)  # fmt: skip
SCHEDULE_ENTRY = obj(
    {"gpus": {"type": ["string", "array"]}, "class_layout": STRING, "research_layout": STRING,
     "class_windows": STRINGS, "follow_bookings": BOOL, "drain_lead_s": INTEGER}
)  # fmt: skip

DEVICE = obj(
    {
        "uuid": STRING,
        "index": INTEGER,
        "name": STRING,
        "memory_bytes": INTEGER,
        "compute_capability": STR,
        "mig_enabled": BOOL,
        "vgpu_type": STR,
        "present": BOOL,
        "drained": BOOL,
        "drain_reason": STR,
        "layout": STRING,
        "layout_plan": LAYOUT_PLAN,
        **UTIL,
        "slices": array(ref("Slice")),
    }
)

TOTALS = obj({k: INTEGER for k in ("slices", "free", "held", "out_of_service")})

FOREIGN = obj(
    {
        "container_id": STRING,
        "container_name": STRING,
        "lab_id": _described(STR, "null: not a gpulab container"),
        "lab_name": STR,
        "lab": STR,
        "user": STR,
        "devices": STRINGS,
        "attached_by": STRING,
        "seen_at": TIME_OR_NULL,
    }
)

NODE = obj(
    {
        "name": STRING,
        "state": _described(
            STRING,
            "in-service, drained, unreachable (its agent stopped reporting), or engine-<state> "
            "(the orchestrator's: engine-down, engine-pause, engine-missing …)",
        ),
        "available": _described(BOOL, "its slices may be handed out"),
        "why_out": _described(STR, "null: in service"),
        "drained": BOOL,
        "drain_reason": STR,
        "agent": obj(
            {"seen_at": TIME_OR_NULL, "version": STR, "interval_s": NUM, "has_token": BOOL},
            "its node agent: last report, version, reporting interval (seconds), whether a "
            "token is issued",
        ),
        "engine": obj(
            {"kind": STR, "id": STR, "state": STR, "availability": STR, "address": STR},
            "the orchestrator's view (Docker Swarm: node id, status, availability, address); "
            "null fields where none runs the node",
        ),
        "hostname": STR,
        "cpus": INT,
        "memory_bytes": INT,
    }
)

INVENTORY = obj(
    {
        "nvml": obj(
            {
                "available": BOOL,
                "message": _described(STR, "why there are no live figures"),
                "sampled_at": TIME_OR_NULL,
            }
        ),
        "nodes": array(
            {
                "allOf": [
                    ref("Node"),
                    obj({"devices": array(ref("Device"))}),
                ]
            },
            "every node, its service state and its GPUs (a CPU-only node has none)",
        ),
        "totals": TOTALS,
        "lab": obj(
            {"id": STRING, "name": STR, "label": STRING},
            "this lab: its ledger's id (on every container label) and name",
        ),
        "mig_schedule": array(SCHEDULE_ENTRY, "c.GPULab.mig_schedule (empty: none)"),
        "foreign_containers": array(
            FOREIGN,
            "containers not of this lab holding its GPUs, as the hub last saw the Docker "
            "engine: another ledger hands out the same GPUs",
        ),
    }
)

ALLOCATION = obj(
    {
        "id": INTEGER,
        "user": STRING,
        "server_name": STRING,
        "profile": STRING,
        "slice_id": STRING,
        "slice": STRING,
        "kind": {"type": ["string", "null"], "enum": ["gpu", "mig", "shared", None]},
        "node": STRING,
        "charge_group": STR,
        "started_at": TIME,
        "held_seconds": INTEGER,
        "server": {"type": "string", "enum": ["running", "pending", "not running", "unknown"]},
        "last_activity": STR,
        "stale": _described(BOOL, "the hub runs no such server"),
        "vanished": _described(BOOL, "its slice left the inventory"),
        **UTIL,
        **SEAT,
    }
)

HUB_ANSWER = obj(
    {"reachable": BOOL, "servers_at": TIME_OR_NULL},
    "whether the hub answered, and when its list of servers was read",
)
#: JupyterHub's ``_pagination`` (jupyterhub/apihandlers/base.py, ``paginated_model``)
PAGINATION = obj(
    {
        "offset": INTEGER,
        "limit": INTEGER,
        "total": _described(INTEGER, "rows matching the filters, on every page"),
        "next": obj(
            {"offset": INTEGER, "limit": INTEGER, "url": STRING},
            "the next page's arguments and URL; null on the last page",
            nullable=True,
        ),
    }
)
ALLOCATIONS = obj(
    {
        "allocations": array(ref("Allocation")),
        "hub": HUB_ANSWER,
        "_pagination": ref("Pagination"),
    }
)
ALLOCATIONS_PAGE = obj(
    {"items": array(ref("Allocation")), "_pagination": ref("Pagination"), "hub": HUB_ANSWER}
)

GPU_HOURS = obj(
    {
        "period": obj(
            {
                "start": TIME,
                "end": _described(TIME, "excluded"),
                "start_date": {"type": "string", "format": "date"},
                "end_date": {"type": "string", "format": "date"},
            }
        ),
        "rule": STRING,
        "total_gpu_hours": NUMBER,
        "by_group": array(
            obj({"group": _described(STR, "charge group; null: none"), "gpu_hours": NUMBER})
        ),
        "by_user": array(ref("UserHours"), "one page of the users, most GPU-hours first"),
        "rows": array(
            obj(
                {
                    "user": STRING,
                    "group": STR,
                    "profile": STRING,
                    "slice_kind": KIND,
                    "allocations": INTEGER,
                    "gpu_seconds": NUMBER,
                    "gpu_hours": NUMBER,
                }
            ),
            "the CSV export's rows of the page's users",
        ),
    },
    "Weighted GPU-hours used in the period (`rule` states the weighting).",
)

_USAGE = {
    "totals": TOTALS,
    "groups": array(
        obj(
            {
                "group": STR,
                "held": INTEGER,
                "max_slices": INT,
                "max_slices_per_user": INT,
                "priority": INTEGER,
                "profiles": STRINGS_OR_NULL,
                "full": BOOL,
                "configured": BOOL,
            }
        )
    ),
    "refusals_24h": array(obj({"reason": STRING, "count": INTEGER})),
}
USAGE = obj({"gpu_hours": ref("GpuHours"), **_USAGE, "_pagination": ref("Pagination")})
#: with the pagination Accept header: the page's users are JupyterHub's ``items``
USAGE_PAGE = obj(
    {
        "items": array(ref("UserHours")),
        "_pagination": ref("Pagination"),
        "gpu_hours": obj(
            {k: v for k, v in GPU_HOURS["properties"].items() if k != "by_user"},
            GPU_HOURS["description"],
        ),
        **_USAGE,
    }
)

MY_SLICE = obj(
    {
        "allocation": INTEGER,
        "server_name": STRING,
        "profile": STRING,
        "slice_id": STRING,
        "description": STRING,
        "kind": {"type": ["string", "null"], "enum": ["gpu", "mig", "shared", None]},
        "gpu_model": STR,
        "memory_bytes": INT,
        "tensor_memory": _described(STRING, "what the slice holds for tensors, contexts apart"),
        "mig_profile": STR,
        "isolation": {"type": "string", "enum": ["hard", "soft", "unknown"]},
        "isolation_detail": STRING,
        "started_at": TIME,
        "node": _described(STRING, "the host it runs on"),
        **UTIL,
        **SEAT,
    }
)

BUDGET = obj(
    {
        "group": STR,
        "period": STRING,
        "limit_hours": NUMBER,
        "remaining_hours": NUMBER,
        "exhausted": BOOL,
        "resets_at": TIME,
    },
    "null: no budget applies",
    nullable=True,
)

ME = obj(
    {
        "user": STRING,
        "groups": STRINGS,
        "servers": array(
            obj(
                {
                    "name": STRING,
                    "state": {"type": "string", "enum": ["running", "pending", "stopped"]},
                    "url": STR,
                    "last_activity": STR,
                    "started": STR,
                    "slice": {"anyOf": [ref("MySlice"), {"type": "null"}]},
                }
            )
        ),
        "slices": array(ref("MySlice")),
        "limits": obj(
            {
                "held": INTEGER,
                "max_slices_per_user": INT,
                "policies": array(
                    obj(
                        {
                            "group": STR,
                            "max_slices_per_user": INT,
                            "max_slices": INT,
                            "group_held": INTEGER,
                            "profiles": STRINGS_OR_NULL,
                        }
                    )
                ),
            }
        ),
        "profiles": array(
            obj(
                {
                    "slug": STRING,
                    "display_name": STRING,
                    "description": STRING,
                    "gpu": STR,
                    "wants_gpu": BOOL,
                    "free": _described(INT, "null: the profile wants no GPU"),
                    "total": INT,
                    "mine": _described(INTEGER, "slices my servers hold for this profile"),
                }
            )
        ),
        "hub": obj({"reachable": BOOL}),
        "nvml": obj({"available": BOOL, "message": STR}),
        "gpu_hours": obj(
            {
                "budget": BUDGET,
                "describe": STR,
                "rule": STRING,
                "used_hours": NUMBER,
                "period_start": TIME,
                "period_end": TIME,
            },
            "my governing GPU-hour budget (null: none) and my use in its period (without one: "
            "this week)",
        ),
        "warnings": array(
            obj(
                {
                    "user": STRING,
                    "server_name": STRING,
                    "rule": STRING,
                    "kind": {"type": "string", "enum": ["warning", "stopped", "notice"]},
                    "message": STRING,
                    "due_at": TIME_OR_NULL,
                }
            ),
            "the culler's warnings (kind warning), notices of servers it stopped (kind stopped), "
            "courses' notices (kind notice: added to a roster by whom)",
        ),
    }
)

ROOT = obj({"version": STRING, "openapi": STRING, "endpoints": STRINGS})

SCHEMAS = {
    "Error": obj(STATUS_MESSAGE, "What went wrong and how to fix it; `status` is the HTTP status."),
    "Done": obj(STATUS_MESSAGE, "An action's outcome, for the admin."),
    "Root": ROOT,
    "Slice": SLICE,
    "Device": DEVICE,
    "Node": NODE,
    "Nodes": obj({"nodes": array(ref("Node"))}),
    "Inventory": INVENTORY,
    "Allocation": ALLOCATION,
    "Allocations": ALLOCATIONS,
    "AllocationsPage": ALLOCATIONS_PAGE,
    # the answer is the page model when it has items (the pagination Accept header), else the
    # older shape; if/then keeps a broken field's error precise (oneOf would only say "none")
    "AllocationsAnswer": {
        "if": {"type": "object", "required": ["items"]},
        "then": ref("AllocationsPage"),
        "else": ref("Allocations"),
    },
    "Pagination": PAGINATION,
    "GpuHours": GPU_HOURS,
    "UserHours": obj({"user": STRING, "gpu_hours": NUMBER}),
    "Usage": USAGE,
    "UsagePage": USAGE_PAGE,
    "UsageAnswer": {
        "if": {"type": "object", "required": ["items"]},
        "then": ref("UsagePage"),
        "else": ref("Usage"),
    },
    "MySlice": MY_SLICE,
    "Me": ME,
}

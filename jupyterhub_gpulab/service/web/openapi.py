"""The OpenAPI 3 document of the JSON API, built in code so it always names the real prefix."""

from __future__ import annotations

from ... import __version__
from ...hub.hubconfig import ADMIN_SCOPE, READ_SCOPE
from .inputs import MAX_BODY, MAX_ID, MAX_NAME, MAX_REASON, MAX_UUID


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


ERRORS = {
    "403": {"$ref": "#/components/responses/Forbidden"},
}
BAD_REQUEST = {"400": {"$ref": "#/components/responses/BadRequest"}}
TOO_LARGE = {"413": {"$ref": "#/components/responses/TooLarge"}}

NUM = {"type": ["number", "null"]}
INT = {"type": ["integer", "null"]}
STR = {"type": ["string", "null"]}

SCHEMAS = {
    "Error": {
        "type": "object",
        "required": ["status", "message"],
        "properties": {"status": {"type": "integer"}, "message": {"type": "string"}},
    },
    "Done": {
        "type": "object",
        "description": "An action's outcome, for the admin.",
        "properties": {"status": {"type": "integer"}, "message": {"type": "string"}},
    },
    "Slice": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "kind": {"type": "string", "enum": ["gpu", "mig", "shared"]},
            "description": {"type": "string"},
            "mig_profile": STR,
            "seat": INT,
            "seats": INT,
            "memory_bytes": {"type": "integer"},
            "share": {"type": "number"},
            "isolation": {"type": "string", "enum": ["hard", "soft"]},
            "available": {"type": "boolean", "description": "in service: not drained, present"},
            "vanished": {"type": "boolean", "description": "gone from the latest inventory read"},
            "held_by": {**INT, "description": "id of the open allocation holding it"},
            "holder": {**STR, "description": "the user holding it"},
            "gpu_percent": NUM,
            "memory_used_bytes": INT,
        },
    },
    "Device": {
        "type": "object",
        "properties": {
            "uuid": {"type": "string"},
            "index": {"type": "integer"},
            "name": {"type": "string"},
            "memory_bytes": {"type": "integer"},
            "compute_capability": STR,
            "mig_enabled": {"type": "boolean"},
            "vgpu_type": STR,
            "present": {"type": "boolean"},
            "drained": {"type": "boolean"},
            "drain_reason": STR,
            "layout": {"type": "string"},
            "gpu_percent": NUM,
            "memory_used_bytes": INT,
            "slices": {"type": "array", "items": _ref("Slice")},
        },
    },
    "Inventory": {
        "type": "object",
        "properties": {
            "nvml": {
                "type": "object",
                "properties": {
                    "available": {"type": "boolean"},
                    "message": {**STR, "description": "why there are no live figures"},
                    "sampled_at": STR,
                },
            },
            "nodes": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "devices": {"type": "array", "items": _ref("Device")},
                    },
                },
            },
            "totals": {"type": "object", "additionalProperties": {"type": "integer"}},
            "lab": {
                "type": "object",
                "description": "this lab: its ledger's id (on every container label) and name",
                "properties": {"id": {"type": "string"}, "name": STR, "label": {"type": "string"}},
            },
            "foreign_containers": {
                "type": "array",
                "description": "containers not of this lab holding its GPUs, as the hub last "
                "saw the Docker engine: another ledger hands out the same GPUs",
                "items": {
                    "type": "object",
                    "properties": {
                        "container_id": {"type": "string"},
                        "container_name": {"type": "string"},
                        "lab_id": {**STR, "description": "null: not a gpulab container"},
                        "lab_name": STR,
                        "lab": STR,
                        "user": STR,
                        "devices": {"type": "array", "items": {"type": "string"}},
                        "attached_by": {"type": "string"},
                        "seen_at": {"type": "string", "format": "date-time"},
                    },
                },
            },
        },
    },
    "Allocation": {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "user": {"type": "string"},
            "server_name": {"type": "string"},
            "profile": {"type": "string"},
            "slice_id": {"type": "string"},
            "slice": {"type": "string"},
            "kind": STR,
            "node": {"type": "string"},
            "charge_group": STR,
            "started_at": {"type": "string", "format": "date-time"},
            "held_seconds": {"type": "integer"},
            "server": {"type": "string", "enum": ["running", "pending", "not running", "unknown"]},
            "last_activity": STR,
            "stale": {"type": "boolean", "description": "the hub runs no such server"},
            "vanished": {"type": "boolean", "description": "its slice left the inventory"},
            "gpu_percent": NUM,
            "memory_used_bytes": INT,
        },
    },
    "GpuHours": {
        "type": "object",
        "description": "Weighted GPU-hours used in the period (`rule` states the weighting).",
        "properties": {
            "period": {
                "type": "object",
                "properties": {
                    "start": {"type": "string", "format": "date-time"},
                    "end": {"type": "string", "format": "date-time", "description": "excluded"},
                    "start_date": {"type": "string", "format": "date"},
                    "end_date": {"type": "string", "format": "date"},
                },
            },
            "rule": {"type": "string"},
            "total_gpu_hours": {"type": "number"},
            "by_group": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "group": {**STR, "description": "charge group; null: none"},
                        "gpu_hours": {"type": "number"},
                    },
                },
            },
            "by_user": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"user": {"type": "string"}, "gpu_hours": {"type": "number"}},
                },
            },
            "rows": {
                "type": "array",
                "description": "the CSV export's rows",
                "items": {
                    "type": "object",
                    "properties": {
                        "user": {"type": "string"},
                        "group": STR,
                        "profile": {"type": "string"},
                        "slice_kind": {"type": "string", "enum": ["gpu", "mig", "shared"]},
                        "allocations": {"type": "integer"},
                        "gpu_seconds": {"type": "number"},
                        "gpu_hours": {"type": "number"},
                    },
                },
            },
        },
    },
    "Usage": {
        "type": "object",
        "properties": {
            "gpu_hours": _ref("GpuHours"),
            "totals": {"type": "object", "additionalProperties": {"type": "integer"}},
            "groups": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "group": STR,
                        "held": {"type": "integer"},
                        "max_slices": INT,
                        "max_slices_per_user": INT,
                        "priority": {"type": "integer"},
                        "profiles": {"type": ["array", "null"], "items": {"type": "string"}},
                        "full": {"type": "boolean"},
                        "configured": {"type": "boolean"},
                    },
                },
            },
            "refusals_24h": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"reason": {"type": "string"}, "count": {"type": "integer"}},
                },
            },
        },
    },
    "Me": {
        "type": "object",
        "properties": {
            "user": {"type": "string"},
            "groups": {"type": "array", "items": {"type": "string"}},
            "servers": {"type": "array", "items": {"type": "object"}},
            "slices": {"type": "array", "items": {"type": "object"}},
            "limits": {"type": "object"},
            "profiles": {"type": "array", "items": {"type": "object"}},
            "gpu_hours": {
                "type": "object",
                "description": "my governing GPU-hour budget (null: none) and my use in its "
                "period (without one: this week)",
                "properties": {
                    "budget": {"type": ["object", "null"]},
                    "describe": STR,
                    "rule": {"type": "string"},
                    "used_hours": {"type": "number"},
                    "period_start": {"type": "string", "format": "date-time"},
                    "period_end": {"type": "string", "format": "date-time"},
                },
            },
            "warnings": {
                "type": "array",
                "description": "the culler's warnings (kind warning) and notices of servers it "
                "stopped (kind stopped)",
                "items": {
                    "type": "object",
                    "properties": {
                        "server_name": {"type": "string"},
                        "rule": {"type": "string"},
                        "kind": {"type": "string", "enum": ["warning", "stopped"]},
                        "message": {"type": "string"},
                        "due_at": {"type": "string", "format": "date-time"},
                    },
                },
            },
        },
    },
}

PERIOD = [
    {
        "name": name,
        "in": "query",
        "required": False,
        "schema": {"type": "string", "format": "date"},
        "description": description,
    }
    for name, description in (
        ("start", "first day (ISO date, in c.GPULab.quota_timezone); default: this Monday"),
        ("end", "the day after the last one; default: a week after start"),
    )
]


def _op(summary: str, scope: str | None, ok: dict, **extra) -> dict:
    op = {
        "summary": summary,
        "responses": {**ok, **ERRORS},
        **extra,
    }
    if scope:
        op["description"] = f"Needs the scope `{scope}`."
    return op


def openapi(prefix: str) -> dict:
    """The document, with ``servers`` set to ``prefix + "api"``."""
    done = {"200": _json(_ref("Done"), "done")}
    not_found = {"404": {"$ref": "#/components/responses/NotFound"}}
    bad_request = BAD_REQUEST
    name = {"type": "string", "maxLength": MAX_NAME}
    user_param = {"name": "user", "in": "path", "required": True, "schema": name}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "jupyterhub-gpulab service API",
            "version": __version__,
            "description": "GPU slices, allocations and usage of a JupyterHub GPU lab. "
            "Authenticate with `Authorization: token <JupyterHub API token>`; a browser "
            "logged in to the hub may use its cookie, sending the `_xsrf` token "
            "(`X-XSRFToken` header) with every change.",
        },
        "servers": [{"url": prefix + "api"}],
        "security": [{"token": []}],
        "paths": {
            "/inventory": {
                "get": _op(
                    "Nodes, devices and slices with live utilisation",
                    READ_SCOPE,
                    {"200": _json(_ref("Inventory"), "the inventory")},
                )
            },
            "/inventory/refresh": {
                "post": _op("Re-read the inventory and sync the ledger", ADMIN_SCOPE, done)
            },
            "/allocations": {
                "get": _op(
                    "Open allocations with server state and last activity",
                    READ_SCOPE,
                    {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "allocations": {"type": "array", "items": _ref("Allocation")},
                                    "hub": {"type": "object"},
                                },
                            },
                            "open allocations",
                        )
                    },
                )
            },
            "/allocations/{id}": {
                "delete": _op(
                    "Release an allocation (close it, free its slice)",
                    ADMIN_SCOPE,
                    {
                        **done,
                        **bad_request,
                        **not_found,
                        "409": {"$ref": "#/components/responses/Conflict"},
                    },
                    parameters=[
                        {
                            "name": "id",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "integer", "minimum": 1, "maximum": MAX_ID},
                        }
                    ],
                )
            },
            "/usage": {
                "get": _op(
                    "Slices held per group against limits; refusals in 24 hours; GPU-hours "
                    "used in a period per group and per user",
                    READ_SCOPE,
                    {"200": _json(_ref("Usage"), "usage"), **bad_request},
                    parameters=PERIOD,
                )
            },
            "/usage.csv": {
                "get": _op(
                    "GPU-hours used in a period per user, group, profile and slice kind, as CSV",
                    READ_SCOPE,
                    {
                        "200": {
                            "description": "CSV with a header row: period_start, period_end, "
                            "user, group, profile, slice_kind, allocations, gpu_seconds, "
                            "gpu_hours",
                            "content": {"text/csv": {"schema": {"type": "string"}}},
                        },
                        **bad_request,
                    },
                    parameters=PERIOD,
                )
            },
            "/devices/{uuid}/drain": {
                "parameters": [
                    {
                        "name": "uuid",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "maxLength": MAX_UUID},
                    }
                ],
                "post": _op(
                    "Drain a device: its free slices are no longer handed out",
                    ADMIN_SCOPE,
                    {**done, **bad_request, **not_found, **TOO_LARGE},
                    requestBody={
                        "required": False,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "properties": {
                                        "reason": {"type": "string", "maxLength": MAX_REASON}
                                    },
                                    "additionalProperties": False,
                                }
                            }
                        },
                    },
                ),
                "delete": _op(
                    "Return a drained device to service",
                    ADMIN_SCOPE,
                    {**done, **bad_request, **not_found},
                ),
            },
            "/users/{user}/server": {
                "parameters": [user_param],
                "delete": _op(
                    "Stop the user's default server through the hub",
                    ADMIN_SCOPE,
                    {
                        **done,
                        "202": _json(_ref("Done"), "the hub is stopping it"),
                        **bad_request,
                        **not_found,
                    },
                ),
            },
            "/users/{user}/servers/{name}": {
                "parameters": [
                    user_param,
                    {"name": "name", "in": "path", "required": True, "schema": name},
                ],
                "delete": _op(
                    "Stop one of the user's named servers through the hub",
                    ADMIN_SCOPE,
                    {
                        **done,
                        "202": _json(_ref("Done"), "the hub is stopping it"),
                        **bad_request,
                        **not_found,
                    },
                ),
            },
            "/me": {
                "get": _op(
                    "My servers, slices, limits and the capacity of my profiles",
                    None,
                    {"200": _json(_ref("Me"), "the caller's view")},
                )
            },
        },
        "components": {
            "securitySchemes": {
                "token": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "Authorization",
                    "description": "`token <JupyterHub API token>`",
                }
            },
            "responses": {
                "Forbidden": _json(_ref("Error"), "not authenticated, or a scope is missing"),
                "NotFound": _json(_ref("Error"), "no such device, allocation, user or server"),
                "Conflict": _json(_ref("Error"), "already done"),
                "BadRequest": _json(
                    _ref("Error"), "a parameter is malformed; the message says how"
                ),
                "TooLarge": _json(_ref("Error"), f"the body is over {MAX_BODY} bytes"),
            },
            "schemas": SCHEMAS,
        },
    }

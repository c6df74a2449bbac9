"""The OpenAPI 3 document of the JSON API, built in code so it always names the real prefix.

Paths, parameters and responses live here; the bodies' schemas in :mod:`.apischemas`. Every
response an endpoint can give (its errors too) is listed with a concrete schema."""

from __future__ import annotations

from ..._version import __version__
from ...hub.hubconfig import ADMIN_SCOPE, READ_SCOPE
from ...ledger.listing import FILTERS, SORTS
from .apischemas import SCHEMAS
from .apischemas import ref as _ref
from .courseopenapi import course_paths, course_schemas
from .inputs import MAX_BODY, MAX_ID, MAX_NAME, MAX_REASON, MAX_UUID
from .keepapi import keep_paths, keep_schemas
from .nodeschemas import node_schemas
from .paging import MAX_LIMIT, PAGINATION_MEDIA_TYPE, paging_parameters
from .presenceapi import presence_paths, presence_schemas
from .queueapi import queue_paths, queue_schemas
from .usageview import USER_SORTS


def _json(schema: dict, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


ERRORS = {
    "403": {"$ref": "#/components/responses/Forbidden"},
}
BAD_REQUEST = {"400": {"$ref": "#/components/responses/BadRequest"}}
TOO_LARGE = {"413": {"$ref": "#/components/responses/TooLarge"}}

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
        op["description"] = f"Needs the scope `{scope}`. {extra.get('description', '')}".strip()
    return op


def _node_paths(done: dict, not_found: dict) -> dict:
    node = [
        {
            "name": "node",
            "in": "path",
            "required": True,
            "schema": {
                "type": "string",
                "maxLength": MAX_NAME,
                "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]*$",
            },
        }
    ]
    reason = {
        "required": False,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {"reason": {"type": "string", "maxLength": MAX_REASON}},
                    "additionalProperties": False,
                }
            }
        },
    }
    return {
        "/nodes": {
            "get": _op(
                "Every node: service state, agent, orchestrator",
                READ_SCOPE,
                {"200": _json(_ref("Nodes"), "the nodes")},
            )
        },
        "/nodes/{node}/report": {
            "parameters": node,
            "post": _op(
                "A node agent's report of its node (gpulab node-agent)",
                None,
                {
                    "200": _json(_ref("NodeReported"), "taken"),
                    **BAD_REQUEST,
                    **TOO_LARGE,
                },
                description="Authenticated by the node's own agent token (`Authorization: "
                "token gpulabnode_…`, from `gpulab node-token <node>` or `POST "
                "nodes/{node}/token`), valid for that node only; a hub token is refused.",
                requestBody={
                    "required": True,
                    "content": {"application/json": {"schema": _ref("NodeReport")}},
                },
            ),
        },
        "/nodes/{node}/drain": {
            "parameters": node,
            "post": _op(
                "Drain a whole node: none of its slices is handed out, no server is placed there",
                ADMIN_SCOPE,
                {**done, **BAD_REQUEST, **not_found, **TOO_LARGE},
                requestBody=reason,
            ),
            "delete": _op(
                "Return a drained node to service",
                ADMIN_SCOPE,
                {**done, **BAD_REQUEST, **not_found},
            ),
        },
        "/nodes/{node}/token": {
            "parameters": node,
            "post": _op(
                "A new agent token for the node (made in the ledger if new); any earlier one "
                "is refused from now on",
                ADMIN_SCOPE,
                {"201": _json(_ref("NodeToken"), "the token, shown once"), **BAD_REQUEST},
            ),
            "delete": _op(
                "Revoke the node's agent token",
                ADMIN_SCOPE,
                {**done, **BAD_REQUEST, **not_found},
            ),
        },
    }


def openapi(prefix: str) -> dict:
    """The document, with ``servers`` set to ``prefix + "api"``. Every operation that changes
    something may answer 400: each reads its body (an empty one, or a JSON object of its
    fields), and a malformed or unexpected body is refused before anything changes; and 413, a
    body over :data:`~.inputs.MAX_BODY` (a roster CSV: :data:`~.inputs.MAX_CSV_BODY`) bytes."""
    doc = _document(prefix)
    for item in doc["paths"].values():
        for method, op in item.items():
            if method in ("post", "put", "patch", "delete"):
                op["responses"].setdefault("400", BAD_REQUEST["400"])
                op["responses"].setdefault("413", TOO_LARGE["413"])
    return doc


def _document(prefix: str) -> dict:
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
            "/": {
                "get": _op(
                    "This API's version and endpoints",
                    None,
                    {"200": _json(_ref("Root"), "where to start")},
                    security=[],
                )
            },
            "/openapi.json": {
                "get": _op(
                    "This document",
                    None,
                    {"200": _json({"type": "object"}, "the OpenAPI document")},
                    security=[],
                )
            },
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
                    "Open allocations with server state and last activity, a page at a time",
                    READ_SCOPE,
                    {
                        "200": _json(
                            _ref("AllocationsAnswer"),
                            "one page of the open allocations: `AllocationsPage` (JupyterHub's "
                            "paginated model) when the request sends `Accept: "
                            f"{PAGINATION_MEDIA_TYPE}`, else `Allocations` (at most "
                            f"{MAX_LIMIT} rows, `_pagination` beside them)",
                        ),
                        **bad_request,
                    },
                    description="A query argument other than "
                    "those below (and `token`) is a 400, so a misspelt filter is not read as "
                    "none.",
                    parameters=paging_parameters(
                        SORTS, {**{n: "exact match" for n in FILTERS}, "kind": "gpu, mig or shared"}
                    ),
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
                    "used in a period per group, and per user a page at a time",
                    READ_SCOPE,
                    {
                        "200": _json(
                            _ref("UsageAnswer"),
                            "the usage with one page of the users: `UsagePage` (the users as "
                            "JupyterHub's paginated model's items) when the request sends "
                            f"`Accept: {PAGINATION_MEDIA_TYPE}`, else `Usage` (at most "
                            f"{MAX_LIMIT} users in `gpu_hours.by_user`, `_pagination` beside)",
                        ),
                        **bad_request,
                    },
                    description="`gpu_hours.rows` holds the page's users' rows (the CSV has "
                    "every user's). A query argument other than those below (and `token`) is a "
                    "400.",
                    parameters=PERIOD
                    + paging_parameters(
                        USER_SORTS,
                        {"user": "exact match"},
                        ties="by user name, A to Z",
                        default="-gpu_hours",
                    ),
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
            **queue_paths(_op, _json, _ref),
            **keep_paths(_op, _json, _ref),
            **presence_paths(_op, _json, _ref),
            **_node_paths(done, not_found),
            **course_paths(_op, _json, _ref),
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
            "schemas": {
                **SCHEMAS,
                **node_schemas(),
                **queue_schemas(),
                **keep_schemas(),
                **presence_schemas(),
                **course_schemas(),
            },
        },
    }

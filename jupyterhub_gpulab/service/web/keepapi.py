"""Keep and Move to CPU in the JSON API (routes in :func:`keep_handlers`; the actions in
:mod:`..keeping`)::

POST users/<user>/server/keep              postpone my default server's GPU-idle stop by one
POST users/<user>/servers/<name>/keep      window, counted against my keeps per day  (own server)
POST users/<user>/server/move-to-cpu       stop my server and start it again with a CPU
POST users/<user>/servers/<name>/move-to-cpu  profile on the same home (202)           (own server)

Only the server's owner may ask (a 403 for anyone else's, admins included: a Keep is the user's
choice at the keyboard, counted against their allowance). The body is empty. With the login
cookie the ``_xsrf`` token must be sent (``X-XSRFToken``); the JupyterLab extension asks with its
server's token. Refusals: 400 a malformed name or body, 409 nothing to keep or move, 429 the
day's keeps are used up (the message says when they renew), 503 the culler is not running.
"""

from __future__ import annotations

from .. import keeping
from ..actions import ActionError
from . import inputs
from .apischemas import INT, INTEGER, STRING, TIME_OR_NULL, obj
from .base import JSONHandler, refuse


class OwnServerHandler(JSONHandler):
    """Checks that ``user`` in the path is the caller; ``server`` is the server name."""

    def own_server(self, user: str, name: str) -> str:
        self.require()
        user = inputs.name(user, "user name")
        name = inputs.name(name or "", "server name", empty=True)
        self.json_body()
        if user != self.current_user["name"]:
            raise refuse(403, f"Only {inputs.shown(user)} may keep or move their own servers.")
        return name


class KeepAPI(OwnServerHandler):
    async def post(self, user: str, name: str = ""):
        name = self.own_server(user, name)
        try:
            verdict = await keeping.keep_server(
                self.state, self.hub, self.settings["gpulab_culler"], self.current_user, name
            )
        except ActionError as e:
            raise refuse(e.status, e.message) from None
        self.write_json(
            {
                "status": 200,
                "message": verdict.message,
                "until": verdict.until.isoformat() if verdict.until else None,
                "used": verdict.used,
                "allowance": verdict.allowance,
            }
        )


class MoveToCPUAPI(OwnServerHandler):
    async def post(self, user: str, name: str = ""):
        name = self.own_server(user, name)
        try:
            message = await keeping.move_to_cpu(self.state, self.hub, self.current_user, name)
        except ActionError as e:
            raise refuse(e.status, e.message) from None
        self.write_json({"status": 202, "message": message}, 202)


def keep_handlers(api: str) -> list[tuple]:
    """Routes under ``api`` (the API's prefix), before its catch-all."""
    user = r"users/(?P<user>[^/]+)/"
    return [
        (api + user + r"server/keep", KeepAPI),
        (api + user + r"servers/(?P<name>[^/]*)/keep", KeepAPI),
        (api + user + r"server/move-to-cpu", MoveToCPUAPI),
        (api + user + r"servers/(?P<name>[^/]*)/move-to-cpu", MoveToCPUAPI),
    ]


# -- the OpenAPI description (merged into openapi.py's document) -------------------------------


def keep_schemas() -> dict:
    """``components/schemas`` for these endpoints."""
    return {
        "Kept": obj(
            {
                "status": INTEGER,
                "message": STRING,
                "until": TIME_OR_NULL,
                "used": INTEGER,
                "allowance": INT,
            },
            "A Keep granted: the GPU-idle stop comes no earlier than until; used: the caller's "
            "keeps today with this one; allowance: their keeps per day (null: no limit).",
        )
    }


def keep_paths(op, json, ref) -> dict:
    """``paths`` for these endpoints, built with openapi.py's ``_op``/``_json``/``ref``."""
    user = {"name": "user", "in": "path", "required": True, "schema": {"type": "string"}}
    server = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
    refused = {
        "409": json(ref("Error"), "nothing to keep or move: not running, no GPU, no warning"),
    }
    used_up = {"429": json(ref("Error"), "the day's keeps are used up; says when they renew")}
    down = {"503": json(ref("Error"), "the hub cannot be asked, or the culler is not running")}

    def keep_op():
        return op(
            "Postpone my server's GPU-idle stop by one window (one of my keeps per day); only "
            "while its GPU-idle warning is shown",
            None,
            {"200": json(ref("Kept"), "kept"), **refused, **used_up, **down},
        )

    def move_op():
        return op(
            "Stop my GPU server and start it again with a CPU profile on the same home (save "
            "open notebooks first)",
            None,
            {"202": json(ref("Done"), "the move is under way"), **refused, **down},
        )

    return {
        "/users/{user}/server/keep": {"parameters": [user], "post": keep_op()},
        "/users/{user}/servers/{name}/keep": {"parameters": [user, server], "post": keep_op()},
        "/users/{user}/server/move-to-cpu": {"parameters": [user], "post": move_op()},
        "/users/{user}/servers/{name}/move-to-cpu": {
            "parameters": [user, server],
            "post": move_op(),
        },
    }

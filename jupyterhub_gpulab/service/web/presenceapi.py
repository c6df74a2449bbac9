"""The JupyterLab extension's interaction report in the JSON API (the store: :mod:`..presence`)::

POST users/<user>/server/interaction           {"at": "<ISO time>"}: my default server's user
POST users/<user>/servers/<name>/interaction   last typed, clicked or scrolled in its page
GET  users/<user>/server[s/<name>]/interaction {"at": <the time held, or null>}  (own server)

The server extension posts with its server's own token (``$JUPYTERHUB_API_TOKEN``), so only
the server's user may report for it (a 403 for anyone else, admins included, as for Keep:
:mod:`.keepapi`). Refusals: 400 a malformed name or body, or a time without its zone, more than
:data:`~..presence.MAX_AHEAD_S` s ahead of the service's clock or more than
:data:`~..presence.MAX_AGE_S` s old. A report older than the one held is answered with the one
held and changes nothing.
"""

from __future__ import annotations

from datetime import datetime

from ... import clock
from ..presence import check
from . import inputs
from .apischemas import INTEGER, TIME_OR_NULL, obj
from .base import JSONHandler, refuse

#: The longest time text accepted (an ISO time with microseconds and a zone is 32 characters).
MAX_TIME_TEXT = 40


def reported_time(value: object) -> datetime:
    """The body's ``at``: an ISO 8601 time with its zone, else a 400 saying the form."""
    if isinstance(value, str) and len(value) <= MAX_TIME_TEXT:
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            pass
    raise refuse(
        400, f"{inputs.shown(value)} is not a time: send an ISO 8601 time such as "
        "2026-12-07T10:15:00Z.",
    )  # fmt: skip


class InteractionAPI(JSONHandler):
    def _own(self, user: str, name: str, fields: frozenset[str]) -> tuple[str, dict]:
        self.require()
        user = inputs.name(user, "user name")
        name = inputs.name(name or "", "server name", empty=True)
        body = self.json_body(fields)
        if user != self.current_user["name"]:
            raise refuse(403, f"Only {inputs.shown(user)} may report for their own servers.")
        return name, body

    def _answer(self, name: str) -> None:
        at = self.state.presence.last(self.current_user["name"], name)
        self.write_json({"status": 200, "at": at.isoformat() if at else None})

    def get(self, user: str, name: str = ""):
        name, _ = self._own(user, name, frozenset())
        self._answer(name)

    def post(self, user: str, name: str = ""):
        name, body = self._own(user, name, frozenset({"at"}))
        if "at" not in body:
            raise refuse(400, "The body must hold at: the time of the last interaction.")
        at = reported_time(body["at"])
        problem = check(at, clock.utcnow())
        if problem:
            raise refuse(400, problem)
        self.state.presence.report(self.current_user["name"], name, at)
        self._answer(name)


def presence_handlers(api: str) -> list[tuple]:
    """Routes under ``api`` (the API's prefix), before its catch-all."""
    user = r"users/(?P<user>[^/]+)/"
    return [
        (api + user + r"server/interaction", InteractionAPI),
        (api + user + r"servers/(?P<name>[^/]*)/interaction", InteractionAPI),
    ]


# -- the OpenAPI description (merged into openapi.py's document) -------------------------------


def presence_schemas() -> dict:
    """``components/schemas`` for these endpoints."""
    return {
        "Interaction": obj(
            {"status": INTEGER, "at": TIME_OR_NULL},
            "The server's last interaction the service holds (null: none since it started "
            "or since the service did).",
        )
    }


def presence_paths(op, json, ref) -> dict:
    """``paths`` for these endpoints, built with openapi.py's ``_op``/``_json``/``ref``."""
    user = {"name": "user", "in": "path", "required": True, "schema": {"type": "string"}}
    server = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
    body = {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["at"],
                    "properties": {"at": {"type": "string", "format": "date-time"}},
                    "additionalProperties": False,
                }
            }
        },
    }

    def ops():
        return {
            "get": op(
                "The last interaction the service holds for my server",
                None,
                {"200": json(ref("Interaction"), "held")},
            ),
            "post": op(
                "Report my server's last keystroke, click or scroll in JupyterLab (its "
                "extension does, with the server's token); the GPU-idle spare reads it",
                None,
                {"200": json(ref("Interaction"), "the time now held")},
                requestBody=body,
            ),
        }

    return {
        "/users/{user}/server/interaction": {"parameters": [user], **ops()},
        "/users/{user}/servers/{name}/interaction": {"parameters": [user, server], **ops()},
    }

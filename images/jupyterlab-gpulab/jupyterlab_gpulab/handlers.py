"""The server extension's endpoints, each asking the gpulab service with this server's own token
(``$JUPYTERHUB_API_TOKEN``; no token reaches the browser):

- ``GET <base_url>gpulab/me``: this server's slice and its user's GPU-hours (the status bar);
- ``POST <base_url>gpulab/keep`` and ``POST <base_url>gpulab/move-to-cpu``: Keep this server
  under its GPU-idle warning, or move it to a CPU profile (the service's
  ``POST users/<user>/server[s/<name>]/keep`` and ``…/move-to-cpu``). The answer is the
  service's status and ``{"status", "message"}``. The page saves open notebooks before it asks
  to move (``src/index.js``); this server is stopped right after the service answers.
- ``POST <base_url>gpulab/interaction`` with ``{"idle_s": <seconds since the last keystroke,
  click or scroll in the page>}``: this server's user is at the keyboard. The page sends it at
  most about once a minute, only after real interaction (not for an open tab or a running
  kernel); the time, on this server's clock, goes to the service's
  ``POST users/<user>/server[s/<name>]/interaction`` (``{"at": <ISO time>}``), which the
  culler's GPU-idle spare reads in place of the hub's ``last_activity``.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from urllib.parse import quote

from jupyter_server.base.handlers import APIHandler
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from .summary import summarise

#: Seconds to wait for the gpulab service.
TIMEOUT = 10


#: The actions the status bar may ask for.
ACTIONS = ("keep", "move-to-cpu")
#: The most seconds since the last interaction a report may say (the page reports within a
#: minute or two; an older one is no news about the keyboard).
MAX_IDLE_S = 3600


def action_path(user: str, server_name: str, action: str) -> str:
    """The service API path (after ``…/api/``) of ``action`` on ``user``'s server
    ``server_name`` (``""``: the default server)."""
    u = quote(user, safe="")
    if server_name:
        return f"users/{u}/servers/{quote(server_name, safe='')}/{action}"
    return f"users/{u}/server/{action}"


def interaction_time(body: bytes, now: datetime) -> datetime | None:
    """The last interaction a page's report ``body`` (``{"idle_s": seconds}``) says, on this
    server's clock ``now``; ``None`` for a body that is not such a report (0 to
    :data:`MAX_IDLE_S` seconds)."""
    try:
        idle = json.loads(body or b"null").get("idle_s")
    except (ValueError, AttributeError):
        return None
    if isinstance(idle, bool) or not isinstance(idle, (int, float)):
        return None
    if not 0 <= idle <= MAX_IDLE_S:
        return None
    return now - timedelta(seconds=idle)


class _ServiceHandler(APIHandler):
    async def ask_service(self, path: str, body: dict | None) -> None:
        """POST ``body`` to the service's ``path`` for this very server, with its token;
        answer with the service's status and ``{"status", "message"}``."""
        api = os.environ.get("GPULAB_API_URL", "")
        token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
        user = os.environ.get("JUPYTERHUB_USER", "")
        if not api or not token or not user:
            self.set_status(503)
            self.finish({"message": "no gpulab service is configured for this server"})
            return
        path = action_path(user, os.environ.get("JUPYTERHUB_SERVER_NAME", ""), path)
        headers = {"Authorization": f"token {token}", "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        request = HTTPRequest(
            api.rstrip("/") + "/" + path,
            method="POST",
            body=json.dumps(body).encode() if body is not None else b"",
            headers=headers,
            request_timeout=TIMEOUT * 3,
            connect_timeout=TIMEOUT,
        )
        try:
            response = await AsyncHTTPClient().fetch(request, raise_error=False)
            data = json.loads(response.body) if response.body else {}
        except (OSError, ValueError) as e:
            self.log.warning("gpulab service unreachable at %s: %s", api, e)
            self.set_status(502)
            self.finish({"message": "the gpulab service cannot be reached"})
            return
        code = response.code if response.code != 599 else 502
        self.set_status(code)
        self.finish({"status": code, "message": data.get("message", "")})


class ActionHandler(_ServiceHandler):
    """``POST gpulab/keep`` or ``gpulab/move-to-cpu`` for this very server."""

    @web.authenticated
    async def post(self, action: str):
        if action not in ACTIONS:
            self.set_status(404)
            self.finish({"message": "no gpulab service is configured for this server"})
            return
        await self.ask_service(action, None)


class InteractionHandler(_ServiceHandler):
    """``POST gpulab/interaction``: the page's user typed, clicked or scrolled ``idle_s``
    seconds ago."""

    @web.authenticated
    async def post(self):
        at = interaction_time(self.request.body, datetime.now(timezone.utc))
        if at is None:
            self.set_status(400)
            self.finish({"message": f'send {{"idle_s": 0 to {MAX_IDLE_S}}}'})
            return
        await self.ask_service("interaction", {"at": at.isoformat()})


class MeHandler(APIHandler):
    @web.authenticated
    async def get(self):
        api = os.environ.get("GPULAB_API_URL", "")
        token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
        if not api or not token:
            self.set_status(503)
            self.finish({"message": "no gpulab service is configured for this server"})
            return
        request = HTTPRequest(
            api.rstrip("/") + "/me",
            headers={"Authorization": f"token {token}", "Accept": "application/json"},
            request_timeout=TIMEOUT,
            connect_timeout=TIMEOUT,
        )
        try:
            response = await AsyncHTTPClient().fetch(request)
            data = json.loads(response.body)
        except HTTPClientError as e:
            self.log.warning("gpulab service answered %s for me", e.code)
            self.set_status(502)
            self.finish({"message": f"the gpulab service answered HTTP {e.code}"})
            return
        except (OSError, ValueError) as e:
            self.log.warning("gpulab service unreachable at %s: %s", api, e)
            self.set_status(502)
            self.finish({"message": "the gpulab service cannot be reached"})
            return
        self.finish(summarise(data, os.environ.get("JUPYTERHUB_SERVER_NAME", ""), os.environ))

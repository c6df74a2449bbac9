"""The hub's REST API, with the service's own token: who runs which server, and stop one.

The service asks the hub only for what the ledger cannot know (servers, last activity) and for
the actions the hub owns (stopping a server, which makes the spawner release its slice; starting
one with chosen options, for Move to CPU).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import datetime

from tornado.escape import url_escape
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from .. import clock
from ..errors import StatusError
from .servers import HubServer, servers_in
from .stopper import ServerStopper

log = logging.getLogger(__name__)

PAGE = 200
#: At most this many pages of active users are read (PAGE × MAX_PAGES users).
MAX_PAGES = 500


class HubError(StatusError):
    """The hub refused or failed a request: ``status`` is its HTTP status, ``message`` is safe
    to show (the hub's own message, never the token or the URL's query)."""


class HubUnreachable(HubError):
    """No answer from the hub at all (connection refused or reset, timeout: Tornado's 599):
    the request may not have happened; the hub said nothing about it."""


def _hub_message(e: HTTPClientError) -> str:
    """The hub's own error message (JSON ``message``), never its request or our token."""
    body = e.response.body if e.response is not None else b""
    try:
        message = json.loads(body).get("message") if body else None
    except (ValueError, AttributeError):
        message = None
    return message or f"the hub answered {e.code}"


class HubClient:
    """Async client of ``api_url`` (``.../hub/api/``) authenticated with ``token``."""

    def __init__(self, api_url: str, token: str, *, timeout: float = 20):
        self.api_url = api_url.rstrip("/") + "/"
        self.token = token
        self.timeout = timeout
        self.http = AsyncHTTPClient()
        self.active: dict[tuple[str, str], HubServer] | None = None
        self.active_at: datetime | None = None
        #: the listing of active users under way (:meth:`active_users`), with when it was asked
        self._listing: asyncio.Task | None = None
        #: the one stop-then-close sequence and its background tasks (:mod:`.stopper`)
        self.stopper = ServerStopper(self)

    async def _request(self, method: str, path: str, *, body=None) -> tuple[int, object]:
        req = HTTPRequest(
            self.api_url + path,
            method=method,
            headers={
                "Authorization": f"token {self.token}",
                "Accept": "application/jupyterhub-pagination+json",
                "Content-Type": "application/json",
            },
            body=json.dumps(body) if body is not None else None,
            allow_nonstandard_methods=True,
            request_timeout=self.timeout,
        )
        try:
            resp = await self.http.fetch(req)
        except HTTPClientError as e:
            if e.code == 599:
                raise HubUnreachable(599, "the hub did not answer") from None
            raise HubError(e.code, _hub_message(e)) from None
        except OSError as e:
            raise HubUnreachable(503, f"the hub cannot be reached ({e.strerror or e})") from None
        return resp.code, json.loads(resp.body) if resp.body else None

    async def active_users(self) -> list[dict]:
        """The hub's models of every user with a running or pending server (``name``,
        ``admin``, ``groups``, ``servers`` with ``ready``, ``pending``, ``started``,
        ``last_activity``, ``url``, ``user_options``), read page by page.

        Callers asking while a listing is under way share it: the culler's pass and the
        periodic refresh fell on the same second every minute, each a request per 200 users on
        the hub's one event loop (0.1-0.2 s a page at 1,000 users during a storm of starts,
        ``benchmarks/scale.py``). Nothing is kept once it is answered."""
        return (await self._shared_listing())[1]

    async def _shared_listing(self) -> tuple[datetime, list[dict]]:
        loop = asyncio.get_running_loop()
        listing = self._listing
        if listing is None or listing.done() or listing.get_loop() is not loop:
            listing = self._listing = loop.create_task(self._list_active())
        # shielded: a caller cancelled while waiting leaves the others' listing running
        asked_at, users = await asyncio.shield(listing)
        return asked_at, list(users)

    async def _list_active(self) -> tuple[datetime, list[dict]]:
        asked_at = clock.utcnow()
        users: list[dict] = []
        offset = 0
        for _ in range(MAX_PAGES):
            _, page = await self._request(
                "GET", f"users?state=active&include_stopped_servers=0&offset={offset}&limit={PAGE}"
            )
            items = page["items"] if isinstance(page, dict) else page
            users.extend(items)
            nxt = page.get("_pagination", {}).get("next") if isinstance(page, dict) else None
            if not nxt or not items:
                break
            offset = nxt.get("offset", offset + len(items))
        return asked_at, users

    def remember_active(self, users: list[dict], asked_at: datetime) -> dict:
        """Keep ``users``' running or pending servers (an answer of :meth:`active_users` asked
        at ``asked_at``) as ``self.active``, keyed by ``(user, server_name)``."""
        found = {s.key: s for s in servers_in(users) if s.state != "stopped"}
        self.active, self.active_at = found, asked_at
        return found

    async def refresh_active(self) -> dict[tuple[str, str], HubServer]:
        """Every running or pending server, keyed by ``(user, server_name)``; kept in
        ``self.active`` with the time of the answer in ``self.active_at``."""
        asked_at, users = await self._shared_listing()
        return self.remember_active(users, asked_at)

    async def token_scopes(self) -> frozenset[str]:
        """The scopes of this client's own token (``GET /hub/api/user``)."""
        _, model = await self._request("GET", "user")
        return frozenset(model.get("scopes") or ()) if isinstance(model, dict) else frozenset()

    async def user_model(self, user: str) -> dict:
        """The hub's model of ``user`` (``name``, ``admin``, ``groups`` …)."""
        _, model = await self._request("GET", f"users/{url_escape(user, plus=False)}")
        return model if isinstance(model, dict) else {}

    async def servers_of(self, user: str) -> list[HubServer]:
        """``user``'s servers, stopped named ones too (default server first)."""
        _, model = await self._request(
            "GET", f"users/{url_escape(user, plus=False)}?include_stopped_servers=1"
        )
        servers = servers_in([{**model, "name": user}])
        return sorted(servers, key=lambda s: (s.name != "", s.name))

    def _server_path(self, user: str, name: str) -> str:
        u = url_escape(user, plus=False)
        return f"users/{u}/servers/{url_escape(name, plus=False)}" if name else f"users/{u}/server"

    async def stop(self, user: str, name: str = "") -> bool:
        """Ask the hub to stop ``user``'s server ``name``; ``True`` once stopped, ``False`` when
        the hub is still stopping it (HTTP 202)."""
        code, _ = await self._request("DELETE", self._server_path(user, name))
        return code != 202

    async def start(self, user: str, name: str = "", options: dict | None = None) -> bool:
        """Ask the hub to start ``user``'s server ``name`` with ``options`` as its
        ``user_options`` (``{"profile": "cpu"}``: the spawner picks that profile as from its
        form); ``True`` once running, ``False`` while the hub is still starting it (HTTP 202).
        Raises :class:`HubError` with the hub's message (400: already running, or refused)."""
        code, _ = await self._request("POST", self._server_path(user, name), body=options or {})
        return code != 202

    async def wait_stopped(self, user: str, name: str = "", timeout: float = 120) -> bool:
        """Poll until the hub reports ``user``'s server ``name`` neither running nor pending."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                servers = await self.servers_of(user)
            except HubError as e:
                if e.status == 404:
                    return True
                log.warning("Waiting for %s/%s to stop: %s", user, name, e.message)
                servers = None
            if servers is not None and all(s.state == "stopped" for s in servers if s.name == name):
                return True
            await asyncio.sleep(1)
        return False

    async def call(self, method: str, path: str, body=None) -> tuple[int, object]:
        """Any hub API request (``path`` relative to ``…/hub/api/``): ``(status, JSON body)``;
        raises :class:`HubError` with the hub's message."""
        return await self._request(method, path, body=body)

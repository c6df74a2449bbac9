"""The request handler every page and API endpoint builds on: who is asking, with what scopes.

Authentication is JupyterHub's: ``HubOAuthenticated`` — the OAuth cookie for pages, an
``Authorization: token …`` header for the API. Authorisation is by the scopes the request's
token carries (the hub's answer for that token), never by its owner's admin flag:

- ``access:services!service=<name>`` (every user, via the ``user`` role): the user page and
  ``/api/me``;
- ``custom:gpulab:read``: the admin page (read-only) and the read API;
- ``custom:gpulab:admin`` (the ``gpulab-admin`` role, JupyterHub admins included): the actions.

The hub's answer about a token is cached ``c.GPULabService.auth_cache_max_age`` seconds, so a
revoked token, a removed group or role stops working within that time.

XSRF: a cookie-authenticated request that changes state must carry the ``_xsrf`` token (form
field or ``X-XSRFToken`` header); without it HubOAuth does not accept the cookie, so the request
is anonymous and refused. Token-authenticated requests cannot be forged by another site and need
none.

Bodies are streamed: the handler counts a body as it arrives and keeps at most
:data:`~.inputs.MAX_BODY` bytes of it, so a body of any size (up to
:data:`~.inputs.MAX_BODY_READ`) is answered with a 413 and a message, without being held in
memory. Hence the user is resolved once the body is in, in :meth:`BaseHandler.ready`, which runs
before every ``get``/``post``/``delete`` of every subclass (``__init_subclass__`` wraps them).
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
from typing import Any

from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated, UserNotAllowed
from tornado import httputil, web
from tornado.httputil import url_concat

from ... import clock
from ...hub.hubconfig import ADMIN_SCOPE, READ_SCOPE
from .. import actions
from .inputs import MAX_BODY, body_size, json_value, refuse, shown, storable
from .paging import PageError, parse_page
from .usageview import PeriodError, parse_period

__all__ = ["APIHandler", "BaseHandler", "JSONHandler", "OAuthCallback", "error_message", "refuse"]

log = logging.getLogger(__name__)

#: A scope every OAuth token of the hub's holds (reading its owner's name).
IDENTIFY_SCOPE = "read:users:name!user"


def error_message(status_code: int, reason: str, exc_info) -> str:
    exc = exc_info[1] if exc_info else None
    if isinstance(exc, web.HTTPError) and exc.log_message:
        return exc.log_message % exc.args if exc.args else exc.log_message
    if status_code >= 500:
        return "Internal error; the service log has the details."
    return reason


def _after_ready(method):
    """``method`` run after :meth:`BaseHandler.ready` (unless that finished the request)."""

    @functools.wraps(method)
    async def run(self, *args, **kwargs):
        await self.ready()
        if self._finished:
            return
        result = method(self, *args, **kwargs)
        if inspect.isawaitable(result):
            await result

    return run


@web.stream_request_body
class BaseHandler(HubOAuthenticated, web.RequestHandler):
    """Common ground: the lab state, the hub client, the current user and their scopes."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for verb in ("get", "post", "put", "delete"):
            if verb in vars(cls):
                setattr(cls, verb, _after_ready(vars(cls)[verb]))

    _resolving_user = False
    _denied: str | None = None
    #: gpulab scopes a login started by this request asks the hub for (besides access)
    login_scopes: frozenset[str] = frozenset()

    @property
    def hub_auth(self):
        return self.settings["hub_auth"]

    @property
    def state(self):
        return self.settings["gpulab_state"]

    @property
    def hub(self):
        return self.settings["gpulab_hub"]

    @property
    def prefix(self) -> str:
        return self.settings["gpulab_prefix"]

    def _request_summary(self) -> str:
        # the path only: query strings may carry tokens (?token=) or OAuth codes
        return f"{self.request.method} {self.request.path} ({self.request.remote_ip})"

    def set_default_headers(self):
        # as the hub's own pages: no framing by other sites (admin buttons must not be
        # clickjacked)
        self.set_header("Content-Security-Policy", "frame-ancestors 'self'")

    def check_xsrf_cookie(self):
        # Tornado calls this before prepare(), when it is not yet known whether a token
        # authenticates the request; HubOAuth calls it again while reading the cookie, and
        # refuses the cookie of a state-changing request without a valid _xsrf token.
        if self._resolving_user:
            self.hub_auth.check_xsrf_cookie(self)

    def body_limit(self) -> int:
        """The largest body (bytes) this request may carry: :data:`~.inputs.MAX_BODY`, unless a
        handler that reads more (a roster CSV) says so. Known before the body: path and headers."""
        return MAX_BODY

    def prepare(self):
        # before the body (streamed): data_received counts it and keeps its first bytes, up to
        # the limit
        self._body = bytearray()
        self._body_size = 0
        self._limit = self.body_limit()

    def data_received(self, chunk: bytes) -> None:
        self._body_size += len(chunk)
        if self._body_size <= self._limit:
            self._body += chunk

    async def ready(self) -> None:
        """Once the body is in: refuse it if too large (413), parse its form fields, and resolve
        the user from the token or the login cookie (whose form ``_xsrf`` field is in it)."""
        if self._body_size > self._limit:
            self._hub_auth_user_cache = self.current_user = None
            body_size(self._body_size, self._limit)
        self.request.body = body = bytes(self._body)
        if body:
            try:
                httputil.parse_body_arguments(
                    self.request.headers.get("Content-Type", ""),
                    body,
                    self.request.body_arguments,
                    self.request.files,
                    self.request.headers,
                )
            except httputil.HTTPInputError as e:
                self._hub_auth_user_cache = self.current_user = None
                raise refuse(400, f"The body cannot be read: {e}") from None
            for key, values in self.request.body_arguments.items():
                self.request.arguments.setdefault(key, []).extend(values)
        await self.resolve_user()
        # after the user (the page that says why is theirs): a form field must be UTF-8 text
        # that can be stored and shown (no NUL: Tornado would make it a space unasked)
        for key, values in self.request.body_arguments.items():
            field = f"form field {shown(key, 40)}"
            storable(key, "a form field's name")
            for raw in values:
                try:
                    storable(raw.decode("utf-8"), field)
                except UnicodeDecodeError:
                    raise refuse(400, f"The {field} is not UTF-8 text.") from None

    async def resolve_user(self) -> None:
        """Who is asking: the hub's answer for the request's token or login cookie (a subclass
        may authenticate otherwise: node agents, :mod:`.nodeapi`)."""
        self._resolving_user = True
        try:
            model = await self.hub_auth.get_user(self, sync=False)
        finally:
            self._resolving_user = False
        user = None
        if model:
            try:
                user = self.check_hub_user(model)
            except UserNotAllowed:
                self._denied = model["name"]
        self._hub_auth_user_cache = user
        self.current_user = user

    @property
    def token_authenticated(self) -> bool:
        """The request carried a token (header), not the login cookie."""
        return bool(getattr(self, "_token_authenticated", False))

    def get_login_url(self):
        # a user the hub knows but who may not use this service: no login loop, a 403
        if self._denied:
            raise refuse(403, f"{self._denied} may not use this service.")
        if self._hub_login_url is None:
            # ask for access to this service and the gpulab scopes this user is known to hold
            # (grants.py), not every scope the service may request: the hub warns about each
            # requested scope it has to drop. (An empty list would mean "all of them".)
            own = {s for s in self.hub_auth.access_scopes if "!service=" in s}
            scopes = sorted((own or {IDENTIFY_SCOPE}) | self.login_scopes)
            self._hub_login_url = url_concat(super().get_login_url(), {"scope": " ".join(scopes)})
        return self._hub_login_url

    @property
    def scopes(self) -> frozenset[str]:
        user = self.current_user
        return frozenset(user.get("scopes", ())) if user else frozenset()

    @property
    def can_read(self) -> bool:
        return self.can_admin or READ_SCOPE in self.scopes

    @property
    def can_admin(self) -> bool:
        # the request's scopes only: an admin's token limited to access:services is no admin
        # here (JupyterHub admins get custom:gpulab:admin through the gpulab-admin role)
        return ADMIN_SCOPE in self.scopes

    @property
    def who(self) -> str:
        return self.current_user["name"] if self.current_user else "anonymous"

    def period(self):
        """``[start, end)`` from the ``start`` / ``end`` query arguments (ISO dates in the lab's
        quota time zone; default: this week); a 400 saying the form otherwise."""
        try:
            return parse_period(
                self.get_query_argument("start", None),
                self.get_query_argument("end", None),
                clock.utcnow(),
                self.state.lab.tz,
            )
        except PeriodError as e:
            raise refuse(400, str(e)) from None

    def page(self, sorts, filters=(), *, paginated: bool = True, default_sort: str = "id",
             choices=None, others=None):  # fmt: skip
        """The :class:`~.paging.Page` this request's query asks for; a 400 saying the accepted
        form for a malformed ``offset``, ``limit``, ``sort`` or filter. With ``others`` (the
        query's other arguments the endpoint takes), an argument it does not take is a 400 too:
        a misspelt filter (``?usr=ada``) would otherwise answer every row as if it matched."""
        names = ("offset", "limit", "sort", *filters)
        if others is not None:
            self.only_arguments(*names, *others, what="this list")
        # the values as sent: tornado's get_query_argument turns control characters into
        # spaces and strips them, so "?user=%00" would read as no filter at all (every row)
        args = {n: self._raw_query_argument(n) for n in names}
        try:
            return parse_page(args, sorts=tuple(sorts), filters=tuple(filters),
                              default_sort=default_sort, paginated=paginated,
                              choices=choices)  # fmt: skip
        except PageError as e:
            raise refuse(400, str(e)) from None

    def only_arguments(self, *known: str, what: str = "this address") -> None:
        """A 400 naming the first query argument not in ``known`` (HubAuth's ``token`` is
        always let through, where JUPYTERHUB_ALLOW_TOKEN_IN_URL lets it take one): a misspelt
        filter would otherwise answer every row as if it matched."""
        unknown = sorted(set(self.request.query_arguments) - {*known, "token"})
        if unknown:
            raise refuse(
                400,
                f"Unknown query argument {shown(unknown[0], 40)}; {what} takes "
                f"{', '.join(known) if known else 'none'}.",
            )

    def _raw_query_argument(self, name: str) -> str | None:
        """Query argument ``name``'s last value, decoded and stripped of whitespace only."""
        values = self.request.query_arguments.get(name)
        return self.decode_argument(values[-1], name).strip(" \t") if values else None


class JSONHandler(BaseHandler):
    """API endpoints: JSON in and out; errors as ``{"status", "message"}``; no redirects."""

    def set_default_headers(self):
        super().set_default_headers()
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")

    def require(self, *, read: bool = False, admin: bool = False) -> None:
        if self.current_user is None:
            raise refuse(403, self.unauthenticated_message())
        if admin and not self.can_admin:
            raise refuse(403, f"This needs the scope {ADMIN_SCOPE}.")
        if read and not self.can_read:
            raise refuse(403, f"This needs the scope {READ_SCOPE}.")

    def unauthenticated_message(self) -> str:
        """Why this request has no user, as far as it shows: a token the hub did not accept for
        this service (unknown, expired, or without the service's access scope: JupyterHub's
        ``HubAuth`` tells these apart only in its log), or no token at all."""
        own = sorted(s for s in self.hub_auth.access_scopes if "!service=" in s)
        if self.request.headers.get("Authorization"):
            return (
                "Not authenticated: the hub did not accept this token for this service. It is "
                f"unknown or expired, or lacks the scope {' or '.join(own) or 'access:services'} "
                "(a token made at /hub/token without choosing scopes has it)."
            )
        return (
            "Not authenticated: send 'Authorization: token <JupyterHub token>', or open this "
            "service's page in the browser once while logged in to the hub (its login sets this "
            "service's cookie), and send the _xsrf token with changes."
        )

    def write_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.finish(json.dumps(data))

    def json_body(self, allowed: frozenset[str] | set[str] = frozenset()) -> dict:
        """The body as a JSON object holding only the keys in ``allowed`` (``{}`` when empty);
        a 400 saying what is wrong otherwise. :meth:`ready` already refused a body over
        :data:`~.inputs.MAX_BODY`."""
        if not self.request.body:
            return {}
        try:
            body = json_value(self.request.body)  # a 400 for a string no page can show
        except ValueError:
            raise refuse(400, "The body is not valid JSON.") from None
        if not isinstance(body, dict):
            raise refuse(400, "The body must be a JSON object.")
        unknown = sorted(set(body) - set(allowed))
        if unknown:
            may = ", ".join(repr(k) for k in sorted(allowed)) or "no fields"
            raise refuse(400, f"Unknown field {shown(unknown[0])} in the body; it may hold {may}.")
        return body

    def write_error(self, status_code: int, **kwargs):
        message = error_message(status_code, self._reason, kwargs.get("exc_info"))
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps({"status": status_code, "message": message}))


class APIHandler(JSONHandler):
    """An endpoint that runs an admin action (:mod:`..actions`): its message, or its refusal."""

    async def run(self, coro, status: int = 200) -> None:
        try:
            message = await coro
        except actions.ActionError as e:
            raise refuse(e.status, e.message) from None
        self.write_json({"status": status, "message": message}, status)


class OAuthCallback(HubOAuthCallbackHandler):
    """JupyterHub's OAuth callback, on the app's own HubOAuth (which keeps the OAuth state)."""

    @property
    def hub_auth(self):
        return self.settings["hub_auth"]

    def _request_summary(self) -> str:
        return f"{self.request.method} {self.request.path} ({self.request.remote_ip})"

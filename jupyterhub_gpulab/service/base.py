"""The request handler every page and API endpoint builds on: who is asking, with what scopes.

Authentication is JupyterHub's: ``HubOAuthenticated`` — the OAuth cookie for pages, an
``Authorization: token …`` header for the API. Authorisation is by scope:

- ``access:services!service=<name>`` (every user, via the ``user`` role): the user page and
  ``/api/me``;
- ``custom:gpulab:read``: the admin page (read-only) and the read API;
- ``custom:gpulab:admin`` (the ``gpulab-admin`` role), or being a JupyterHub admin: the
  actions.

XSRF: a cookie-authenticated request that changes state must carry the ``_xsrf`` token (form
field or ``X-XSRFToken`` header); without it HubOAuth does not accept the cookie, so the request
is anonymous and refused. Token-authenticated requests cannot be forged by another site and need
none. The user is resolved in :meth:`BaseHandler.prepare`, asynchronously.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated, UserNotAllowed
from tornado import web

from .. import clock
from .hubconfig import ADMIN_SCOPE, READ_SCOPE
from .usageview import PeriodError, parse_period

log = logging.getLogger(__name__)


def refuse(status: int, message: str) -> web.HTTPError:
    """An HTTP error whose ``message`` is shown to the caller (and logged verbatim)."""
    return web.HTTPError(status, "%s", message)


def error_message(status_code: int, reason: str, exc_info) -> str:
    exc = exc_info[1] if exc_info else None
    if isinstance(exc, web.HTTPError) and exc.log_message:
        return exc.log_message % exc.args if exc.args else exc.log_message
    if status_code >= 500:
        return "Internal error; the service log has the details."
    return reason


class BaseHandler(HubOAuthenticated, web.RequestHandler):
    """Common ground: the lab state, the hub client, the current user and their scopes."""

    _resolving_user = False
    _denied: str | None = None

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

    async def prepare(self):
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

    def get_login_url(self):
        # a user the hub knows but who may not use this service: no login loop, a 403
        if self._denied:
            raise refuse(403, f"{self._denied} may not use this service.")
        return super().get_login_url()

    @property
    def scopes(self) -> frozenset[str]:
        user = self.current_user
        return frozenset(user.get("scopes", ())) if user else frozenset()

    @property
    def can_read(self) -> bool:
        return self.can_admin or READ_SCOPE in self.scopes

    @property
    def can_admin(self) -> bool:
        # JupyterHub admins count as holding custom:gpulab:admin: JupyterHub refuses extra
        # scopes on its admin role. Their request passed hub_scopes (access to this service).
        return ADMIN_SCOPE in self.scopes or self.is_hub_admin()

    @property
    def who(self) -> str:
        return self.current_user["name"] if self.current_user else "anonymous"

    def is_hub_admin(self) -> bool:
        return bool(self.current_user and self.current_user.get("admin"))

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


class JSONHandler(BaseHandler):
    """API endpoints: JSON in and out; errors as ``{"status", "message"}``; no redirects."""

    def set_default_headers(self):
        super().set_default_headers()
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")

    def require(self, *, read: bool = False, admin: bool = False) -> None:
        if self.current_user is None:
            raise refuse(
                403,
                "Not authenticated: send 'Authorization: token <JupyterHub token>' "
                "(or log in to the hub and send the _xsrf token with changes).",
            )
        if admin and not self.can_admin:
            raise refuse(403, f"This needs the scope {ADMIN_SCOPE}.")
        if read and not self.can_read:
            raise refuse(403, f"This needs the scope {READ_SCOPE}.")

    def write_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.finish(json.dumps(data))

    def json_body(self) -> dict:
        if not self.request.body:
            return {}
        try:
            body = json.loads(self.request.body)
        except ValueError:
            raise refuse(400, "The body is not valid JSON.") from None
        if not isinstance(body, dict):
            raise refuse(400, "The body must be a JSON object.")
        return body

    def write_error(self, status_code: int, **kwargs):
        message = error_message(status_code, self._reason, kwargs.get("exc_info"))
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps({"status": status_code, "message": message}))


class OAuthCallback(HubOAuthCallbackHandler):
    """JupyterHub's OAuth callback, on the app's own HubOAuth (which keeps the OAuth state)."""

    @property
    def hub_auth(self):
        return self.settings["hub_auth"]

    def _request_summary(self) -> str:
        return f"{self.request.method} {self.request.path} ({self.request.remote_ip})"

"""HTML pages: the admin page (``/services/gpulab/``), the user page (``…/me``) and the admin
page's form actions (``POST …/actions/<action>``, answered with a redirect back).

Pages extend JupyterHub's ``page.html`` and use the hub's CSS, so they look like the hub.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from markupsafe import Markup
from tornado import web

from . import actions
from .base import BaseHandler, error_message, refuse
from .data import admin_data, usage_data, user_data
from .usageview import warnings_view

FLASH_COOKIE = "gpulab-flash"


class PageHandler(BaseHandler):
    """Renders our templates inside the hub's ``page.html``."""

    def template_namespace(self) -> dict:
        hub_prefix = self.hub_auth.hub_prefix
        static = hub_prefix + "static/"
        user = self.current_user
        return {
            "static_url": lambda path, include_version=True: static + path,
            "base_url": hub_prefix,
            "prefix": self.settings["gpulab_hub_base"],
            "service_prefix": self.prefix,
            "user": SimpleNamespace(
                name=user["name"], json_escaped_name=json.dumps(user["name"])[1:-1]
            )
            if user
            else None,
            "admin_access": False,
            "no_spawner_check": True,
            "parsed_scopes": {"admin-ui"} if self.is_hub_admin() else set(),
            "services": [],
            "login_url": self.hub_auth.login_url,
            "logout_url": hub_prefix + "logout",
            "logo_url": None,
            "version_hash": "",
            "announcement": None,
            "xsrf_token": self.xsrf_token.decode("ascii") if user else "",
            # one hidden field, rendered once: the admin page repeats it in every row's forms
            "xsrf_form": Markup(self.xsrf_form_html()) if user else "",
            "can_read": self.can_read,
            "can_admin": self.can_admin,
        }

    def render_page(self, name: str, **ns) -> None:
        template = self.settings["gpulab_jinja"].get_template(name)
        self.finish(template.render(**self.template_namespace(), **ns))

    def pop_flash(self) -> dict | None:
        raw = self.get_signed_cookie(FLASH_COOKIE, max_age_days=1)
        if raw is None:
            return None
        self.clear_cookie(FLASH_COOKIE, path=self.prefix)
        try:
            return json.loads(raw)
        except ValueError:
            return None

    def flash(self, kind: str, message: str) -> None:
        self.set_signed_cookie(
            FLASH_COOKIE,
            json.dumps({"kind": kind, "message": message}),
            expires_days=None,
            path=self.prefix,
            httponly=True,
        )

    def write_error(self, status_code: int, **kwargs):
        message = error_message(status_code, self._reason, kwargs.get("exc_info"))
        try:
            self.render_page(
                "gpulab_error.html",
                status_code=status_code,
                status_message=self._reason,
                message=message,
            )
        except Exception:
            super().write_error(status_code, **kwargs)


class AdminPage(PageHandler):
    """Every device, slice and open allocation; group usage; refusals; GPU-hours used in a
    period (``?start=&end=``, default this week) per group and user, with its CSV; the culler's
    warnings; the actions."""

    @web.authenticated
    async def get(self):
        if not self.can_read:
            # everyone reaches this URL from the hub's Services menu: show them their own page
            self.redirect(self.prefix + "me")
            return
        start, end = self.period()
        data = await admin_data(self.state, self.hub)
        _, data["gpu_hours"] = await usage_data(self.state, start, end)
        data["warnings"] = warnings_view(await asyncio.to_thread(self.state.ledger.warnings))
        self.render_page("gpulab_admin.html", data=data, flash=self.pop_flash())


class UserPage(PageHandler):
    @web.authenticated
    async def get(self):
        data = await user_data(self.state, self.hub, self.current_user)
        self.render_page("gpulab_user.html", data=data, flash=self.pop_flash())


class ActionPage(PageHandler):
    """``POST actions/(drain|undrain|release|stop|refresh)`` from the admin page's forms."""

    async def post(self, action: str):
        if self.current_user is None:
            raise refuse(403, "Log in to the hub first (and send the form's _xsrf token).")
        if not self.can_admin:
            raise refuse(403, "This needs the scope custom:gpulab:admin.")
        arg = self.get_body_argument
        by = self.who
        try:
            if action == "drain":
                device = arg("device")
                reason = arg(f"reason:{device}", "") or arg("reason", "")
                msg = await actions.drain(self.state, device, reason, by=by)
            elif action == "undrain":
                msg = await actions.undrain(self.state, arg("device"), by=by)
            elif action == "release":
                msg = await actions.release(self.state, self.hub, _int(arg("allocation")), by=by)
            elif action == "stop":
                user, server = await self._server_of(arg("allocation", ""))
                msg, _ = await actions.stop_server(self.state, self.hub, user, server, by=by)
            elif action == "refresh":
                msg = await actions.refresh_inventory(self.state, by=by)
            else:
                raise refuse(404, f"No action {action!r}.")
        except actions.ActionError as e:
            self.flash("danger", e.message)
        else:
            self.flash("success", msg)
        self.redirect(self.prefix)

    async def _server_of(self, allocation: str) -> tuple[str, str]:
        """The server holding ``allocation`` (the admin page's Stop buttons name allocations);
        else the form's ``user`` and ``server`` fields."""
        if not allocation:
            return self.get_body_argument("user"), self.get_body_argument("server", "")
        a = await asyncio.to_thread(self.state.ledger.get, _int(allocation))
        if a is None:
            raise actions.ActionError(404, f"No allocation {allocation}.")
        return a.user, a.server_name


def _int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise refuse(400, f"{value!r} is not an allocation id.") from None

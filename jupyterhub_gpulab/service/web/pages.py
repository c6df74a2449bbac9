"""HTML pages: the admin page (``/services/gpulab/``), the user page (``…/me``) and the admin
page's form actions (``POST …/actions/<action>``, answered with a redirect back).

Pages extend JupyterHub's ``page.html`` and use the hub's CSS, so they look like the hub.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from types import SimpleNamespace
from urllib.parse import parse_qsl, urlencode

from markupsafe import Markup
from tornado import web

from ... import clock
from ...ledger import aio, listing
from .. import actions, keeping
from . import inputs, paging, plotview
from .admindata import admin_page_data, page_usage
from .base import BaseHandler, error_message, refuse
from .courseview import my_courses
from .data import allocations_page, user_data
from .queueapi import bookings_data, my_entries
from .usageview import warnings_view

log = logging.getLogger(__name__)

FLASH_COOKIE = "gpulab-flash"
#: Remembers which gpulab scopes a login already asked the hub for (see PageHandler.prepare).
ASKED_COOKIE = "gpulab-scopes-asked"
#: The longest flash message (characters): the cookie that carries it must stay far below the
#: 4 kB browsers and the proxy accept.
MAX_FLASH = 1000


class PageHandler(BaseHandler):
    """Renders our templates inside the hub's ``page.html``.

    A page login asks the hub only for the access scope (the user is not known yet). Once they
    are, a page view whose token lacks gpulab scopes the config's roles grant them
    (:mod:`.grants`) logs in once more asking for those, so the hub never has to drop a
    requested scope, and an instructor added to a reader group gets read access on their next
    page view. A cookie records what was asked, so a scope the hub does not grant after all is
    asked for once, not in a loop.
    """

    #: who the login cookie names when the request itself is refused it (an error page's nav)
    _shown_user: dict | None = None

    async def ready(self):
        try:
            await super().ready()
        except web.HTTPError:  # a 413 is refused before the body (and its _xsrf) is read
            await self.name_cookie_user()
            raise
        if self.current_user is None:  # a change without its _xsrf token: a 403 follows
            await self.name_cookie_user()
        user = self.current_user
        if user is None or self.token_authenticated or self.request.method != "GET":
            return
        wanted = self.settings["gpulab_grants"].for_user(user["name"], user.get("groups", ()))
        if wanted <= self.scopes:
            return
        asked = json.dumps([user["name"], sorted(wanted)])
        if self.get_signed_cookie(ASKED_COOKIE, max_age_days=1) == asked.encode():
            return
        self.set_signed_cookie(
            ASKED_COOKIE, asked, expires_days=None, path=self.prefix, httponly=True
        )
        self.login_scopes = wanted
        self.redirect(self.get_login_url())

    async def name_cookie_user(self) -> None:
        """For the error page only: the user the login cookie names, without the ``_xsrf`` check
        the refused request failed, so the page shows its nav as they are logged in (their name,
        Logout, an _xsrf token for the next form), not "Login". It authorises nothing."""
        if self.request.method in ("GET", "HEAD") or self.token_authenticated:
            return
        token = self.hub_auth.get_token(self, in_cookie=True)
        if not token:
            return
        try:
            model = await self.hub_auth.user_for_token(
                token, session_id=self.hub_auth.get_session_id(self), sync=False
            )
            self._shown_user = self.check_hub_user(model) if model else None
        except Exception:  # an error page never fails for its nav
            log.debug("no user named for the error page", exc_info=True)

    def not_logged_in(self) -> web.HTTPError:
        """The 403 of a form posted with no user: a stale or missing ``_xsrf`` token when the
        login cookie names one (:meth:`name_cookie_user`), else no login."""
        if self._shown_user:
            return refuse(
                403,
                "The form came without a valid _xsrf token, so it was not taken as "
                f"{self._shown_user['name']}'s: reload the page and send it again. Nothing was "
                "changed.",
            )
        return refuse(403, "Log in to the hub first (and send the form's _xsrf token).")

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
            # display only (the hub's nav shows its own Admin link; the hub checks who uses it)
            "parsed_scopes": {"admin-ui"} if user and user.get("admin") else set(),
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
            "max_reason": inputs.MAX_REASON,
        }

    def render_page(self, name: str, **ns) -> None:
        template = self.settings["gpulab_jinja"].get_template(name)
        html = template.render(**self.template_namespace(), **ns)
        # a lone surrogate stored before the service refused them (inputs.storable) is shown as
        # U+FFFD: UTF-8 cannot encode it, and one course title must not 500 every student's page
        self.finish(inputs.UNSTORABLE_SURROGATE.sub("\ufffd", html))

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
            json.dumps({"kind": kind, "message": message[:MAX_FLASH]}),
            expires_days=None,
            path=self.prefix,
            httponly=True,
        )

    def write_error(self, status_code: int, **kwargs):
        message = error_message(status_code, self._reason, kwargs.get("exc_info"))
        if self.current_user is None and self._shown_user:
            self.current_user = self._shown_user  # the page's nav only: the request is over
        try:
            self.render_page(
                "gpulab_error.html",
                status_code=status_code,
                status_message=self._reason,
                message=message,
            )
        except Exception:
            super().write_error(status_code, **kwargs)


#: the admin page's arguments that the allocations table's links and filter form carry along
ALLOCATIONS_KEEP = ("start", "end", "devices_offset", "users_offset")


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
        page = self.page(listing.SORTS, listing.FILTERS, choices={"kind": listing.KINDS})
        devices = paging.Page(
            offset=self.offset_arg("devices_offset"), limit=paging.DEVICES_PER_PAGE
        )
        data = await admin_page_data(self.state, devices)
        data["allocations"], total, data["hub"] = await allocations_page(self.state, self.hub, page)
        args = {k: self.get_query_argument(k) for k in self.request.query_arguments}
        # the allocations table's links and filter form keep the period and the other tables'
        # pages; the devices' and users' pagers keep everything else
        data["pager"] = paging.pager(
            page, total, {k: v for k, v in args.items() if k in ALLOCATIONS_KEEP}
        )
        data["device_pager"] = paging.pager(
            devices, data["devices_total"], {k: v for k, v in args.items() if k != "devices_offset"},
            offset_name="devices_offset",
        )  # fmt: skip
        shown = {d["uuid"] for n in data["inventory"]["nodes"] for d in n["devices"]}
        data["gpu_hours"] = await page_usage(self.state, start, end)
        # GPU-hours per user, most first: USERS_PER_PAGE at a time (?users_offset=); the CSV
        # has them all
        gh = data["gpu_hours"]
        users = paging.Page(offset=self.offset_arg("users_offset"), limit=paging.USERS_PER_PAGE)
        everyone = gh["by_user"]
        gh["by_user"] = everyone[users.offset : users.offset + users.limit]
        data["user_pager"] = paging.pager(
            users, len(everyone), {k: v for k, v in args.items() if k != "users_offset"},
            offset_name="users_offset",
        )  # fmt: skip
        data["warnings"] = warnings_view(await aio.call(self.state.ledger.warnings))
        data["reservations"] = await aio.call(bookings_data, self.state, 14 * 24, unbooked=False)
        data["keeps"] = await aio.call(keeping.keeps_today, self.state)
        data["charts"] = {
            "devices": plotview.device_charts(self.state, self.state.history_s, shown, empty=False),
            "weekly": await aio.call(plotview.weekly_gpu_hours, self.state),
            "hours": self.state.history_s / 3600,
        }
        data["charts"]["unplotted"] = len(shown) - len(data["charts"]["devices"])
        # the page's place (filters, the tables' offsets, the period), handed back by its forms'
        # actions (back_query) so that an admin who stops a server stays where they were
        data["back"] = self.request.query
        self.render_page("gpulab_admin.html", data=data, flash=self.pop_flash())

    def offset_arg(self, name: str) -> int:
        """The whole number >= 0 in query argument ``name`` (0 when absent); a 400 otherwise."""
        try:
            return paging.parse_page({"offset": self.get_query_argument(name, None)},
                                     sorts=("id",)).offset  # fmt: skip
        except paging.PageError as e:
            raise refuse(400, str(e).replace("offset", name, 1)) from None


class UserPage(PageHandler):
    @web.authenticated
    async def get(self):
        data = await user_data(self.state, self.hub, self.current_user)
        name = self.current_user["name"]
        data["waitlist"] = await aio.call(my_entries, self.state.ledger, name)
        data["keeps"] = await aio.call(keeping.keeps_view, self.state, self.current_user)
        data["preemptions"] = [
            {"at": p.at.isoformat(), "server_name": p.server_name, "reason": p.reason}
            for p in await aio.call(self.state.ledger.preemptions, name)
            if p.at > clock.utcnow() - timedelta(days=7)
        ]
        data["courses"] = await my_courses(
            self.state, self.settings.get("gpulab_courses"), self.current_user
        )
        charts = plotview.user_charts(self.state, data, self.state.history_s)
        self.render_page("gpulab_user.html", data=data, charts=charts, flash=self.pop_flash())


#: The longest query string an action hands back to the admin page (its filters, its three
#: tables' places and the period fit in a tenth of it)
MAX_BACK = 2000


def back_query(back: str) -> str:
    """``"?…"``: the admin page's query string an action's form came from (its ``back`` field),
    decoded and encoded again so that only query arguments go into the redirect (never a path,
    a host or a line break); ``""`` when there is none or it is longer than :data:`MAX_BACK`."""
    if not back or len(back) > MAX_BACK:
        return ""
    pairs = [(k, v) for k, v in parse_qsl(back, keep_blank_values=True) if v.isprintable()]
    return "?" + urlencode(pairs) if pairs else ""


class ActionPage(PageHandler):
    """``POST actions/(drain|undrain|drainnode|undrainnode|release|stop|refresh)`` from the admin
    page's forms."""

    async def post(self, action: str):
        if self.current_user is None:
            raise self.not_logged_in()
        if not self.can_admin:
            raise refuse(403, "This needs the scope custom:gpulab:admin.")
        arg = self.get_body_argument
        by = self.who
        try:
            if action == "drain":
                device = inputs.device_uuid(arg("device"))
                reason = arg(f"reason:{device}", "") or arg("reason", "")
                msg = await actions.drain(self.state, device, inputs.drain_reason(reason), by=by)
            elif action == "undrain":
                msg = await actions.undrain(self.state, inputs.device_uuid(arg("device")), by=by)
            elif action == "drainnode":
                node = inputs.node_name(arg("node"))
                reason = inputs.drain_reason(arg(f"reason:node:{node}", "") or arg("reason", ""))
                msg = await actions.drain_node(self.state, node, reason, by=by)
            elif action == "undrainnode":
                msg = await actions.undrain_node(self.state, inputs.node_name(arg("node")), by=by)
            elif action == "release":
                aid = inputs.allocation_id(arg("allocation"))
                msg = await actions.release(self.state, self.hub, aid, by=by)
            elif action == "stop":
                user, server = await self._server_of(arg("allocation", ""))
                msg, _ = await actions.stop_server(self.state, self.hub, user, server, by=by)
            elif action == "refresh":
                msg = await actions.refresh_inventory(self.state, by=by)
            else:
                raise refuse(404, f"No action {inputs.shown(action)}.")
        except actions.ActionError as e:
            self.flash("danger", e.message)
        else:
            self.flash("success", msg)
        self.redirect(self.prefix + back_query(self.get_body_argument("back", "")))

    async def _server_of(self, allocation: str) -> tuple[str, str]:
        """The server holding ``allocation`` (the admin page's Stop buttons name allocations);
        else the form's ``user`` and ``server`` fields."""
        if not allocation:
            user = inputs.name(self.get_body_argument("user"), "user name")
            server = inputs.name(self.get_body_argument("server", ""), "server name", empty=True)
            return user, server
        aid = inputs.allocation_id(allocation)
        a = await aio.call(self.state.ledger.get, aid)
        if a is None:
            raise actions.ActionError(404, f"No allocation {aid}.")
        return a.user, a.server_name

"""The service's Tornado application: its routes under the service's prefix, the settings its
handlers read (``gpulab_*``), the one Jinja environment of the pages (ours, then JupyterHub's
``page.html``), and the request log (paths only: query strings may carry tokens).

Built once by :class:`jupyterhub_gpulab.service.app.Service`; no I/O here.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from jinja2 import ChoiceLoader, Environment, FileSystemLoader
from jupyterhub._data import DATA_FILES_PATH
from jupyterhub.services.auth import HubOAuth
from tornado import web

from ...hubapi.client import HubClient
from ..culling import Culler
from ..metrics import Exposition
from ..nodes import NodeReports
from ..state import LabState
from .api import api_handlers
from .base import OAuthCallback
from .courseapi import course_handlers
from .courseroutes import course_pages
from .filters import FILTERS
from .grants import RoleGrants
from .keeppages import KeepAction
from .metricsapi import MetricsHandler
from .pages import ActionPage, AdminPage, UserPage
from .queuepages import WaitlistAction

log = logging.getLogger("gpulab.service")

TEMPLATES = Path(__file__).parent / "templates"


def jinja_env() -> Environment:
    """One environment for the service's life: our templates, then JupyterHub's (for
    ``page.html``); autoescaped, as JupyterHub's are."""
    env = Environment(
        loader=ChoiceLoader(
            [
                FileSystemLoader(str(TEMPLATES)),
                FileSystemLoader(os.path.join(DATA_FILES_PATH, "templates")),
            ]
        ),
        autoescape=True,
    )
    env.filters.update(FILTERS)
    return env


def make_app(
    state: LabState,
    hub: HubClient,
    hub_auth: HubOAuth,
    *,
    cookie_secret: bytes,
    prefix: str,
    hub_base: str = "/",
    grants: RoleGrants | None = None,
    courses=None,
    nodes: NodeReports | None = None,
    metrics_user_labels: bool = False,
    culler: Culler | None = None,
) -> web.Application:
    """The Tornado application under ``prefix`` (``/services/gpulab/``); ``grants``: the gpulab
    scopes the hub's roles give each user, asked for at page logins (none by default);
    ``metrics_user_labels``: ``c.GPULabService.metrics_user_labels``; ``culler``: the service's
    culler, whose settings Keep judges by (:mod:`.keeping`; ``None``: Keep answers 503)."""
    handlers = [
        (prefix, AdminPage),
        (prefix + "me", UserPage),
        (prefix + "me/waitlist", WaitlistAction),
        (prefix + "me/(?P<action>keep|move-to-cpu)", KeepAction),
        (prefix + "actions/(?P<action>[a-z]+)", ActionPage),
        (prefix + "oauth_callback", OAuthCallback),
        *course_pages(prefix),
        *course_handlers(prefix),
        (prefix + "metrics", MetricsHandler),
        *api_handlers(prefix),
    ]
    return web.Application(
        handlers,
        cookie_secret=cookie_secret,
        xsrf_cookies=True,
        hub_auth=hub_auth,
        gpulab_state=state,
        gpulab_hub=hub,
        gpulab_prefix=prefix,
        gpulab_hub_base=hub_base,
        gpulab_grants=grants or RoleGrants(),
        gpulab_jinja=jinja_env(),
        gpulab_courses=courses,
        gpulab_nodes=nodes or NodeReports(state, timeout_s=60),
        gpulab_metrics=Exposition(state, hub, user_labels=metrics_user_labels),
        gpulab_culler=culler,
        log_function=_log_request,
    )


def _log_request(handler: web.RequestHandler) -> None:
    status = handler.get_status()
    level = logging.INFO if status < 400 else logging.WARNING if status < 500 else logging.ERROR
    # the path only: query strings may carry tokens or OAuth codes
    log.log(
        level,
        "%d %s %s %.1fms",
        status,
        handler.request.method,
        handler.request.path,
        1000 * handler.request.request_time(),
    )

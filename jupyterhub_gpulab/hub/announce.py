"""The culler's warnings on the hub's home page: ``c.JupyterHub.template_vars["announcement_home"]``.

JupyterHub calls a callable template variable with the current user on every render of every hub
page (one indexed query on the ledger each time) and inserts an announcement's text unescaped
(``{{ announcement | safe }}``), so :func:`warnings_html` escapes everything it writes. :class:`HomeAnnouncement` reads the user's
warnings from the ledger (the hub process's shared :class:`~jupyterhub_gpulab.ledger.Ledger` for
``c.GPULab.db_url``, the spawners' own) and never raises: a page must render even when the
ledger cannot be read.

This module imports nothing heavy at import time: ``configure_service`` uses it inside
``jupyterhub_config.py``.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Iterable
from typing import Any

from ..ledger.notices import OFFER_RULE, kind_of, offer_text

log = logging.getLogger("gpulab.announce")


def _active(user: Any) -> set[str]:
    """Names of ``user``'s servers that run or are starting (a JupyterHub ``User``; none for
    anything else)."""
    spawners = getattr(user, "spawners", None) or {}
    return {name for name, sp in dict(spawners).items() if getattr(sp, "active", False)}


def warnings_html(warnings: Iterable[Any], page_url: str, running: set[str] = frozenset()) -> str:
    """The user's warnings (``CullWarning`` rows) as an HTML fragment, every text escaped; ``""``
    when there are none. ``page_url``: the user's gpulab page, linked once; ``running``: the
    names of the user's active servers (an offer for one of them says how to take it anyway,
    :func:`offer_text`). A GPU-idle warning's link says where to keep the GPU or move to CPU."""
    warnings = list(warnings)

    def text(w) -> str:
        if w.rule != OFFER_RULE:
            return w.message
        return offer_text(w.message, w.server_name, w.server_name in running)

    items = [
        f'<li class="gpulab-{"warning" if kind_of(w.rule) == "warning" else "notice"}" '
        f'data-server="{html.escape(w.server_name)}" data-rule="{html.escape(w.rule)}">'
        f"{html.escape(text(w))}</li>"
        for w in warnings
    ]
    if not items:
        return ""
    # a GPU-idle warning's two choices (Keep, Move to CPU) are buttons on the gpulab page
    idle = any(w.rule == "gpu-idle" for w in warnings)
    link = "Keep your GPU or move to CPU" if idle else "Your GPU and its limits"
    return (
        '<div class="gpulab-warnings"><ul class="list-unstyled mb-1">'
        + "".join(items)
        + f'</ul><a href="{html.escape(page_url)}">{link}</a></div>'
    )


class HomeAnnouncement:
    """``announcement_home(user) -> str``: ``before`` (an announcement the config already had,
    a string or a callable), then the user's culler warnings."""

    def __init__(self, config: Any, page_url: str, before: Any = None):
        self.config = config
        self.page_url = page_url
        self.before = before

    def __deepcopy__(self, memo):
        # traitlets copies config values; keep one announcement per hub process
        return self

    _url: str | None = None

    def ledger(self):
        from ..lab.config import GPULab
        from ..ledger import shared_ledger

        if self._url is None:
            self._url = GPULab(config=self.config).db_url
        return shared_ledger(self._url)

    def _before(self, user) -> str:
        if callable(self.before):
            try:
                return self.before(user) or ""
            except Exception:
                log.exception("The configured announcement_home failed")
                return ""
        return self.before if isinstance(self.before, str) else ""

    def __call__(self, user) -> str:
        text = self._before(user)
        name = getattr(user, "name", None)
        if not name:
            return text
        try:
            ours = warnings_html(self.ledger().warnings(name), self.page_url, _active(user))
        except Exception:
            log.exception("Cannot read %s's GPU warnings from the ledger", name)
            return text
        return f"{text}{ours}" if text and ours else text or ours

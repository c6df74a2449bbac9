"""The Keep and Move to CPU buttons of the user's gpulab page, under a GPU-idle warning
(``POST me/keep`` and ``POST me/move-to-cpu`` with the form's ``server`` field; answered with a
redirect back to the page and a flash message). The rules are :mod:`..keeping`'s; the caller's
own servers only, as in :mod:`.keepapi`."""

from __future__ import annotations

from .. import keeping
from ..actions import ActionError
from . import inputs
from .pages import PageHandler


class KeepAction(PageHandler):
    """``POST me/keep`` or ``me/move-to-cpu`` with ``server`` (the server name; empty for the
    default server)."""

    async def post(self, action: str):
        if self.current_user is None:
            raise self.not_logged_in()
        name = inputs.name(self.get_body_argument("server", ""), "server name", empty=True)
        try:
            if action == "keep":
                verdict = await keeping.keep_server(
                    self.state, self.hub, self.settings["gpulab_culler"], self.current_user, name
                )
                message = verdict.message
            else:
                message = await keeping.move_to_cpu(self.state, self.hub, self.current_user, name)
        except ActionError as e:
            self.flash("danger", e.message)
        else:
            self.flash("success", message)
        self.redirect(self.prefix + "me")

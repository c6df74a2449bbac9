"""The waitlist's form on the user's gpulab page (the entries it shows come from
:func:`.queueapi.my_entries`): joining or leaving a queue (``POST me/waitlist``, answered with a redirect
back to the page and a flash message)."""

from __future__ import annotations

from ...ledger import aio
from .base import refuse
from .inputs import shown
from .pages import PageHandler
from .queueapi import join_queue


class WaitlistAction(PageHandler):
    """``POST me/waitlist`` with ``action`` (``join`` or ``leave``) and ``profile``."""

    async def post(self):
        if self.current_user is None:
            raise self.not_logged_in()
        action = self.get_body_argument("action", "")
        slug = self.get_body_argument("profile", "")
        if action == "join":
            _, message = await join_queue(self.state, self.current_user, slug)
            self.flash("success", message)
        elif action == "leave":
            name = self.current_user["name"]
            left = await aio.call(self.state.ledger.leave_waitlist, name, slug)
            self.flash(
                "success" if left else "warning",
                f"You left the queue for {slug}." if left else f"You are not queued for {slug}.",
            )
        else:
            raise refuse(400, f"{shown(action)} is not an action here; send join or leave.")
        self.redirect(self.prefix + "me")

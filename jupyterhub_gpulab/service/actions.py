"""The admin actions, shared by the admin page's forms and the JSON API.

Each returns a short message for the admin and raises :class:`ActionError` (an HTTP status and
a message safe to show) when it cannot be done. Database and NVML work runs in a thread.
"""

from __future__ import annotations

import logging

from ..errors import ConfigError, StatusError
from ..hubapi.client import HubClient, HubError
from ..ledger import aio
from ..units import counted
from .state import LabState
from .web.inputs import MAX_REASON, shown

log = logging.getLogger(__name__)

#: ``end_reason`` of allocations an admin closes.
ADMIN_REASON = "admin"


class ActionError(StatusError):
    """An admin action refused: ``status`` (HTTP) and a ``message`` for the admin."""


def _device(state: LabState, uuid: str) -> dict:
    for d in state.ledger.devices():
        if d["uuid"] == uuid:
            return d
    raise ActionError(404, f"No device {shown(uuid)} in the ledger.")


async def drain(state: LabState, uuid: str, reason: str = "", *, by: str) -> str:
    """Take a device out of service: its free slices are no longer handed out; holders keep
    theirs until they stop. Callers check ``reason`` (:func:`.web.inputs.drain_reason`); a longer
    one is cut to what the ledger holds."""
    reason = (reason or "").strip()[:MAX_REASON] or f"drained by {by}"

    def work():
        d = _device(state, uuid)
        state.ledger.set_drained(uuid, True, reason)
        return d

    d = await aio.call(work)
    log.info("%s drained %s (%s): %s", by, uuid, d["name"], reason)
    return f"GPU {d['index']} ({d['name']}) is drained: no new allocations on it."


async def undrain(state: LabState, uuid: str, *, by: str) -> str:
    def work():
        d = _device(state, uuid)
        state.undrain(uuid)
        return d

    d = await aio.call(work)
    log.info("%s returned %s (%s) to service", by, uuid, d["name"])
    return f"GPU {d['index']} ({d['name']}) is back in service."


async def drain_node(state: LabState, node: str, reason: str = "", *, by: str) -> str:
    """Take a whole node out of service: none of its slices is handed out, and the Swarm backend
    places no CPU server there; holders keep theirs until they stop. Callers check ``reason``."""
    reason = (reason or "").strip()[:MAX_REASON] or f"drained by {by}"
    if not await aio.call(state.ledger.set_node_drained, node, True, reason):
        raise ActionError(404, f"No node {shown(node)} in the ledger.")
    log.info("%s drained node %s: %s", by, node, reason)
    return f"Node {node} is drained: no new servers on it; running ones keep their GPUs."


async def undrain_node(state: LabState, node: str, *, by: str) -> str:
    if not await aio.call(state.ledger.set_node_drained, node, False):
        raise ActionError(404, f"No node {shown(node)} in the ledger.")
    n = await aio.call(state.ledger.node, node)
    log.info("%s returned node %s to service", by, node)
    still = n.why_out() if n is not None else None
    if still:
        return f"Node {node} is no longer drained, but still out of service: {still}."
    return f"Node {node} is back in service."


async def issue_node_token(state: LabState, node: str, *, by: str) -> str:
    """A new agent token for ``node`` (made in the ledger if new), replacing any earlier one."""
    token = await aio.call(state.ledger.issue_node_token, node)
    log.info("%s issued a new agent token for node %s", by, node)
    return token


async def revoke_node_token(state: LabState, node: str, *, by: str) -> str:
    if not await aio.call(state.ledger.revoke_node_token, node):
        raise ActionError(404, f"No node {shown(node)} in the ledger.")
    log.info("%s revoked node %s's agent token", by, node)
    return f"Node {node}'s agent token is revoked: its reports are refused until it gets a new one."


async def release(state: LabState, hub: HubClient, allocation_id: int, *, by: str) -> str:
    """Close a *stale* allocation and free its slice: its server is not running, or its slice
    left the inventory. An allocation whose server runs is refused (409): its container still
    uses the GPU, so freeing the slice would hand it to a second user; stop the server instead.
    """
    a = await aio.call(state.ledger.get, allocation_id)
    if a is None:
        raise ActionError(404, f"No allocation {allocation_id}.")
    if not a.open:
        raise ActionError(409, f"Allocation {allocation_id} is already closed ({a.end_reason}).")
    if a.slice_id in await aio.call(state.present_slice_ids):
        try:
            servers = await hub.servers_of(a.user)
        except HubError as e:
            raise ActionError(
                503,
                f"Cannot check {a.user}'s servers with the hub ({e.message}); nothing released.",
            ) from None
        live = next((s for s in servers if s.name == a.server_name and s.state != "stopped"), None)
        if live is not None:
            label = (
                f"{a.user}'s server {a.server_name!r}" if a.server_name else f"{a.user}'s server"
            )
            raise ActionError(
                409,
                f"{label} is {live.state}: its container still uses this slice, so releasing it "
                "would give the GPU to two users. Stop the server instead.",
            )
    if not await aio.call(state.ledger.release, allocation_id, ADMIN_REASON):
        raise ActionError(409, f"Allocation {allocation_id} was closed meanwhile.")
    log.info("%s released allocation %d (%s on %s)", by, a.id, a.user, a.slice_id)
    return f"Released allocation {a.id}: {a.user}'s slice {a.slice_id} is free."


async def stop_server(
    state: LabState, hub: HubClient, user: str, name: str = "", *, by: str
) -> tuple[str, bool]:
    """Stop ``user``'s server ``name`` through the hub; returns a message and whether it is
    stopped already (else the hub is still stopping it). The spawner releases its slice; once
    the hub reports the server gone, allocations it held before the stop that are still open
    are closed too (so a server the spawner could not clean up frees its slice)."""
    held = await aio.call(
        lambda: [a.id for a in state.ledger.open_allocations(user) if a.server_name == name]
    )
    label = f"{user}'s server {name!r}" if name else f"{user}'s server"

    async def finish():
        for aid in held:
            if await aio.call(state.ledger.release, aid, ADMIN_REASON):
                log.info("Released allocation %d of stopped %s", aid, label)
        try:
            await hub.refresh_active()
        except HubError as e:
            log.warning("Cannot refresh servers from the hub: %s", e.message)

    def not_stopped():
        log.warning("%s did not stop; its allocations stay open", label)

    try:
        stopped = await hub.stopper.stop(user, name, finish, if_not_stopped=not_stopped)
    except HubError as e:
        raise ActionError(
            e.status if e.status in (400, 404) else 502, f"Cannot stop {label}: {e.message}"
        ) from None
    log.info("%s stopped %s (allocations %s)", by, label, held)
    if stopped:
        return f"Stopped {label}.", True
    return f"Stopping {label}…", False


async def refresh_inventory(state: LabState, *, by: str) -> str:
    """Re-read the inventory (NVML or the config) and sync the ledger with it."""
    if state.agents_only:
        return (
            "Every node's inventory comes from its agent, at each report: there is nothing to "
            "re-read here."
        )
    try:
        report = await aio.call(state.refresh_inventory)
    except ConfigError as e:
        raise ActionError(409, "The inventory cannot be read: " + "; ".join(e.errors)) from None
    log.info(
        "%s re-read the inventory: %d added, %d updated, %d vanished",
        by,
        len(report.added),
        len(report.updated),
        len(report.vanished),
    )
    msg = (
        f"Inventory re-read: {counted(len(report.added), 'slice')} added, {len(report.updated)} changed, "
        f"{len(report.vanished)} gone."
    )
    if report.vanished_held:
        who = ", ".join(f"{a.user} ({a.slice_id})" for a in report.vanished_held)
        msg += f" Allocations on vanished slices: {who}."
    return msg

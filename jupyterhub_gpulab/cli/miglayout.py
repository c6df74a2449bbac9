"""``gpulab mig-layout``: re-lay a MIG GPU (class 7x1g.10gb ↔ research 2x3g.40gb) with the ledger
kept in step::

    gpulab mig-layout -f jupyterhub_config.py GPU-UUID 2x3g.40gb [--wait SECONDS]

1. Drains the GPU in the ledger (no new allocation lands on it).
2. With open allocations on it: waits up to ``--wait`` seconds for their servers to stop or be
   culled; still held, it refuses naming the holders and returns the GPU to how it was.
3. Re-lays it through NVML (:mod:`jupyterhub_gpulab.inventory.miglayout`): never a MIG mode change
   or a GPU reset.
4. Re-reads the inventory into the ledger (the MIG instances destroyed are gone for good, the new
   ones are offered), then returns the GPU to service, unless it was drained for another reason.

It runs on the GPU's host as root (NVML's MIG configuration capability), with the hub's config
(for the ledger's database). A kill part way leaves the GPU drained, marked "MIG re-layout to
…"; the same command again finishes the layout and syncs the ledger. :func:`relay` is the action
itself, for a caller other than the command line.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from ..inventory.layoutplan import DRAIN_REASON
from ..inventory.miglayout import (
    LayoutError,
    LayoutIncomplete,
    LayoutRefused,
    apply,
    format_layout,
    parse_layout,
)
from ..lab.config import GPULab

__all__ = ["EXIT", "add_mig_layout_command", "cmd_mig_layout", "relay"]

#: exit statuses: done; refused with nothing changed; bad usage; changed part way (run again)
EXIT = {"done": 0, "refused": 1, "usage": 2, "partial": 3}
POLL_S = 5.0

HELP = """Re-lay a MIG GPU's instances (e.g. 7x1g.10gb <-> 2x3g.40gb or 1x7g.80gb) and keep the
ledger in step: drain it, wait for (or refuse, naming) the holders of its MIG instances, destroy
and create GPU and compute instances through NVML, re-read the inventory into the ledger, return
it to service. Never changes MIG mode or resets the GPU. Runs on the GPU's host as root, with the
hub's config and database; on a lab whose GPUs come from node agents (Swarm), the node agent
would do it on the GPU's node: not yet built. Exit 0 done, 1 refused (nothing changed), 2 bad
usage, 3 stopped part way (run it again)."""


def relay(
    gpulab: GPULab,
    ledger: Any,
    uuid: str,
    layout: str,
    *,
    wait_s: float = 0.0,
    nvml: Any = None,
    say: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Re-lay GPU ``uuid`` as ``layout`` with ``ledger`` kept in step; returns an exit status of
    :data:`EXIT`, having told the admin (``say``) what happened and what to do."""
    try:
        target = parse_layout(layout)
    except LayoutError as e:
        say(f"gpulab: {e}")
        return EXIT["usage"]
    inventory = gpulab.read_inventory(nvml)
    if inventory.source != "nvml":
        say(f"gpulab: {_not_nvml(inventory)}")
        return EXIT["refused"]
    node = gpulab.node_name
    device = next(
        (d for d in ledger.devices() if d["uuid"] == uuid and d["node"] == node), None
    ) or next((d for d in inventory.devices if d.uuid == uuid), None)
    if device is None:
        say(f"gpulab: no GPU {uuid} on this host (node {node}); `gpulab inventory` lists them")
        return EXIT["usage"]
    if not isinstance(device, dict):  # NVML has it, the ledger not yet: record it first
        ledger.sync_inventory(inventory, node=node)
        device = next(d for d in ledger.devices() if d["uuid"] == uuid)
    label = f"GPU {device['index']} ({device['name']}, {uuid})"
    was_drained = bool(device["drained"]) and not (device.get("drain_reason") or "").startswith(
        DRAIN_REASON
    )
    ledger.set_drained(
        uuid,
        True,
        device.get("drain_reason") if was_drained else DRAIN_REASON + format_layout(target),
    )

    def back(code: int) -> int:
        if not was_drained:
            ledger.set_drained(uuid, False)
        return code

    holders = _holders(ledger, uuid)
    deadline = time.monotonic() + max(wait_s, 0.0)
    if holders and wait_s > 0:
        say(f"{label} is drained; waiting up to {wait_s:g}s for {len(holders)} holder(s) to stop")
    while holders and time.monotonic() < deadline:
        sleep(min(POLL_S, max(deadline - time.monotonic(), 0.0)))
        holders = _holders(ledger, uuid)
    if holders:
        say(
            f"gpulab: {label} still has open allocations, so its MIG instances stay as they are: "
            + "; ".join(holders)
            + ". Stop those servers (or let the culler), or pass --wait SECONDS to drain it and "
            "wait for them."
        )
        return back(EXIT["refused"])
    try:
        before, done = apply(nvml, uuid, target)
    except LayoutError as e:
        say(f"gpulab: {e}")
        return back(EXIT["usage"])
    except LayoutRefused as e:
        _sync(gpulab, ledger, nvml, node, say)
        say(f"gpulab: {label}: {e}")
        return back(EXIT["refused"])
    except LayoutIncomplete as e:
        _sync(gpulab, ledger, nvml, node, say)
        say(
            f"gpulab: {label}: {e}. It stays drained; the ledger lists the MIG instances it has "
            "now."
        )
        return EXIT["partial"]
    report = _sync(gpulab, ledger, nvml, node, say)
    if not was_drained:
        ledger.set_drained(uuid, False)
    now = [s for s in ledger.slices() if s["device_uuid"] == uuid and s["present"]]
    if done.empty:
        say(f"{label} already is {format_layout(target)}; the ledger matches it.")
    else:
        say(
            f"{label} was {format_layout(before) or 'empty'}, is now {format_layout(target)}: "
            + ", ".join(f"{s['id']} ({s['mig_profile']})" for s in now)
            + f". {len(report.vanished)} MIG instance(s) left the ledger, {len(report.added)} "
            "joined it. A running gpulab service shows the change after its next inventory "
            "re-read (admin page: Re-read inventory)."
        )
    if was_drained:
        say(f"{label} stays drained, as it was before: {device.get('drain_reason') or ''}")
    return EXIT["done"]


def _holders(ledger: Any, uuid: str) -> list[str]:
    on_gpu = {s["id"] for s in ledger.slices() if s["device_uuid"] == uuid}
    return [
        f"{a.user}'s server {a.server_name or 'default'!r} (allocation {a.id}, {a.slice_id})"
        for a in ledger.open_allocations()
        if a.slice_id in on_gpu
    ]


def _sync(gpulab: GPULab, ledger: Any, nvml: Any, node: str, say) -> Any:
    report = ledger.sync_inventory(gpulab.read_inventory(nvml), node=node)
    for a in report.vanished_held:  # cannot happen while drained and empty; said if it does
        say(f"warning: allocation {a.id} ({a.user}) is on {a.slice_id}, which is gone")
    return report


def _not_nvml(inventory: Any) -> str:
    if inventory.source == "declared":
        return (
            "the GPUs are declared in c.GPULab.inventory, not read from NVML, so gpulab cannot "
            "re-lay them: change the MIG instances with nvidia-smi and the declaration to match"
        )
    if inventory.source == "agents":
        return (
            "every node's GPUs come from its node agent (c.GPULab.inventory_source = 'agents'): "
            "re-laying MIG through the node agent is not yet built; run nvidia-smi mig on the "
            "node with the GPU drained, and the agent's next report updates the ledger"
        )
    return "NVML cannot be read on this host: " + " ".join(inventory.warnings)


def cmd_mig_layout(args, nvml: Any = None) -> int:
    from ..ledger import Ledger
    from .common import _config

    gl = GPULab(config=_config(args.config))
    ledger = Ledger(gl.db_url, auto_upgrade=False)
    try:
        return relay(
            gl,
            ledger,
            args.gpu,
            args.layout,
            wait_s=args.wait,
            nvml=nvml,
            say=lambda m: print(m, file=sys.stderr if m.startswith("gpulab:") else sys.stdout),
        )
    finally:
        ledger.close()


def add_mig_layout_command(add) -> None:
    """Register ``mig-layout`` with :func:`~jupyterhub_gpulab.cli.build_parser`'s ``add``."""
    p = add("mig-layout", cmd_mig_layout, HELP, config_required=True)
    p.add_argument("gpu", metavar="GPU-UUID", help="the GPU (GPU-…, as `gpulab inventory` shows)")
    p.add_argument("layout", help="the MIG layout: 7x1g.10gb, 2x3g.40gb, 1x4g.40gb,1x3g.40gb …")
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for holders of its MIG instances to stop (default: refuse at once)",
    )

"""``gpulab inventory``, ``allocations``, ``upgrade-db`` and ``check-auth``."""

from __future__ import annotations

import json
from dataclasses import asdict

from ..lab.config import GPULab
from ..units import format_bytes
from .common import _config, _ledger


def cmd_inventory(args) -> int:
    gl = GPULab(config=_config(args.config))
    inv = gl.read_inventory()
    node = gl.node_name
    if args.json:
        print(
            json.dumps(
                {
                    "source": inv.source,
                    "node": node,
                    "warnings": list(inv.warnings),
                    "devices": [asdict(d) for d in inv.devices],
                    "slices": [
                        {**asdict(s), "kind": s.kind.value, "isolation": s.isolation}
                        for s in inv.slices
                    ],
                },
                indent=2,
            )
        )
        return 0
    print(f"source: {inv.source}   node: {node}")
    for w in inv.warnings:
        print(f"warning: {w}")
    if inv.source == "agents":
        print("every node's GPUs come from its node agent: `gpulab nodes` lists them")
    elif not inv.devices:
        print("no GPUs: only CPU-only profiles can be spawned")
    by_device: dict[str, list] = {}
    for s in inv.slices:
        by_device.setdefault(s.device_uuid, []).append(s)
    for d in inv.devices:
        extra = " (MIG mode)" if d.mig_enabled else ""
        if d.vgpu_type:
            extra += f" (vGPU {d.vgpu_type})"
        cc = (
            f" cc {d.compute_capability[0]}.{d.compute_capability[1]}"
            if d.compute_capability
            else ""
        )
        print(f"GPU {d.index}: {d.name}{extra}, {format_bytes(d.memory_bytes)}{cc}  {d.uuid}")
        for s in by_device.get(d.uuid, []):
            print(f"    {s.kind.value:<6} {s.id}  {s.describe()}")
    return 0


def cmd_allocations(args) -> int:
    ledger = _ledger(args)
    rows = ledger.open_allocations()
    slices = {s["id"]: s for s in ledger.slices()}
    ledger.close()
    if args.json:
        print(
            json.dumps(
                [
                    {
                        **asdict(a),
                        "started_at": a.started_at.isoformat(),
                        "ended_at": None,
                        "device_name": slices.get(a.slice_id, {}).get("device_name"),
                        "kind": slices.get(a.slice_id, {}).get("kind"),
                    }
                    for a in rows
                ],
                indent=2,
            )
        )
        return 0
    if not rows:
        print("no open allocations")
        return 0
    print(
        f"{'id':>5}  {'user':<16} {'server':<10} {'profile':<16} {'node':<16} "
        f"{'since (UTC)':<20} slice"
    )
    for a in rows:
        s = slices.get(a.slice_id, {})
        print(
            f"{a.id:>5}  {a.user:<16} {a.server_name or 'default':<10} {a.profile:<16} "
            f"{a.node:<16} {a.started_at:%Y-%m-%d %H:%M:%S}  {a.slice_id} "
            f"({s.get('device_name', '?')})"
        )
    return 0


def cmd_upgrade_db(args) -> int:
    from ..ledger import db

    gl = GPULab(config=_config(args.config))
    engine = db.make_engine(gl.db_url)
    before = db.current_revision(engine)
    db.upgrade(engine)
    print(f"ledger schema: {before or 'empty'} -> {db.head_revision()}")
    engine.dispose()
    return 0


def cmd_check_auth(args) -> int:
    from ..auth.check import check_auth_command

    return check_auth_command(args, _config(args.config))

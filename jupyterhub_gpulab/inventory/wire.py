"""A node's hardware on the wire: what a node agent reports and how the service reads it back.

The agent (:mod:`jupyterhub_gpulab.agent`) reads NVML on its host without any lab settings and
sends its devices and MIG devices (:func:`hardware`); the service rebuilds that node's inventory
with the lab's own settings (``c.GPULab.shared_devices``) through the same rule NVML's inventory
uses (:func:`~.slices.offered_slices`), so a GPU split in seats is split the same way whichever
host it is on. The body's shape is checked against its JSON Schema first (the service's
``NODE_REPORT`` in :mod:`jupyterhub_gpulab.service.web.nodeschemas`); :func:`inventory_from_report`
checks what a schema cannot (every MIG device on a reported device in MIG mode, no UUID twice).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from .errors import InventoryError
from .model import Device, Inventory, SharedSettings, Slice, SliceKind, Utilization
from .slices import assemble, offered_slices

#: processes one GPU lists in a node report, at most (the agent keeps the largest users of GPU
#: memory; the service's schema refuses more): above any seat count a GPU holds (a P40: 24)
MAX_PROCESSES = 64
#: processes one whole report lists, at most (~110 bytes each, so a full report stays well
#: inside the service's 64 KiB request body limit)
MAX_REPORT_PROCESSES = 320


def hardware(inventory: Inventory) -> dict:
    """``{"source", "warnings", "devices": [...], "mig": [...]}`` of an inventory read by NVML
    without shared settings (so every slice is a whole GPU or a MIG device)."""
    return {
        "source": inventory.source,
        "warnings": list(inventory.warnings)[:50],
        "devices": [
            {
                "uuid": d.uuid,
                "index": d.index,
                "name": d.name,
                "memory_bytes": d.memory_bytes,
                "compute_capability": list(d.compute_capability) if d.compute_capability else None,
                "mig_enabled": d.mig_enabled,
                "vgpu_type": d.vgpu_type,
                "driver_version": list(d.driver_version) if d.driver_version else None,
            }
            for d in inventory.devices
        ],
        "mig": [
            {
                "uuid": s.id,
                "device_uuid": s.device_uuid,
                "profile": s.mig_profile,
                "memory_bytes": s.memory_bytes,
                "share": s.share,
                "rank": s.rank,
            }
            for s in inventory.slices
            if s.kind is SliceKind.MIG
        ],
    }


def inventory_from_report(
    report: Mapping, *, node: str, shared: Mapping[str, SharedSettings] | None = None
) -> Inventory:
    """Node ``node``'s :class:`Inventory` from a report whose shape its schema has checked.
    Raises :class:`InventoryError` naming each inconsistency."""
    shared = shared or {}
    errors: list[str] = []
    devices: dict[str, Device] = {}
    for d in report.get("devices") or []:
        if d["uuid"] in devices:
            errors.append(f"GPU {d['uuid']} is reported twice")
            continue
        cc = d.get("compute_capability")
        driver = d.get("driver_version")
        devices[d["uuid"]] = Device(
            uuid=d["uuid"],
            index=int(d["index"]),
            name=d["name"],
            memory_bytes=int(d["memory_bytes"]),
            compute_capability=(int(cc[0]), int(cc[1])) if cc else None,
            mig_enabled=bool(d["mig_enabled"]),
            node=node,
            vgpu_type=d.get("vgpu_type"),
            driver_version=tuple(int(v) for v in driver) if driver else None,
        )
    migs: dict[str, list[Slice]] = {}
    seen: set[str] = set(devices)
    for m in report.get("mig") or []:
        parent = devices.get(m["device_uuid"])
        if parent is None or not parent.mig_enabled:
            errors.append(
                f"MIG device {m['uuid']} is on {m['device_uuid']}, which is not a reported GPU in "
                "MIG mode"
            )
            continue
        if m["uuid"] in seen:
            errors.append(f"{m['uuid']} is reported twice")
            continue
        seen.add(m["uuid"])
        migs.setdefault(parent.uuid, []).append(
            Slice(
                id=m["uuid"],
                kind=SliceKind.MIG,
                device_uuid=parent.uuid,
                device_index=parent.index,
                device_name=parent.name,
                memory_bytes=int(m["memory_bytes"]),
                visible_id=m["uuid"],
                share=float(m["share"]),
                node=node,
                mig_profile=m["profile"],
                rank=int(m["rank"]),
                # what the image gate compares (the parent's, as slices.py gives every slice)
                compute_capability=parent.compute_capability,
                driver_version=parent.driver_version,
            )
        )
    if errors:
        raise InventoryError(errors, header=f"node {node}'s report is inconsistent")
    slices: list[Slice] = []
    warnings = [f"{node}: {w}" for w in report.get("warnings") or []]
    for d in devices.values():
        offered, w = offered_slices(d, shared.get(d.uuid), migs.get(d.uuid, ()))
        slices.extend(offered)
        warnings.extend(f"{node}: {line}" for line in w)
    return assemble(devices.values(), slices, "agent", warnings)


def utilization_by_slice(
    inventory: Inventory, figures: Mapping[str, Mapping], at
) -> dict[str, Utilization]:
    """Each slice's :class:`Utilization` at ``at`` from an agent's figures, keyed by the id the
    agent knows (a GPU or MIG UUID): a shared seat reads its device's figures, as NVML's own
    sampling gives them (:func:`~.nvml.sample_utilization`). Slices without figures read
    ``None`` (unknown)."""
    out = {}
    for s in inventory.slices:
        f = figures.get(s.visible_id) or {}
        out[s.id] = Utilization(f.get("gpu_percent"), f.get("memory_used_bytes"), at=at)
    return out

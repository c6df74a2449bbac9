"""Keeping the ledger's device and slice tables in step with the inventory, and draining."""

from __future__ import annotations

import logging

import sqlalchemy as sa

from .. import clock
from ..inventory.model import Inventory, cc_key, driver_key, format_version
from .models import Allocation, SyncReport
from .schema import allocations, devices, slices

log = logging.getLogger(__name__)


class InventorySync:
    """Mixed into :class:`~.ledger.Ledger` (uses its ``_write``)."""

    def sync_inventory(self, inventory: Inventory, node: str = "local") -> SyncReport:
        """Make the slice table match ``inventory`` for ``node``.

        New slices are added, changed ones updated (their holders kept), slices no longer present
        are marked unavailable — never handed out again — and open allocations on them are
        reported in ``vanished_held`` for an admin to look at. Drain state survives.

        A device (or slice) the ledger knows under another node name is the same hardware under
        a renamed ``c.GPULab.node_name``: it is moved to ``node`` with its slices (holders and
        drain state kept) and its open allocations, reported in ``moved`` and logged.
        """
        now = clock.utcnow()
        dev_rows = [
            {
                "uuid": d.uuid,
                "node": node,
                "index": d.index,
                "name": d.name,
                "memory_bytes": d.memory_bytes,
                "compute_capability": (
                    f"{d.compute_capability[0]}.{d.compute_capability[1]}"
                    if d.compute_capability
                    else None
                ),
                "mig_enabled": d.mig_enabled,
                "vgpu_type": d.vgpu_type,
                "driver_version": format_version(d.driver_version) if d.driver_version else None,
                "present": True,
                "updated_at": now,
            }
            for d in inventory.devices
        ]
        wanted = {s.id: s for s in inventory.slices}
        incoming = [r["uuid"] for r in dev_rows]
        added, updated = [], []
        with self._write() as conn:
            # this node's devices, and any of the incoming ones the ledger knows under another
            # node name (a renamed c.GPULab.node_name): the same hardware, moved here
            known = list(
                conn.execute(
                    sa.select(devices.c.uuid, devices.c.node, devices.c.drained).where(
                        sa.or_(devices.c.node == node, devices.c.uuid.in_(incoming))
                    )
                )
            )
            known_devices = {r.uuid: r.drained for r in known}
            moved = tuple(sorted((r.uuid, r.node) for r in known if r.node != node))
            for row in dev_rows:
                if row["uuid"] in known_devices:
                    conn.execute(
                        devices.update().where(devices.c.uuid == row["uuid"]).values(**row)
                    )
                else:
                    conn.execute(devices.insert().values(drained=False, **row))
            gone_devices = {r.uuid for r in known if r.node == node} - set(incoming)
            if gone_devices:
                conn.execute(
                    devices.update()
                    .where(devices.c.uuid.in_(gone_devices))
                    .values(present=False, updated_at=now)
                )
            drained = {u for u, d in known_devices.items() if d}
            moved_uuids = [u for u, _ in moved]
            if moved:
                conn.execute(
                    slices.update().where(slices.c.device_uuid.in_(moved_uuids)).values(node=node)
                )
                # open allocations on moved devices run here now: reconcile them on this node
                conn.execute(
                    allocations.update()
                    .where(
                        allocations.c.ended_at.is_(None),
                        allocations.c.slice_id.in_(
                            sa.select(slices.c.id).where(slices.c.device_uuid.in_(moved_uuids))
                        ),
                    )
                    .values(node=node)
                )
            existing = {
                r.id: r
                for r in conn.execute(
                    sa.select(slices).where(
                        sa.or_(slices.c.node == node, slices.c.id.in_(list(wanted)))
                    )
                )
            }
            for sid, s in wanted.items():
                values = {
                    "kind": s.kind.value,
                    "device_uuid": s.device_uuid,
                    "node": node,
                    "device_index": s.device_index,
                    "device_name": s.device_name,
                    "memory_bytes": s.memory_bytes,
                    "visible_id": s.visible_id,
                    "share": s.share,
                    "mig_profile": s.mig_profile,
                    "seat": s.seat,
                    "seats": s.seats,
                    "rank": s.rank,
                    "cc_key": cc_key(s.compute_capability),
                    "driver_key": driver_key(s.driver_version),
                    "present": True,
                    "available": s.device_uuid not in drained,
                }
                old = existing.get(sid)
                if old is None:
                    conn.execute(slices.insert().values(id=sid, held_by=None, **values))
                    added.append(sid)
                elif any(getattr(old, k) != v for k, v in values.items()):
                    conn.execute(slices.update().where(slices.c.id == sid).values(**values))
                    updated.append(sid)
            vanished = sorted(set(existing) - set(wanted))
            vanished_held: list[Allocation] = []
            if vanished:
                conn.execute(
                    slices.update()
                    .where(slices.c.id.in_(vanished))
                    .values(present=False, available=False)
                )
                vanished_held = [
                    Allocation.from_row(r)
                    for r in conn.execute(
                        sa.select(allocations).where(
                            allocations.c.slice_id.in_(vanished), allocations.c.ended_at.is_(None)
                        )
                    )
                ]
        for uuid, former in moved:
            log.warning(
                "GPU %s was on node %r in the ledger and is now on %r (c.GPULab.node_name "
                "changed?): moved it, with its slices and open allocations. If a hub still runs "
                "as %r with this GPU in its inventory, give each hub its own GPUs.",
                uuid,
                former,
                node,
                former,
            )
        for a in vanished_held:
            log.warning(
                "Slice %s held by %s's server %r (allocation %d) is no longer in the inventory",
                a.slice_id,
                a.user,
                a.server_name,
                a.id,
            )
        return SyncReport(
            tuple(added), tuple(updated), tuple(vanished), tuple(vanished_held), moved
        )

    def set_drained(self, device_uuid: str, drained: bool, reason: str | None = None) -> bool:
        """Drain (``True``) or return to service a device. A drained device's free slices are
        never handed out; held ones stay with their holders. Returning to service makes available
        only the slices still in the inventory (a MIG instance that vanished after a layout
        change stays out). Returns whether the device exists."""
        with self._write() as conn:
            res = conn.execute(
                devices.update()
                .where(devices.c.uuid == device_uuid)
                .values(
                    drained=drained,
                    drain_reason=reason if drained else None,
                    updated_at=clock.utcnow(),
                )
            )
            if res.rowcount == 0:
                return False
            conn.execute(
                slices.update()
                .where(slices.c.device_uuid == device_uuid)
                .values(available=sa.and_(slices.c.present, sa.literal(not drained)))
            )
        return True

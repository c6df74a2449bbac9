"""Pure builders of what the admin page and ``/api/inventory`` say about the lab itself: its id
and name, and other labs' containers the hub found holding this lab's GPUs."""

from __future__ import annotations

from collections.abc import Iterable

from ...ledger import ForeignContainer, LabIdentity
from .views import iso


def lab_view(identity: LabIdentity, configured_name: str = "") -> dict:
    """``{"id", "name", "label"}``: the ledger's lab id and the name people call it
    (``c.GPULab.lab_name``, else the one the hub last recorded)."""
    name = configured_name.strip() or identity.name
    return {
        "id": identity.uuid,
        "name": name,
        "label": LabIdentity(identity.uuid, name).describe(),
    }


def foreign_view(found: Iterable[ForeignContainer]) -> list[dict]:
    """One dict per container that is not this lab's but holds its GPUs, as the hub's latest
    look at the Docker engine found it (``seen_at``)."""
    return [
        {
            "container_id": f.container_id[:12],
            "container_name": f.container_name,
            "lab_id": f.lab_uuid,
            "lab_name": f.lab_name,
            "lab": f.lab_label(),
            "user": f.user,
            "devices": list(f.devices),
            "attached_by": f.attached_by,
            "seen_at": iso(f.seen_at),
        }
        for f in found
    ]

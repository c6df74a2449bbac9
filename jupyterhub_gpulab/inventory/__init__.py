"""GPU inventory: devices and slices, from NVML or from configuration.

Importing this package is cheap: ``pynvml`` is imported only when NVML is actually read.
"""

from __future__ import annotations

from typing import Any

from .declared import OVERCOMMIT_REFUSED, load_declared
from .errors import InventoryError
from .model import Inventory, SharedSettings, SliceKind, SliceRequest, Utilization
from .nvml import discover, gpu_instance_ids, sample_utilization
from .seatsettings import load_shared
from .slices import overcommit_note

__all__ = [
    "Inventory",
    "InventoryError",
    "SharedSettings",
    "SliceKind",
    "SliceRequest",
    "Utilization",
    "discover",
    "load_declared",
    "load_inventory",
    "load_shared",
    "gpu_instance_ids",
    "sample_utilization",
]

SOURCES = ("auto", "nvml", "declared", "agents")


def load_inventory(
    source: str,
    declared: list[dict] | None,
    node: str = "local",
    nvml: Any = None,
    shared: dict[str, SharedSettings] | None = None,
    overcommit: str = "warn",
) -> Inventory:
    """The inventory for ``node`` from the configured ``source``.

    - ``"auto"``: the declared inventory when ``declared`` is non-empty, else NVML;
    - ``"nvml"``: NVML only (``declared`` is ignored); ``shared`` maps GPU UUIDs to seat settings
      (see :func:`load_shared`);
    - ``"declared"``: ``declared`` only, its whole GPUs named in ``shared`` split in seats
      (:func:`load_declared`); an empty or missing one is an error;
    - ``"agents"``: none here: every node's inventory comes from its node agent's reports
      (a lab of several nodes, :mod:`.wire`); an empty inventory with ``source="agents"``.

    ``overcommit`` (``c.GPULab.seat_overcommit``) says what seats that overcommit their GPU once
    each seat's CUDA context is counted (:func:`.slices.footprint_problem`) are, on a declared
    or an NVML GPU alike: warnings (``"warn"``) or errors (``"refuse"``).

    Raises :class:`InventoryError` for an unknown ``source``, a missing declared inventory with
    ``"declared"``, a bad declared inventory, or, with ``"refuse"``, overcommitted seats. A host
    without NVML is not an error: it gives an empty inventory with a warning.
    """
    if source not in SOURCES:
        raise InventoryError(
            [f"inventory source {source!r} is unknown; use one of {', '.join(SOURCES)}"],
            header="invalid inventory source",
        )
    if source == "agents":
        return Inventory(source="agents")
    if source == "declared" or (source == "auto" and declared):
        if not declared:
            raise InventoryError(
                [
                    "the inventory source is 'declared' but c.GPULab.inventory is empty; "
                    "declare the GPUs there, or use the source 'auto' or 'nvml'"
                ],
                header="invalid inventory source",
            )
        return load_declared(declared, node=node, shared=shared, overcommit=overcommit)
    inventory = discover(node=node, nvml=nvml, shared=shared)
    if overcommit == "refuse" and shared:
        refused = [overcommit_note(d, shared.get(d.uuid)) for d in inventory.devices]
        if any(refused):
            raise InventoryError([f"{line} ({OVERCOMMIT_REFUSED})" for line in refused if line])
    return inventory

"""How the pages and the API say what holds a shared seat's cap (pure): every page that shows
seats says which are "framework-capped, host-enforced" (the image's framework hook caps the
seat, and the service checks its processes' GPU memory from the host:
:mod:`jupyterhub_gpulab.fairuse.seatguard`) and which are "soft" (the framework hook alone:
NVML on this host cannot list per-process memory, e.g. a vGPU guest, or the figures come from
elsewhere), with the seat's use against its cap: ``"GPU memory 0.8 of 1 GiB"``."""

from __future__ import annotations

from ...inventory import Utilization
from ...inventory.model import HOST_ENFORCED, SOFT, seat_check
from ...units import format_bytes

__all__ = ["HOST_ENFORCED", "SOFT", "memory_of_cap", "seat_view"]

_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def memory_of_cap(used_bytes: int, cap_bytes: int) -> str:
    """``"GPU memory 0.8 of 1 GiB"``: ``used_bytes`` in the unit of ``cap_bytes`` (binary
    units, one decimal)."""
    name, factor = next(((u, f) for u, f in _UNITS if cap_bytes >= f), ("B", 1))
    value = f"{used_bytes / factor:.1f}".removesuffix(".0")
    return f"GPU memory {value} of {format_bytes(cap_bytes)}"


def seat_view(kind: str | None, cap_bytes: int | None, u: Utilization | None) -> dict:
    """``{"seat_check", "seat_memory"}`` of a slice of ``kind`` capped at ``cap_bytes`` whose
    latest sample is ``u``: both ``None`` unless it is a shared seat; ``seat_memory`` ``None``
    where the host does not know the seat's use."""
    if kind != "shared":
        return {"seat_check": None, "seat_memory": None}
    checked = bool(u is not None and u.host_checked)
    used = u.memory_used_bytes if checked and u is not None else None
    return {
        "seat_check": seat_check(kind, checked),
        "seat_memory": memory_of_cap(used, cap_bytes) if used is not None and cap_bytes else None,
    }

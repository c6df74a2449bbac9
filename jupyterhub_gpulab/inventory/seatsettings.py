"""Validate shared-seat settings: a declared GPU's ``"shared"`` key and ``c.GPULab.
shared_devices`` (seats for NVML-discovered GPUs and node agents' GPUs). Pure logic, no I/O.

Keys: ``seats`` (required, >= 1), ``memory_per_seat`` (required: each seat's cap for tensors,
bytes or ``"1GiB"``; a CUDA context per process comes on top, see
:data:`~.slices.CUDA_CONTEXT_BYTES`), ``compute_share`` (0 < share <= 1, default ``1 / seats``).
"""

from __future__ import annotations

from typing import Any

from .errors import InventoryError
from .fieldchecks import FROM_SMI, parse_size, unknown_keys
from .model import SharedSettings

__all__ = ["SHARED_KEYS", "load_shared", "shared_settings"]

SHARED_KEYS = ("seats", "memory_per_seat", "compute_share")


def load_shared(spec: dict[str, dict]) -> dict[str, SharedSettings]:
    """Validate shared-seat settings for NVML-discovered devices: ``{GPU uuid: shared dict}``.

    Each value has the ``shared`` keys of a declared device. Whether the seats fit in the
    device's memory is checked at discovery, where the memory is known. Raises
    :class:`InventoryError` listing every problem.
    """
    if not isinstance(spec, dict):
        raise InventoryError(
            [f"shared settings must be a dict {{GPU uuid: {{...}}}}, got {type(spec).__name__}"],
            header="invalid shared GPU settings",
        )
    errors: list[str] = []
    result: dict[str, SharedSettings] = {}
    for uuid, value in spec.items():
        label = f"shared[{uuid!r}]"
        if not isinstance(uuid, str) or not uuid.startswith("GPU-"):
            errors.append(f"{label}: the key must be a GPU UUID starting with 'GPU-' {FROM_SMI}")
            continue
        settings = shared_settings(label, value, errors)
        if settings is not None:
            result[uuid] = settings
    if errors:
        raise InventoryError(errors, header="invalid shared GPU settings")
    return result


def shared_settings(label: str, value: Any, errors: list[str]) -> SharedSettings | None:
    """One ``shared`` dict (``seats``, ``memory_per_seat``, ``compute_share``) as
    :class:`SharedSettings`; ``None`` with the problems in ``errors`` when it is invalid. Whether
    the seats fit their device is :func:`~.slices.seat_problem`'s (the memory is known there)."""
    where = f"{label} shared"
    if not isinstance(value, dict):
        errors.append(
            f'{where}: must be a dict such as {{"seats": 4, "memory_per_seat": "4GiB", '
            '"compute_share": 0.25}'
        )
        return None
    before = len(errors)
    unknown_keys(where, value, SHARED_KEYS, errors)
    seats = value.get("seats")
    if isinstance(seats, bool) or not isinstance(seats, int) or seats < 1:
        errors.append(f"{where}: seats {seats!r} must be a whole number >= 1, e.g. 4")
        seats = None
    memory = parse_size(
        where, value, "memory_per_seat", errors, "each seat's memory cap, e.g. '4GiB'"
    )
    share = value.get("compute_share", 1 / seats if seats else 1.0)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        errors.append(
            f"{where}: compute_share {share!r} must be a number in (0, 1], e.g. 0.25 for a "
            "quarter of the SMs"
        )
    if len(errors) > before or seats is None or memory is None:
        return None
    return SharedSettings(seats=seats, memory_bytes=memory, compute_share=float(share))

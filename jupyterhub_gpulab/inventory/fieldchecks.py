"""Field checks of a declared inventory: each appends an actionable line to ``errors`` and
returns the parsed value (or ``None``/``False``), so :mod:`.declared` reports every problem at
once. Pure logic, no I/O."""

from __future__ import annotations

import difflib
from typing import Any

from ..units import UnitError, parse_bytes
from .model import parse_version

FROM_SMI = "as `nvidia-smi -L` shows it"


def unknown_keys(label: str, entry: dict, allowed: tuple[str, ...], errors: list[str]) -> None:
    """One error per key of ``entry`` not in ``allowed``, naming the closest allowed key."""
    for key in entry:
        if key in allowed:
            continue
        close = difflib.get_close_matches(str(key), allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        errors.append(f"{label}: unknown key {key!r}{hint}; allowed keys: {', '.join(allowed)}")


def claim_uuid(label: str, uuid: str, uuids: dict[str, str], errors: list[str]) -> bool:
    """Record ``uuid`` as ``label``'s in ``uuids``; ``False`` (and an error) if already taken."""
    if uuid in uuids:
        errors.append(
            f"{label}: duplicate UUID {uuid}, also used by {uuids[uuid]}; each device has its own "
            f"UUID {FROM_SMI}"
        )
        return False
    uuids[uuid] = label
    return True


def parse_size(label: str, entry: dict, key: str, errors: list[str], example: str) -> int | None:
    """``entry[key]`` in bytes (``"4GiB"`` or an int), > 0; ``None`` with an error if not."""
    if key not in entry:
        errors.append(f'{label}: missing "{key}"; write {example}')
        return None
    try:
        value = parse_bytes(entry[key], what=f'"{key}"')
    except UnitError as exc:
        errors.append(f"{label}: {exc}")
        return None
    if value <= 0:
        errors.append(f'{label}: "{key}" must be more than 0 bytes, e.g. "4GiB"')
        return None
    return value


def driver_version(label: str, value: Any, errors: list[str]) -> tuple[int, ...] | None:
    """``"535.183.01"`` → ``(535, 183, 1)``; ``None`` when absent or (with an error) malformed."""
    if value is None:
        return None
    try:
        if isinstance(value, str):
            return parse_version(value)
    except ValueError:
        pass
    errors.append(
        f"{label}: driver_version {value!r} must be the driver as `nvidia-smi` shows it, "
        "such as '535.183.01'"
    )
    return None


def compute_capability(label: str, value: Any, errors: list[str]) -> tuple[int, int] | None:
    """``"6.1"`` or ``[6, 1]`` → ``(6, 1)``; ``None`` when absent or (with an error) malformed."""
    if value is None:
        return None
    parts: Any = value.split(".") if isinstance(value, str) else value
    try:
        if isinstance(parts, (list, tuple)) and len(parts) == 2:
            major, minor = (int(p) for p in parts)
            if major >= 0 and minor >= 0:
                return (major, minor)
    except (TypeError, ValueError):
        pass
    errors.append(
        f"{label}: compute_capability {value!r} must be 'major.minor' such as '8.0' "
        "(`nvidia-smi --query-gpu=compute_cap --format=csv`)"
    )
    return None

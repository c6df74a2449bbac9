"""Load a GPU inventory declared in configuration, for hosts the hub cannot probe with NVML.

Pure logic, no I/O. Use it for vGPU hosts, GPUs on a machine the hub does not run on, demos and
tests. Write it in ``jupyterhub_config.py``::

    c.GPULab.inventory = [
        # a MIG-enabled A100: list its MIG devices as `nvidia-smi -L` shows them
        {"uuid": "GPU-8a3f0c1e-…", "index": 0, "name": "NVIDIA A100-SXM4-40GB", "memory": "40GiB",
         "compute_capability": "8.0",
         "mig": [{"uuid": "MIG-5c1e…", "profile": "3g.20gb"},
                 {"uuid": "MIG-77ab…", "profile": "1g.5gb", "memory": "4864MiB"}]},
        # a whole GPU
        {"uuid": "GPU-…", "index": 1, "name": "NVIDIA A40", "memory": "48GiB"},
        # a GPU shared in 4 seats of 4 GiB and a quarter of the SMs each (MPS, or soft limits)
        {"uuid": "GPU-…", "index": 2, "name": "Tesla T4", "memory": "16GiB",
         "shared": {"seats": 4, "memory_per_seat": "4GiB", "compute_share": 0.25}},
        # a vGPU guest; "vgpu_type" is derived from a "GRID …"/"NVIDIA …-<n><A|B|C|Q>" name if omitted
        {"uuid": "GPU-…", "index": 3, "name": "GRID P40-1Q", "memory": "1GiB", "vgpu_type": "P40-1Q"},
    ]

Device keys: ``uuid`` (required, ``GPU-…``), ``name`` (required), ``memory`` (required, total
memory: bytes or ``"40GiB"``, ``"48G"``; G/GB/GiB are all 2**30, see :func:`..units.parse_bytes`),
``index`` (default: the position in the list), ``compute_capability`` (``"8.0"`` or ``[8, 0]``),
``driver_version`` (the host's NVIDIA driver, ``"535.183.01"``, as ``nvidia-smi`` shows it),
``vgpu_type``, and at most one of ``mig`` (a list) and ``shared`` (a dict). Declare the compute
capability and driver to let gpulab keep an image off a GPU it cannot use (e.g. a CUDA 13
PyTorch off a Tesla P40, compute capability 6.1); unknown figures exclude nothing.
``mig_compute_slices`` (default 7; 4 for an A30) is the GPU's number of MIG compute slices.

MIG keys: ``uuid`` (required, ``MIG-<uuid>`` as ``nvidia-smi -L`` shows it; the pre-R470
``MIG-GPU-<uuid>/<gi>/<ci>`` form is refused), ``profile`` (required, ``<g>g.<GB>gb``),
``memory`` (default: the profile's GB × 2**30; NVML reports a little less, e.g. 4864 MiB for an
A100-40GB ``1g.5gb``, so state it to match an NVML inventory exactly).

Shared keys: ``seats`` (required, >= 1), ``memory_per_seat`` (required), ``compute_share``
(0 < share <= 1, default ``1 / seats``).

Every problem is collected and reported at once in an :class:`InventoryError`, each line naming
the entry (``inventory[2] (GPU-…)``) and the fix.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from ..units import UnitError, format_bytes, parse_bytes
from .errors import InventoryError
from .model import Device, Inventory, SharedSettings, Slice, parse_version
from .slices import (
    DEFAULT_MIG_COMPUTE_SLICES,
    MIG_MEMORY_SLICES,
    assemble,
    mig_memory_eighths,
    mig_profile_memory_bytes,
    mig_slice,
    parse_mig_profile,
    seat_problem,
    seat_slices,
    vgpu_type_from_name,
    whole_slice,
)

__all__ = ["load_declared", "load_shared"]

DEVICE_KEYS = (
    "uuid",
    "index",
    "name",
    "memory",
    "compute_capability",
    "driver_version",
    "vgpu_type",
    "mig",
    "mig_compute_slices",
    "shared",
)
MIG_KEYS = ("uuid", "profile", "memory")
SHARED_KEYS = ("seats", "memory_per_seat", "compute_share")

_OLD_MIG_UUID = re.compile(r"^MIG-GPU-[0-9A-Fa-f-]+/\d+/\d+$")
_FROM_SMI = "as `nvidia-smi -L` shows it"


def load_declared(
    spec: list[dict], node: str = "local", shared: dict[str, SharedSettings] | None = None
) -> Inventory:
    """Validate ``spec`` (the format in the module docstring) and build its :class:`Inventory`.

    Slices are built by the same helpers as NVML's (:mod:`.slices`), so the same hardware gives
    the same slices. ``node`` is stamped on devices and slices. ``shared`` (``c.GPULab.
    shared_devices``, from :func:`load_shared`) splits a declared whole GPU in seats as its own
    ``"shared"`` key would; naming a GPU declared with ``"mig"`` or ``"shared"`` is an error (a
    GPU is split in one place). Its other UUIDs may be node agents' GPUs and are left to them.
    Raises :class:`InventoryError` listing every problem found.
    """
    if not isinstance(spec, (list, tuple)):
        raise InventoryError(
            [f"c.GPULab.inventory must be a list of device dicts, got {type(spec).__name__}"]
        )
    errors: list[str] = []
    uuids: dict[str, str] = {}
    indices: dict[int, str] = {}
    devices: list[Device] = []
    slices: list[Slice] = []
    for i, entry in enumerate(spec):
        built = _device(i, entry, node, errors, uuids, indices, shared or {})
        if built is not None:
            devices.append(built[0])
            slices.extend(built[1])
    if errors:
        raise InventoryError(errors)
    return assemble(devices, slices, "declared")


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
            errors.append(f"{label}: the key must be a GPU UUID starting with 'GPU-' {_FROM_SMI}")
            continue
        settings = _shared_settings(label, value, errors)
        if settings is not None:
            result[uuid] = settings
    if errors:
        raise InventoryError(errors, header="invalid shared GPU settings")
    return result


# -- one device -----------------------------------------------------------------------------------


def _device(
    i: int,
    entry: Any,
    node: str,
    errors: list[str],
    uuids: dict[str, str],
    indices: dict[int, str],
    split: dict[str, SharedSettings],
) -> tuple[Device, list[Slice]] | None:
    if not isinstance(entry, dict):
        errors.append(
            f"inventory[{i}]: must be a dict such as "
            f'{{"uuid": "GPU-…", "name": "NVIDIA A40", "memory": "48GiB"}}, '
            f"got {type(entry).__name__}"
        )
        return None
    uuid = entry.get("uuid")
    label = f"inventory[{i}] ({uuid})" if isinstance(uuid, str) and uuid else f"inventory[{i}]"
    before = len(errors)
    _unknown_keys(label, entry, DEVICE_KEYS, errors)

    if "uuid" not in entry:
        errors.append(f'{label}: missing "uuid"; copy the GPU-… UUID {_FROM_SMI}')
    elif not isinstance(uuid, str) or not uuid.startswith("GPU-"):
        hint = ' and list it in the "mig" list of its GPU' if str(uuid).startswith("MIG-") else ""
        errors.append(f"{label}: uuid {uuid!r} must start with 'GPU-' {_FROM_SMI}{hint}")
    else:
        _claim_uuid(label, uuid, uuids, errors)

    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        errors.append(
            f'{label}: missing "name"; write the model {_FROM_SMI}, e.g. "NVIDIA A100-SXM4-40GB"'
        )
    memory = _bytes(label, entry, "memory", errors, "the device's total memory, e.g. '40GiB'")

    index = entry.get("index", i)
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        errors.append(f"{label}: index {index!r} must be a whole number >= 0 (`nvidia-smi -L`)")
    elif index in indices:
        errors.append(
            f"{label}: index {index} is also used by {indices[index]}; give each GPU its own index"
        )
    else:
        indices[index] = label

    cc = _compute_capability(label, entry.get("compute_capability"), errors)
    driver = _driver_version(label, entry.get("driver_version"), errors)
    vgpu_type = entry.get("vgpu_type")
    if vgpu_type is not None and (not isinstance(vgpu_type, str) or not vgpu_type):
        errors.append(f"{label}: vgpu_type {vgpu_type!r} must be a vGPU type such as 'P40-1Q'")
    if "mig" in entry and "shared" in entry:
        errors.append(
            f'{label}: has both "mig" and "shared"; a GPU is either split in MIG devices or '
            "shared in seats, remove one of them"
        )
        return None
    compute_slices = entry.get("mig_compute_slices", DEFAULT_MIG_COMPUTE_SLICES)
    if (
        isinstance(compute_slices, bool)
        or not isinstance(compute_slices, int)
        or compute_slices < 1
    ):
        errors.append(
            f"{label}: mig_compute_slices {compute_slices!r} must be a whole number >= 1 "
            "(7 for A100/H100/H200, 4 for A30)"
        )
        compute_slices = None

    mig = (
        _mig_entries(label, entry, memory, compute_slices, errors, uuids)
        if "mig" in entry
        else None
    )
    shared = _shared_settings(label, entry["shared"], errors) if "shared" in entry else None
    if isinstance(uuid, str) and uuid in split:
        declared_split = next((k for k in ("mig", "shared") if k in entry), None)
        if declared_split:
            errors.append(
                f"{label}: declares {declared_split!r} and c.GPULab.shared_devices[{uuid!r}] "
                f"splits it in seats too; split a GPU in one place (remove it from "
                "c.GPULab.shared_devices, or its own key here)"
            )
        else:
            shared = split[uuid]
    if len(errors) > before or memory is None:
        return None

    device = Device(
        uuid=uuid,
        index=index,
        name=name,
        memory_bytes=memory,
        compute_capability=cc,
        mig_enabled=mig is not None,
        node=node,
        vgpu_type=vgpu_type or vgpu_type_from_name(name),
        driver_version=driver,
    )
    if mig is not None:
        return device, [
            mig_slice(device, m_uuid, profile, m_memory, pos, compute_slices)
            for pos, (m_uuid, profile, m_memory) in enumerate(mig)
        ]
    if shared is not None:
        problem = seat_problem(device, shared)
        if problem:
            errors.append(f"{label}: shared: {problem}")
            return None
        return device, seat_slices(device, shared)
    return device, [whole_slice(device)]


def _mig_entries(
    label: str,
    entry: dict,
    device_memory: int | None,
    compute_slices: int | None,
    errors: list[str],
    uuids: dict[str, str],
) -> list[tuple[str, str, int]]:
    """``[(MIG uuid, profile, memory bytes)]`` of a device's ``mig`` list, errors collected."""
    items = entry["mig"]
    if not isinstance(items, (list, tuple)):
        errors.append(
            f'{label}: "mig" must be a list such as [{{"uuid": "MIG-…", "profile": "1g.10gb"}}]'
        )
        return []
    result: list[tuple[str, str, int]] = []
    profiles: list[tuple[str, int, int]] = []
    for j, item in enumerate(items):
        where = f"{label} mig[{j}]"
        if not isinstance(item, dict):
            errors.append(f'{where}: must be a dict {{"uuid": "MIG-…", "profile": "1g.10gb"}}')
            continue
        m_uuid = item.get("uuid")
        if isinstance(m_uuid, str) and m_uuid:
            where = f"{where} ({m_uuid})"
        _unknown_keys(where, item, MIG_KEYS, errors)
        ok = True
        if not isinstance(m_uuid, str) or not m_uuid:
            errors.append(f'{where}: missing "uuid"; copy the MIG-… UUID {_FROM_SMI}')
            ok = False
        elif _OLD_MIG_UUID.match(m_uuid):
            errors.append(
                f"{where}: {m_uuid!r} is the old MIG-GPU-<uuid>/<gi>/<ci> form; use the "
                f"MIG-<uuid> form shown by `nvidia-smi -L`"
            )
            ok = False
        elif not m_uuid.startswith("MIG-"):
            errors.append(f"{where}: uuid {m_uuid!r} must start with 'MIG-' {_FROM_SMI}")
            ok = False
        else:
            ok = _claim_uuid(where, m_uuid, uuids, errors)
        profile = item.get("profile")
        parsed = parse_mig_profile(profile) if isinstance(profile, str) else None
        if parsed is None:
            errors.append(
                f"{where}: profile {profile!r} must look like '1g.10gb' (<g>g.<GB>gb), "
                "as `nvidia-smi -L` shows it after 'MIG'"
            )
            continue
        profiles.append((profile, *parsed))
        memory = (
            _bytes(where, item, "memory", errors, "")
            if "memory" in item
            else mig_profile_memory_bytes(profile)
        )
        if ok and memory is not None:
            result.append((m_uuid, profile, memory))
    _check_mig_capacity(label, profiles, device_memory, compute_slices, errors)
    return result


def _check_mig_capacity(
    label: str,
    profiles: list[tuple[str, int, int]],
    device_memory: int | None,
    compute_slices: int | None,
    errors: list[str],
) -> None:
    names = " + ".join(p for p, _, _ in profiles)
    used_g = sum(g for _, g, _ in profiles)
    if compute_slices is not None and used_g > compute_slices:
        errors.append(
            f"{label}: MIG devices {names} use {used_g} compute slices but the GPU has "
            f"{compute_slices}; remove MIG entries, or set mig_compute_slices for a GPU with more"
        )
    if device_memory is None or not profiles:
        return
    eighths = sum(mig_memory_eighths(gb, device_memory) for _, _, gb in profiles)
    if eighths > MIG_MEMORY_SLICES:
        errors.append(
            f"{label}: MIG devices {names} need {sum(gb for _, _, gb in profiles)} GB, "
            f"{eighths}/{MIG_MEMORY_SLICES} of the memory of a {format_bytes(device_memory)} GPU; "
            'remove MIG entries or correct "memory"'
        )


def _shared_settings(label: str, value: Any, errors: list[str]) -> SharedSettings | None:
    where = f"{label} shared"
    if not isinstance(value, dict):
        errors.append(
            f'{where}: must be a dict such as {{"seats": 4, "memory_per_seat": "4GiB", '
            '"compute_share": 0.25}'
        )
        return None
    before = len(errors)
    _unknown_keys(where, value, SHARED_KEYS, errors)
    seats = value.get("seats")
    if isinstance(seats, bool) or not isinstance(seats, int) or seats < 1:
        errors.append(f"{where}: seats {seats!r} must be a whole number >= 1, e.g. 4")
        seats = None
    memory = _bytes(where, value, "memory_per_seat", errors, "each seat's memory cap, e.g. '4GiB'")
    share = value.get("compute_share", 1 / seats if seats else 1.0)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        errors.append(
            f"{where}: compute_share {share!r} must be a number in (0, 1], e.g. 0.25 for a "
            "quarter of the SMs"
        )
    if len(errors) > before or seats is None or memory is None:
        return None
    return SharedSettings(seats=seats, memory_bytes=memory, compute_share=float(share))


# -- small checks ---------------------------------------------------------------------------------


def _unknown_keys(label: str, entry: dict, allowed: tuple[str, ...], errors: list[str]) -> None:
    for key in entry:
        if key in allowed:
            continue
        close = difflib.get_close_matches(str(key), allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        errors.append(f"{label}: unknown key {key!r}{hint}; allowed keys: {', '.join(allowed)}")


def _claim_uuid(label: str, uuid: str, uuids: dict[str, str], errors: list[str]) -> bool:
    if uuid in uuids:
        errors.append(
            f"{label}: duplicate UUID {uuid}, also used by {uuids[uuid]}; each device has its own "
            f"UUID {_FROM_SMI}"
        )
        return False
    uuids[uuid] = label
    return True


def _bytes(label: str, entry: dict, key: str, errors: list[str], example: str) -> int | None:
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


def _driver_version(label: str, value: Any, errors: list[str]) -> tuple[int, ...] | None:
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


def _compute_capability(label: str, value: Any, errors: list[str]) -> tuple[int, int] | None:
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

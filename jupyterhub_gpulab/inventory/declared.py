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
        # a GPU shared in 4 seats of 3.5 GiB for tensors and a quarter of the SMs each (MPS, or
        # soft limits); each seat's CUDA context (~300 MiB) comes on top: 4 × 3.8 GiB fit 16 GiB
        {"uuid": "GPU-…", "index": 2, "name": "Tesla T4", "memory": "16GiB",
         "shared": {"seats": 4, "memory_per_seat": "3.5GiB", "compute_share": 0.25}},
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

import re
from typing import Any

from ..units import format_bytes
from .errors import InventoryError
from .fieldchecks import (
    FROM_SMI,
    claim_uuid,
    compute_capability,
    driver_version,
    parse_size,
    unknown_keys,
)
from .model import Device, Inventory, SharedSettings, Slice
from .seatsettings import shared_settings
from .slices import (
    DEFAULT_MIG_COMPUTE_SLICES,
    MIG_MEMORY_SLICES,
    assemble,
    footprint_problem,
    mig_memory_eighths,
    mig_profile_memory_bytes,
    mig_slice,
    parse_mig_profile,
    seat_problem,
    seat_slices,
    vgpu_type_from_name,
    whole_slice,
)

__all__ = ["OVERCOMMIT_CHOICES", "OVERCOMMIT_REFUSED", "load_declared"]

#: What to do with seats that overcommit their GPU once CUDA contexts are counted
#: (:func:`~.slices.footprint_problem`): keep them with a warning, or refuse the inventory.
OVERCOMMIT_CHOICES = ("warn", "refuse")
#: How an overcommit error ends, on a declared or an NVML GPU: why it is one, and the way back.
OVERCOMMIT_REFUSED = "c.GPULab.seat_overcommit = 'refuse'; 'warn' keeps them"

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

_OLD_MIG_UUID = re.compile(r"^MIG-GPU-[0-9A-Fa-f-]+/\d+/\d+$")


def load_declared(
    spec: list[dict],
    node: str = "local",
    shared: dict[str, SharedSettings] | None = None,
    overcommit: str = "warn",
) -> Inventory:
    """Validate ``spec`` (the format in the module docstring) and build its :class:`Inventory`.

    Slices are built by the same helpers as NVML's (:mod:`.slices`), so the same hardware gives
    the same slices. ``node`` is stamped on devices and slices. ``shared`` (``c.GPULab.
    shared_devices``, from :func:`load_shared`) splits a declared whole GPU in seats as its own
    ``"shared"`` key would; naming a GPU declared with ``"mig"`` or ``"shared"`` is an error (a
    GPU is split in one place). Its other UUIDs may be node agents' GPUs and are left to them.
    Seats whose caps plus a CUDA context each exceed the GPU (:func:`~.slices.footprint_problem`)
    are the inventory's warnings with ``overcommit="warn"``, errors with ``"refuse"``
    (``c.GPULab.seat_overcommit``). Raises :class:`InventoryError` listing every problem found.
    """
    if not isinstance(spec, (list, tuple)):
        raise InventoryError(
            [f"c.GPULab.inventory must be a list of device dicts, got {type(spec).__name__}"]
        )
    if overcommit not in OVERCOMMIT_CHOICES:
        raise InventoryError(
            [
                f"seat_overcommit {overcommit!r} is unknown; use one of {', '.join(OVERCOMMIT_CHOICES)}"
            ]
        )
    errors: list[str] = []
    overcommitted: list[str] = []
    uuids: dict[str, str] = {}
    indices: dict[int, str] = {}
    devices: list[Device] = []
    slices: list[Slice] = []
    for i, entry in enumerate(spec):
        built = _device(i, entry, node, errors, uuids, indices, shared or {})
        if built is not None:
            devices.append(built[0])
            slices.extend(built[1])
            overcommitted.extend(built[2])
    if overcommit == "refuse":
        errors.extend(f"{line} ({OVERCOMMIT_REFUSED})" for line in overcommitted)
    if errors:
        raise InventoryError(errors)
    return assemble(devices, slices, "declared", overcommitted)


# -- one device -----------------------------------------------------------------------------------


def _device(
    i: int,
    entry: Any,
    node: str,
    errors: list[str],
    uuids: dict[str, str],
    indices: dict[int, str],
    split: dict[str, SharedSettings],
) -> tuple[Device, list[Slice], list[str]] | None:
    """The device of ``entry``, its slices and its seats' overcommit notes; ``None`` (with the
    problems in ``errors``) when it is invalid."""
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
    unknown_keys(label, entry, DEVICE_KEYS, errors)

    if "uuid" not in entry:
        errors.append(f'{label}: missing "uuid"; copy the GPU-… UUID {FROM_SMI}')
    elif not isinstance(uuid, str) or not uuid.startswith("GPU-"):
        hint = ' and list it in the "mig" list of its GPU' if str(uuid).startswith("MIG-") else ""
        errors.append(f"{label}: uuid {uuid!r} must start with 'GPU-' {FROM_SMI}{hint}")
    else:
        claim_uuid(label, uuid, uuids, errors)

    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        errors.append(
            f'{label}: missing "name"; write the model {FROM_SMI}, e.g. "NVIDIA A100-SXM4-40GB"'
        )
    memory = parse_size(label, entry, "memory", errors, "the device's total memory, e.g. '40GiB'")

    index = entry.get("index", i)
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        errors.append(f"{label}: index {index!r} must be a whole number >= 0 (`nvidia-smi -L`)")
    elif index in indices:
        errors.append(
            f"{label}: index {index} is also used by {indices[index]}; give each GPU its own index"
        )
    else:
        indices[index] = label

    cc = compute_capability(label, entry.get("compute_capability"), errors)
    driver = driver_version(label, entry.get("driver_version"), errors)
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
    shared = shared_settings(label, entry["shared"], errors) if "shared" in entry else None
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
        return (
            device,
            [
                mig_slice(device, m_uuid, profile, m_memory, pos, compute_slices)
                for pos, (m_uuid, profile, m_memory) in enumerate(mig)
            ],
            [],
        )
    if shared is not None:
        problem = seat_problem(device, shared)
        if problem:
            errors.append(f"{label}: shared: {problem}")
            return None
        overcommit = footprint_problem(device, shared)
        notes = [f"{label}: shared: {overcommit}"] if overcommit else []
        return device, seat_slices(device, shared), notes
    return device, [whole_slice(device)], []


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
        unknown_keys(where, item, MIG_KEYS, errors)
        ok = True
        if not isinstance(m_uuid, str) or not m_uuid:
            errors.append(f'{where}: missing "uuid"; copy the MIG-… UUID {FROM_SMI}')
            ok = False
        elif _OLD_MIG_UUID.match(m_uuid):
            errors.append(
                f"{where}: {m_uuid!r} is the old MIG-GPU-<uuid>/<gi>/<ci> form; use the "
                f"MIG-<uuid> form shown by `nvidia-smi -L`"
            )
            ok = False
        elif not m_uuid.startswith("MIG-"):
            errors.append(f"{where}: uuid {m_uuid!r} must start with 'MIG-' {FROM_SMI}")
            ok = False
        else:
            ok = claim_uuid(where, m_uuid, uuids, errors)
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
            parse_size(where, item, "memory", errors, "")
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

"""Turn devices into slices: the one place both inventory sources build :class:`Slice` objects.

Pure logic, no I/O. :mod:`.nvml` (what the driver reports) and :mod:`.declared` (what an admin
writes) both call these helpers, so identical hardware yields identical slices whichever way it
was described.

Placement order (``Slice.rank``, lower first, compared only among slices of one kind):

- whole GPU: best fit, the smallest memory first, then the device index:
  ``memory in MiB * 1000 + index``;
- MIG: device index, then the MIG device's position on it: ``index * 1000 + position``;
- shared seat: first-fit packing, device index then seat: ``index * 1000 + seat``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..units import counted, format_bytes
from .model import Device, Inventory, SharedSettings, Slice, SliceKind

__all__ = [
    "CUDA_CONTEXT_BYTES",
    "DEFAULT_MIG_COMPUTE_SLICES",
    "MIG_MEMORY_SLICES",
    "MIG_PROFILE_PATTERN",
    "assemble",
    "footprint_problem",
    "mig_memory_eighths",
    "mig_profile_memory_bytes",
    "mig_profile_name",
    "mig_slice",
    "offered_slices",
    "overcommit_note",
    "parse_mig_profile",
    "seat_problem",
    "seat_slices",
    "tensor_memory",
    "vgpu_type_from_name",
    "whole_slice",
]

#: A declared MIG profile: ``<g>g.<memory>gb`` such as ``1g.10gb`` (no ``+me`` attributes).
MIG_PROFILE_PATTERN = re.compile(r"^(\d+)g\.(\d+)gb$")
#: Compute slices of the MIG GPUs in use today (A100, A30 has 4; H100, H200 and B200 have 7).
DEFAULT_MIG_COMPUTE_SLICES = 7
#: MIG splits a GPU's memory in eighths (memory slices); a profile takes whole eighths.
MIG_MEMORY_SLICES = 8

_GIB = 2**30
_MIB = 2**20

#: GPU memory each CUDA process holds *outside* any framework's cap, in bytes: its CUDA context
#: (driver state plus the kernels of the libraries it loaded). 300 MiB rounds up what PyTorch
#: measured with lazy module loading: pytorch/pytorch PR #86509 (torch >= 1.13 sets
#: ``CUDA_MODULE_LOADING=LAZY`` when unset) reports 287,047,680 B (~274 MiB) after one small
#: tensor, against 666,632,192 B (~636 MiB) with eager loading. The CUDA C Programming Guide's
#: "Lazy Loading" section: introduced in CUDA 11.7, on by default on Linux since CUDA 12.2; an
#: image that turns it off (``CUDA_MODULE_LOADING=EAGER``) needs about twice this per process.
CUDA_CONTEXT_BYTES = 300 * _MIB
_G_PREFIX = re.compile(r"^(\d+)g\.")
# A vGPU guest names itself "GRID P40-1Q" (older) or "NVIDIA A40-48Q" (newer drivers); a
# MIG-backed vGPU adds the slice count ("GRID A100-1-5C"). The type is <board>-[<g>-]<GB><series>
# where the series letter is A, B, C or Q, as in NVIDIA's vGPU type names.
_VGPU_NAME = re.compile(r"^(?:GRID|NVIDIA)\s+([A-Z0-9]+(?:-[A-Za-z]+)*-(?:\d+-)?\d+[ABCQ])$")


def mig_profile_name(
    compute_slices: int, memory_size_mb: int, device_memory_bytes: int, suffix: str = ""
) -> str:
    """The canonical MIG profile name, ``"<g>g.<GB>gb"`` plus ``suffix`` (``"+me"`` …).

    ``compute_slices`` is the GPU instance's slice count (``sliceCount``), ``memory_size_mb`` its
    memory in MiB (``memorySizeMB`` of the GPU instance profile) and ``device_memory_bytes`` the
    parent GPU's total memory in bytes (``nvmlDeviceGetMemoryInfo(parent).total``).

    The rule is NVIDIA's (``getMigMemorySizeGB`` in NVIDIA/go-nvlib ``pkg/nvlib/device/
    mig_profile.go``, used by the k8s device plugin and mig-parted, and matching the names
    ``nvidia-smi mig -lgip`` prints): take the profile's fraction of the device memory, round it
    *up* to whole eighths (memory slices), multiply by the device memory in GiB rounded *up*, and
    round half up to an integer. So A100-SXM4-40GB ``1g``: 4864 MiB of 40960 MiB → 1/8 × 40 →
    ``1g.5gb``; A100-80GB ``1g``: 9856 MiB of 81920 MiB → ``1g.10gb``; H200 (140.4 GiB → 141)
    ``3g`` at 4/8 → 70.5 → ``3g.71gb``. Integer arithmetic throughout (no float drift).
    Raises ``ValueError`` when ``device_memory_bytes`` is not positive.
    """
    if device_memory_bytes <= 0:
        raise ValueError(f"device memory must be positive, got {device_memory_bytes}")
    eighths = -(-(memory_size_mb * _MIB * MIG_MEMORY_SLICES) // device_memory_bytes)
    device_gib = -(-device_memory_bytes // _GIB)
    gb = (eighths * device_gib + MIG_MEMORY_SLICES // 2) // MIG_MEMORY_SLICES
    return f"{compute_slices}g.{gb}gb{suffix}"


def parse_mig_profile(profile: str) -> tuple[int, int] | None:
    """``"3g.20gb"`` → ``(3, 20)`` (compute slices, GB); ``None`` if it is not of that form."""
    m = MIG_PROFILE_PATTERN.match(profile)
    return (int(m.group(1)), int(m.group(2))) if m else None


def mig_profile_memory_bytes(profile: str) -> int:
    """The memory a declared profile names, in bytes: ``"1g.10gb"`` → ``10 * 2**30``.

    NVIDIA's "gb" in profile names is a rounded GiB figure (see :func:`mig_profile_name`), so a
    declared ``1g.5gb`` slice is counted as 5 GiB although the hardware gives 4864 MiB; declare
    ``"memory"`` on the MIG entry to state the exact figure. Raises ``ValueError`` on a name not
    of the ``<g>g.<GB>gb`` form.
    """
    parsed = parse_mig_profile(profile)
    if parsed is None:
        raise ValueError(f"not a MIG profile name: {profile!r}")
    return parsed[1] * _GIB


def mig_memory_eighths(gb: int, device_memory_bytes: int) -> int:
    """How many of the device's eight memory slices a ``<gb>gb`` profile takes (at least one).

    The inverse of :func:`mig_profile_name`: ``gb * 8 / ceil(device GiB)``, rounded half up.
    A100-40GB: ``5gb`` → 1, ``20gb`` → 4; H200 (141): ``71gb`` → 4. Used to check that
    declared MIG slices fit in the device's memory without tripping over the names' rounding.
    """
    device_gib = max(1, -(-device_memory_bytes // _GIB))
    return max(1, (2 * gb * MIG_MEMORY_SLICES + device_gib) // (2 * device_gib))


def vgpu_type_from_name(name: str) -> str | None:
    """The vGPU type of a vGPU guest from its device name, else ``None``.

    ``"GRID P40-1Q"`` → ``"P40-1Q"``, ``"NVIDIA A40-48Q"`` → ``"A40-48Q"``,
    ``"GRID A100-1-5C"`` → ``"A100-1-5C"``; physical boards (``"Tesla P40"``,
    ``"NVIDIA A100-SXM4-40GB"``) → ``None``.
    """
    m = _VGPU_NAME.match(name.strip())
    return m.group(1) if m else None


def _facts(device: Device) -> dict:
    """What a slice carries of its device for matching images (:class:`SliceRequest`)."""
    return {
        "compute_capability": device.compute_capability,
        "driver_version": device.driver_version,
    }


def whole_slice(device: Device) -> Slice:
    """The ``gpu`` slice for a whole device; rank = best fit (memory in MiB, then index)."""
    return Slice(
        id=device.uuid,
        kind=SliceKind.GPU,
        device_uuid=device.uuid,
        device_index=device.index,
        device_name=device.name,
        memory_bytes=device.memory_bytes,
        visible_id=device.uuid,
        share=1.0,
        node=device.node,
        rank=(device.memory_bytes // _MIB) * 1000 + device.index,
        **_facts(device),
    )


def mig_slice(
    device: Device,
    mig_uuid: str,
    profile: str,
    memory_bytes: int,
    position: int,
    compute_slices: int = DEFAULT_MIG_COMPUTE_SLICES,
) -> Slice:
    """The ``mig`` slice for MIG device ``mig_uuid`` (``MIG-…``) at ``position`` on ``device``.

    ``profile`` is the canonical name (``"1g.10gb"``, possibly with ``"+me"``); its leading
    ``<g>g`` over ``compute_slices`` (the parent's largest GPU instance, 7 on A100/H100/H200)
    gives ``share``. ``memory_bytes`` is what the MIG device offers, in bytes. Raises
    ``ValueError`` when ``profile`` does not start with ``<g>g.``.
    """
    m = _G_PREFIX.match(profile)
    if m is None:
        raise ValueError(f"not a MIG profile name: {profile!r}")
    return Slice(
        id=mig_uuid,
        kind=SliceKind.MIG,
        device_uuid=device.uuid,
        device_index=device.index,
        device_name=device.name,
        memory_bytes=memory_bytes,
        visible_id=mig_uuid,
        share=int(m.group(1)) / compute_slices,
        node=device.node,
        mig_profile=profile,
        rank=device.index * 1000 + position,
        **_facts(device),
    )


def seat_problem(device: Device, settings: SharedSettings) -> str | None:
    """Why ``device`` cannot be split as ``settings`` say, as one sentence with the fix, or
    ``None`` when it can (seats >= 1, 0 < compute share <= 1, seats × memory <= device memory)."""
    if (
        isinstance(settings.seats, bool)
        or not isinstance(settings.seats, int)
        or settings.seats < 1
    ):
        return f"seats must be a whole number >= 1, got {settings.seats!r}"
    if not 0 < settings.compute_share <= 1:
        return (
            f"compute_share must be in (0, 1], got {settings.compute_share!r}; "
            "write e.g. 0.25 for a quarter of the SMs"
        )
    if settings.memory_bytes <= 0:
        return "memory_per_seat must be positive, e.g. '4GiB'"
    total = settings.seats * settings.memory_bytes
    if total > device.memory_bytes:
        fitting = device.memory_bytes // settings.memory_bytes
        return (
            f"{counted(settings.seats, 'seat')} × {format_bytes(settings.memory_bytes)} = "
            f"{format_bytes(total)} exceeds the device's {format_bytes(device.memory_bytes)}; use "
            f"at most {counted(fitting, 'seat')} "
            f"or at most {format_bytes(device.memory_bytes // settings.seats)} per seat"
        )
    return None


def footprint_problem(
    device: Device, settings: SharedSettings, context_bytes: int = CUDA_CONTEXT_BYTES
) -> str | None:
    """Why ``device``'s seats overcommit it once each seat's CUDA context is counted, as one
    sentence with both fixes (fewer seats, or smaller ones), or ``None`` when they fit.

    A seat's footprint is its cap (``settings.memory_bytes``, what the frameworks may hold for
    tensors) plus ``context_bytes`` (one CUDA process's context, :data:`CUDA_CONTEXT_BYTES`),
    which no framework cap includes; a seat running several CUDA processes needs one context
    each. Assumes :func:`seat_problem` found nothing (seats >= 1, memory > 0). The fixes: the most
    seats of this cap that fit, and the largest cap (whole MiB) for this many seats.
    """
    footprint = settings.memory_bytes + context_bytes
    need = settings.seats * footprint
    if need <= device.memory_bytes:
        return None
    fitting = device.memory_bytes // footprint
    per_seat = (device.memory_bytes // settings.seats - context_bytes) // _MIB * _MIB
    cap = format_bytes(settings.memory_bytes)
    fixes = [f"at most {counted(fitting, 'seat')} of {cap}"] if fitting else []
    if per_seat > 0:
        fixes.append(f"{settings.seats} of {format_bytes(per_seat)}")
    fix = " or ".join(fixes) if len(fixes) < 2 else f"{fixes[0]}, or {fixes[1]}"
    return (
        f"{counted(settings.seats, 'seat')} of {cap} on a {format_bytes(device.memory_bytes)} "
        f"{device.name} {'needs' if settings.seats == 1 else 'need'} ~{format_bytes(need)} once each seat's CUDA context "
        f"(~{format_bytes(context_bytes)}) is counted; "
        + (fix or f"not even one seat fits beside its context, share {device.name} whole")
    )


def tensor_memory(kind: SliceKind | str, memory_bytes: int | None) -> str:
    """What a slice's memory holds for tensors, the one sentence the pages and the status bar
    show: a shared seat's cap is all for tensors and each CUDA process's context
    (:data:`CUDA_CONTEXT_BYTES`) is outside it; a whole GPU or MIG instance holds the contexts
    within its memory. ``"1 GiB for tensors; each CUDA process's context (~300 MiB) is
    outside it"``. Raises ``ValueError`` for an unknown kind."""
    kind = SliceKind(kind)
    if not memory_bytes:
        return "unknown"
    context = format_bytes(CUDA_CONTEXT_BYTES)
    if kind is SliceKind.SHARED:
        return (
            f"{format_bytes(memory_bytes)} for tensors; each CUDA process's context "
            f"(~{context}) is outside it"
        )
    return (
        f"{format_bytes(memory_bytes)}, of which each CUDA process's context takes ~{context}; "
        "the rest holds tensors"
    )


def seat_slices(device: Device, settings: SharedSettings) -> list[Slice]:
    """The ``shared`` slices ``<uuid>/seat-0`` … for ``device`` split as ``settings`` say.

    Each seat gives ``settings.memory_bytes`` and ``settings.compute_share``; all see the whole
    device (``visible_id`` is its UUID). Raises ``ValueError`` with :func:`seat_problem`'s text
    when the split does not fit.
    """
    problem = seat_problem(device, settings)
    if problem:
        raise ValueError(problem)
    return [
        Slice(
            id=f"{device.uuid}/seat-{n}",
            kind=SliceKind.SHARED,
            device_uuid=device.uuid,
            device_index=device.index,
            device_name=device.name,
            memory_bytes=settings.memory_bytes,
            visible_id=device.uuid,
            share=settings.compute_share,
            node=device.node,
            seat=n,
            seats=settings.seats,
            rank=device.index * 1000 + n,
            **_facts(device),
        )
        for n in range(settings.seats)
    ]


def offered_slices(
    device: Device, settings: SharedSettings | None, mig_slices: Iterable[Slice] = ()
) -> tuple[list[Slice], list[str]]:
    """The slices a device is offered as, and warnings: its MIG devices (``mig_slices``) when it is
    in MIG mode (shared-seat ``settings`` are then ignored, with a warning), else its seats when
    ``settings`` split it (a split that does not fit: a warning and the whole device), else the
    whole device. Seats that overcommit the device once their CUDA contexts are counted
    (:func:`footprint_problem`) are offered with a warning. The one rule for NVML (:mod:`.nvml`)
    and node agents' reports (:mod:`.wire`)."""
    where = f"{device.describe()} ({device.uuid})"
    warnings: list[str] = []
    if device.mig_enabled:
        if settings is not None:
            warnings.append(
                f"{where} is in MIG mode, so its shared-seat settings are ignored and its MIG "
                "devices are offered; disable MIG mode to share it in seats"
            )
        return list(mig_slices), warnings
    if settings is not None:
        problem = seat_problem(device, settings)
        if problem is None:
            overcommit = overcommit_note(device, settings)
            if overcommit:
                warnings.append(overcommit)
            return seat_slices(device, settings), warnings
        warnings.append(f"{where} cannot be shared as configured: {problem}; offered whole")
    return [whole_slice(device)], warnings


def overcommit_note(device: Device, settings: SharedSettings | None) -> str | None:
    """``"<device> (<uuid>) overcommits its memory: …"`` (:func:`footprint_problem`) when
    ``settings`` split ``device`` in seats that do not fit once their CUDA contexts are counted;
    ``None`` when they fit or are not offered as seats (MIG mode, no settings, a split
    :func:`seat_problem` rejects: :func:`offered_slices` says why)."""
    if device.mig_enabled or settings is None or seat_problem(device, settings) is not None:
        return None
    problem = footprint_problem(device, settings)
    return (
        f"{device.describe()} ({device.uuid}) overcommits its memory: {problem}"
        if problem
        else None
    )


def assemble(
    devices: Iterable[Device],
    slices: Iterable[Slice],
    source: str,
    warnings: Iterable[str] = (),
) -> Inventory:
    """An :class:`Inventory` in canonical order: devices by index, slices by device then rank."""
    return Inventory(
        devices=tuple(sorted(devices, key=lambda d: (d.index, d.uuid))),
        slices=tuple(sorted(slices, key=lambda s: (s.device_index, s.kind.value, s.rank, s.id))),
        source=source,
        warnings=tuple(warnings),
    )

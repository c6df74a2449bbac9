"""Read the GPU inventory and utilisation from NVML, opened through :mod:`.nvml_calls` (the only
module in gpulab that imports pynvml).

``pynvml`` (the ``nvidia-ml-py`` package) is imported lazily, inside the functions, so importing
this module costs nothing on a host without it. Every function takes ``nvml=``, a module-like
object with pynvml's functions, constants and exception classes: the real ``pynvml`` by default,
the fake in ``tests/fake_nvml.py`` in tests.

A host without the driver (no ``libnvidia-ml.so.1``, driver not loaded, no ``pynvml``) yields an
empty inventory (``source="none"``) with one warning; CPU profiles keep working. A device that
vanishes or fails mid-scan is skipped with a warning and the others are kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .model import Device, Inventory, SharedSettings, Slice, Utilization, parse_version
from .nvml_calls import (
    describe_error,
    fatal_errors,
    load_nvml,
    optional,
    quiet,
    shutdown,
    text,
    unavailable,
)
from .slices import (
    DEFAULT_MIG_COMPUTE_SLICES,
    assemble,
    mig_profile_name,
    mig_slice,
    offered_slices,
    vgpu_type_from_name,
)

__all__ = [
    "Utilization",
    "discover",
    "sample_utilization",
]

# GPU instance profiles whose names carry attributes, as nvidia-smi and NVIDIA/go-nvlib spell them.
_PROFILE_SUFFIXES = {
    "NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1": "+me",
    "NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1": "+me",
    "NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME": "+me.all",
    "NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME": "+me.all",
    "NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX": "+gfx",
    "NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX": "+gfx",
    "NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX": "+gfx",
    "NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME": "-me",
    "NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME": "-me",
}


def discover(
    node: str = "local",
    nvml: Any = None,
    shared: dict[str, SharedSettings] | None = None,
) -> Inventory:
    """Every device NVML reports on this host, with its slices.

    - A device not in MIG mode gives one ``gpu`` slice, or, when its UUID is a key of ``shared``,
      ``shared`` seats (if the seats do not fit in its memory: a warning and a whole slice).
    - A MIG-enabled device gives only its MIG devices, each a ``mig`` slice with its
      ``MIG-<uuid>``, memory (bytes, ``nvmlDeviceGetMemoryInfo(mig).total``) and canonical profile
      name (see :func:`.slices.mig_profile_name`); ``share`` is ``g`` over the parent's largest
      GPU instance (7 on A100/H100/H200, 4 on A30).
    - A vGPU guest (``GRID P40-1Q``) is a device like any other, with ``vgpu_type`` set.

    ``node`` is stamped on devices and slices. ``nvml`` defaults to the real ``pynvml``.
    Never raises for a missing driver: returns ``Inventory(source="none")`` with one warning.
    """
    shared = shared or {}
    nvml, missing = load_nvml(nvml)
    if nvml is None:
        return Inventory(source="none", warnings=(missing,))
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return Inventory(source="none", warnings=(unavailable(nvml, exc),))
    try:
        return _scan(nvml, node, shared)
    except nvml.NVMLError as exc:  # NVML as a whole failed (per-device errors are handled)
        return Inventory(source="none", warnings=(unavailable(nvml, exc),))
    finally:
        shutdown(nvml)


def sample_utilization(inventory: Inventory, nvml: Any = None) -> dict[str, Utilization]:
    """Current utilisation of every slice of ``inventory``, keyed by slice id.

    Whole GPUs and MIG devices are looked up by UUID (``nvmlDeviceGetHandleByUUID`` accepts both);
    shared seats report their device's figures (per seat: :func:`process_utilization`, which
    :mod:`jupyterhub_gpulab.service.monitor` maps to containers). One
    ``nvmlInit``/``nvmlShutdown`` per call. Never raises: a slice NVML cannot read, or every slice
    on a host without NVML, gets ``Utilization(None, None)``.
    """
    result = {s.id: Utilization() for s in inventory.slices}
    nvml, _missing = load_nvml(nvml)
    if nvml is None or not inventory.slices:
        return result
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return result
    try:
        by_visible: dict[str, Utilization] = {}
        for s in inventory.slices:
            if s.visible_id not in by_visible:
                by_visible[s.visible_id] = _sample(nvml, s.visible_id)
            result[s.id] = by_visible[s.visible_id]
        return result
    finally:
        shutdown(nvml)


def gpu_instance_ids(mig_uuids: Iterable[str], nvml: Any = None) -> dict[str, int]:
    """``{MIG device UUID: GPU instance id}`` (``nvmlDeviceGetGpuInstanceId``: the id
    dcgm-exporter's ``gpu_instance_id`` shows) for each MIG device NVML knows; the others are
    left out. One ``nvmlInit``/``nvmlShutdown`` per call; never raises."""
    wanted = list(dict.fromkeys(mig_uuids))
    nvml, _missing = load_nvml(nvml)
    if nvml is None or not wanted:
        return {}
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return {}
    try:
        found = {}
        for uuid in wanted:
            gi = quiet(
                nvml,
                lambda u=uuid: int(
                    nvml.nvmlDeviceGetGpuInstanceId(nvml.nvmlDeviceGetHandleByUUID(u))
                ),
            )
            if gi is not None:
                found[uuid] = gi
        return found
    finally:
        shutdown(nvml)


# -- scanning -------------------------------------------------------------------------------------


def _scan(nvml: Any, node: str, shared: dict[str, SharedSettings]) -> Inventory:
    devices: list[Device] = []
    slices: list[Slice] = []
    warnings: list[str] = []
    fatal = fatal_errors(nvml)
    driver = _driver_version(nvml, warnings)
    for index in range(nvml.nvmlDeviceGetCount()):
        label = f"GPU {index}"
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = text(nvml.nvmlDeviceGetUUID(handle))
            label = f"GPU {index} ({uuid})"
            device, device_slices, device_warnings = _read_device(
                nvml, handle, index, uuid, node, shared.get(uuid), driver
            )
        except fatal:
            raise
        except nvml.NVMLError as exc:
            warnings.append(
                f"{label} vanished or failed while being read ({describe_error(exc)}); skipped it, "
                "the other GPUs are in the inventory. Check `nvidia-smi` and the kernel log."
            )
            continue
        devices.append(device)
        slices.extend(device_slices)
        warnings.extend(device_warnings)
    found = {d.uuid for d in devices}
    for uuid in sorted(set(shared) - found):
        warnings.append(
            f"shared settings name {uuid}, which NVML does not report on this host; "
            "check the UUID with `nvidia-smi -L`"
        )
    return assemble(devices, slices, "nvml", warnings)


def _driver_version(nvml: Any, warnings: list[str]) -> tuple[int, ...] | None:
    """The host's driver version (``nvmlSystemGetDriverVersion``: ``"580.65.06"``), or ``None``
    (with a warning when NVML answers something that is not a version)."""
    raw = optional(nvml, nvml.nvmlSystemGetDriverVersion)
    if raw is None:
        return None
    try:
        return parse_version(text(raw))
    except ValueError:
        warnings.append(
            f"NVML reports driver version {text(raw)!r}, not a version; images' driver "
            "needs are not checked on this host"
        )
        return None


def _read_device(
    nvml: Any,
    handle: Any,
    index: int,
    uuid: str,
    node: str,
    settings: SharedSettings | None,
    driver: tuple[int, ...] | None = None,
) -> tuple[Device, list[Slice], list[str]]:
    name = text(nvml.nvmlDeviceGetName(handle))
    memory = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
    cc = optional(nvml, lambda: nvml.nvmlDeviceGetCudaComputeCapability(handle))
    warnings: list[str] = []
    mig_enabled = _mig_enabled(nvml, handle, index, warnings)
    device = Device(
        uuid=uuid,
        index=index,
        name=name,
        memory_bytes=memory,
        compute_capability=(int(cc[0]), int(cc[1])) if cc is not None else None,
        mig_enabled=mig_enabled,
        node=node,
        vgpu_type=vgpu_type_from_name(name),
        driver_version=driver,
    )
    mig = _mig_slices(nvml, handle, device, warnings) if mig_enabled else []
    slices, offered = offered_slices(device, settings, mig)
    return device, slices, warnings + offered


def _mig_enabled(nvml: Any, handle: Any, index: int, warnings: list[str]) -> bool:
    modes = optional(nvml, lambda: nvml.nvmlDeviceGetMigMode(handle))
    if modes is None:  # pre-Ampere GPUs and vGPU guests: NVMLError_NotSupported
        return False
    current, pending = int(modes[0]), int(modes[1])
    enabled = current == nvml.NVML_DEVICE_MIG_ENABLE
    if pending != current:
        will = "enabled" if pending == nvml.NVML_DEVICE_MIG_ENABLE else "disabled"
        warnings.append(
            f"GPU {index}: MIG mode will be {will} after a GPU reset; the inventory shows the "
            f"current mode until then (`nvidia-smi -r -i {index}` applies it)"
        )
    return enabled


def _mig_slices(nvml: Any, parent: Any, device: Device, warnings: list[str]) -> list[Slice]:
    profiles = gi_profiles(nvml, parent)
    compute_slices = max(
        (int(info.sliceCount) for _, info in profiles.values()), default=DEFAULT_MIG_COMPUTE_SLICES
    )
    slices: list[Slice] = []
    for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(parent)):
        try:
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, i)
            except (nvml.NVMLError_NotFound, nvml.NVMLError_InvalidArgument):
                # No MIG device at this index: indices have gaps once instances are destroyed
                # and re-created. NVML documents NOT_FOUND; drivers also answer
                # INVALID_ARGUMENT, which NVIDIA's go-nvlib (VisitMigDevices) skips the same way.
                continue
            mig_uuid = text(nvml.nvmlDeviceGetUUID(mig))
            g, memory_mb, suffix = _mig_geometry(nvml, parent, mig, profiles)
            profile = mig_profile_name(g, memory_mb, device.memory_bytes, suffix)
            memory = int(nvml.nvmlDeviceGetMemoryInfo(mig).total)
        except (nvml.NVMLError_GpuIsLost, *fatal_errors(nvml)):
            raise  # the parent is gone: skip the whole device
        except nvml.NVMLError as exc:
            warnings.append(
                f"MIG device {i} on {device.describe()} could not be read ({describe_error(exc)}); skipped it"
            )
            continue
        slices.append(mig_slice(device, mig_uuid, profile, memory, len(slices), compute_slices))
    if not slices:
        warnings.append(
            f"{device.describe()} is in MIG mode but has no MIG devices, so it offers no slice; "
            "create them (`nvidia-smi mig -cgi 1g.10gb,… -C`) or disable MIG mode"
        )
    return slices


def gi_profiles(nvml: Any, parent: Any) -> dict[int, tuple[int, Any]]:
    """``{profile id: (NVML_GPU_INSTANCE_PROFILE_* constant, profile info)}`` for the parent.

    The id a GPU instance reports (``nvmlGpuInstanceGetInfo(gi).profileId``, e.g. 19 for
    ``1g.5gb`` on A100) is the info's ``id``, not the constant used to ask for it.
    """
    found: dict[int, tuple[int, Any]] = {}
    for constant in range(int(getattr(nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0))):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(parent, constant)
        except (nvml.NVMLError_GpuIsLost, *fatal_errors(nvml)):
            raise
        except nvml.NVMLError:
            continue  # a profile this GPU (or driver) does not have
        found[int(info.id)] = (constant, info)
    return found


def _mig_geometry(
    nvml: Any, parent: Any, mig: Any, profiles: dict[int, tuple[int, Any]]
) -> tuple[int, int, str]:
    """``(compute slices, memory MiB, name suffix)`` of the GPU instance behind ``mig``.

    From the GPU instance's profile when NVML lets us read it; where it does not (no access to
    the MIG monitor capability, e.g. inside a container), from ``nvmlDeviceGetAttributes`` of the
    MIG device, which gives the same figures but no ``+me`` attribute.
    """
    try:
        gi_id = nvml.nvmlDeviceGetGpuInstanceId(mig)
        gi_info = nvml.nvmlGpuInstanceGetInfo(nvml.nvmlDeviceGetGpuInstanceById(parent, gi_id))
        constant, info = profiles[int(gi_info.profileId)]
        return int(info.sliceCount), int(info.memorySizeMB), profile_suffix(nvml, constant)
    except (nvml.NVMLError_GpuIsLost, *fatal_errors(nvml)):
        raise
    except (nvml.NVMLError, KeyError):
        attrs = nvml.nvmlDeviceGetAttributes(mig)
        return int(attrs.gpuInstanceSliceCount), int(attrs.memorySizeMB), ""


def _sample(nvml: Any, uuid: str) -> Utilization:
    try:
        handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
    except nvml.NVMLError:
        return Utilization()
    gpu = quiet(nvml, lambda: float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu))
    used = quiet(nvml, lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).used))
    return Utilization(gpu_percent=gpu, memory_used_bytes=used)


# -- small helpers ----------------------------------------------------------------------------------


def profile_suffix(nvml: Any, constant: int) -> str:
    for name, suffix in _PROFILE_SUFFIXES.items():
        if getattr(nvml, name, None) == constant:
            return suffix
    return ""

"""The fake NVML's MIG layout calls (mixed into ``fake_nvml.FakeNVML``): listing, creating and
destroying GPU instances and compute instances, as pynvml exposes them.

What each mimics (NVML's API reference, and pynvml's wrappers for the argument shapes):

- Handles are pynvml's own opaque ctypes pointers (``c_nvmlGpuInstance_t``,
  ``c_nvmlComputeInstance_t``), so they fit in the arrays callers allocate for
  ``nvmlDeviceGetGpuInstances`` / ``nvmlGpuInstanceGetComputeInstances``; a handle of a destroyed
  instance answers ``NVML_ERROR_INVALID_ARGUMENT``.
- Placements are in memory slices (8 on A100/H100/H200), as ``nvidia-smi mig -lgipp`` lists
  them: 1g ``{0..6}:1``, 1g.20gb (REV2) ``{0,2,4,6}:2``, 2g ``{0,2,4}:2``, 3g ``{0,4}:4``,
  4g ``{0}:4``, 7g ``{0}:8``. ``nvmlDeviceCreateGpuInstance`` takes the lowest free placement;
  one that overlaps another instance (or none left) is ``NVML_ERROR_INSUFFICIENT_RESOURCES``.
- A GPU not in MIG mode answers ``NVML_ERROR_NOT_SUPPORTED``; ``FakeGpu.root = False`` (not
  root, no ``/proc/driver/nvidia/capabilities/mig/config``) makes every create and destroy
  ``NVML_ERROR_NO_PERMISSION``; destroying a compute instance a process runs on
  (``fake.start_process(mig_uuid, pid)``), or a GPU instance that still has a compute instance,
  is ``NVML_ERROR_IN_USE``.
- Each compute instance is a MIG device (``MIG-…`` UUID, found by
  ``nvmlDeviceGetMigDeviceHandleByIndex``); a GPU instance without one is not. A fresh compute
  instance gets a fresh MIG UUID, as on real GPUs.
- Limitation: each GPU instance offers one compute instance profile, its full size (what
  ``nvidia-smi mig -cgi … -C`` makes); smaller ones answer ``NVML_ERROR_NOT_SUPPORTED``.

``fake.fail_next("nvmlDeviceCreateGpuInstanceWithPlacement", RuntimeError("killed"))`` makes the
next such call raise, as a kill mid-change would stop the run there.
"""

from __future__ import annotations

import ctypes
import itertools
from typing import Any

import pynvml

_C = pynvml
_ENGINE = _C.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
_CI_PROFILE = {  # compute slices -> NVML_COMPUTE_INSTANCE_PROFILE_*
    1: _C.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
    2: _C.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
    3: _C.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
    4: _C.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
    7: _C.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
}


def placements(constant: int, slice_count: int) -> tuple[tuple[int, ...], int]:
    """``(possible starts, size)`` in memory slices of GPU instance profile ``constant``."""
    if constant == _C.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2:
        return (0, 2, 4, 6), 2
    return {
        1: ((0, 1, 2, 3, 4, 5, 6), 1),
        2: ((0, 2, 4), 2),
        3: ((0, 4), 4),
        4: ((0,), 4),
        7: ((0,), 8),
    }[slice_count]


def place_all(wanted: list[tuple[tuple[int, ...], int]], taken: set[int]) -> list[int] | None:
    """Starts for each ``(starts, size)`` of ``wanted`` that overlap nothing (nor ``taken``), or
    ``None``: a small backtracking search, for boards built from a list of profiles."""
    if not wanted:
        return []
    (starts, size), rest = wanted[0], wanted[1:]
    for s in starts:
        cells = set(range(s, s + size))
        if cells & taken:
            continue
        tail = place_all(rest, taken | cells)
        if tail is not None:
            return [s, *tail]
    return None


class MigLayoutCalls:
    """The GPU/compute instance calls of :class:`fake_nvml.FakeNVML` (which provides ``gpus``,
    ``_check``, ``_use``, ``_profile_by_id`` and builds :class:`fake_nvml.FakeMig`)."""

    _tokens = itertools.count(0x1000)
    _mig_serial = itertools.count(1)

    # -- test controls ----------------------------------------------------------------------------

    def start_process(self, mig_uuid: str, pid: int) -> None:
        """A process (``pid``) runs on MIG device ``mig_uuid`` from now on."""
        _gpu, mig = self._find(mig_uuid)
        mig.pids.append(pid)

    def fail_next(self, call: str, error: BaseException) -> None:
        """The next call of ``call`` (a pynvml function name) raises ``error``, after which the
        call behaves again."""
        self.__dict__.setdefault("_fail", {})[call] = error

    def _maybe_fail(self, call: str) -> None:
        error = self.__dict__.get("_fail", {}).pop(call, None)
        if error is not None:
            raise error

    # -- handles --------------------------------------------------------------------------------

    def _handle(self, kind: Any, gpu: Any, mig: Any) -> Any:
        token = next(self._tokens)
        self.__dict__.setdefault("_handles", {})[token] = (gpu, mig)
        return ctypes.cast(ctypes.c_void_p(token), kind)

    def _gi(self, handle: Any, need_ci: bool = False) -> tuple[Any, Any]:
        self._check()
        token = ctypes.cast(handle, ctypes.c_void_p).value
        gpu, mig = self.__dict__.get("_handles", {}).get(token, (None, None))
        if gpu is None or not any(m is mig for m in gpu.migs + gpu.empty_gis):
            raise pynvml.NVMLError_InvalidArgument()  # a destroyed instance's handle
        if need_ci and mig not in gpu.migs:
            raise pynvml.NVMLError_InvalidArgument()
        gpu.touch()
        return gpu, mig

    def _mig_parent(self, device: Any, write: bool = False) -> Any:
        self._use(device)
        gpu = device.gpu
        if device.mig is not None:
            raise pynvml.NVMLError_InvalidArgument()
        if gpu.mig_mode is None or gpu.mig_mode[0] != _C.NVML_DEVICE_MIG_ENABLE:
            raise pynvml.NVMLError_NotSupported()
        if write and not gpu.root:
            raise pynvml.NVMLError_NoPermission()
        return gpu

    def _gi_profile(self, gpu: Any, profile_id: int) -> Any:
        for p in gpu.profiles:
            if p.id == profile_id:
                return p
        raise pynvml.NVMLError_InvalidArgument()

    @staticmethod
    def _fill(array: Any, count_ref: Any, items: list[Any]) -> None:
        count = count_ref._obj if hasattr(count_ref, "_obj") else count_ref.contents
        count.value = len(items)
        if array is not None:
            for i, item in enumerate(items):
                array[i] = item

    # -- GPU instances ----------------------------------------------------------------------------

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, device: Any, profileId: int, placementsRef: Any, countRef: Any
    ) -> int:
        gpu = self._mig_parent(device)
        p = self._gi_profile(gpu, profileId)
        starts, size = placements(p.constant, p.slice_count)
        items = [_C.c_nvmlGpuInstancePlacement_t(start=s, size=size) for s in starts]
        self._fill(placementsRef, countRef, items)
        return _C.NVML_SUCCESS

    def nvmlDeviceGetGpuInstances(
        self, device: Any, profileId: int, gpuInstancesRef: Any, countRef: Any
    ) -> int:
        gpu = self._mig_parent(device)
        if not gpu.gi_readable:
            raise pynvml.NVMLError_NoPermission()
        self._gi_profile(gpu, profileId)
        found = sorted(
            (m for m in gpu.migs + gpu.empty_gis if m.profile_id == profileId),
            key=lambda m: m.gi_id,
        )
        self._fill(
            gpuInstancesRef, countRef, [self._handle(_C.c_nvmlGpuInstance_t, gpu, m) for m in found]
        )
        return _C.NVML_SUCCESS

    def nvmlDeviceGetGpuInstanceById(self, device: Any, gpuInstanceId: int) -> Any:
        self._use(device)
        if not device.gpu.gi_readable:
            raise pynvml.NVMLError_NoPermission()
        for mig in device.gpu.migs + device.gpu.empty_gis:
            if mig.gi_id == gpuInstanceId:
                return self._handle(_C.c_nvmlGpuInstance_t, device.gpu, mig)
        raise pynvml.NVMLError_NotFound()

    def nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> Any:
        gpu, mig = self._gi(gpuInstance)
        p = self._profile_by_id(gpu, mig.profile_id)
        info = _C.c_nvmlGpuInstanceInfo_t()
        info.id, info.profileId = mig.gi_id, mig.profile_id
        info.placement.start, info.placement.size = (
            mig.start,
            placements(p.constant, p.slice_count)[1],
        )
        return info

    def nvmlDeviceCreateGpuInstance(self, device: Any, profileId: int) -> Any:
        return self._create_gi(device, profileId, None, "nvmlDeviceCreateGpuInstance")

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, device: Any, profileId: int, placement: Any
    ) -> Any:
        return self._create_gi(
            device, profileId, placement, "nvmlDeviceCreateGpuInstanceWithPlacement"
        )

    def _create_gi(self, device: Any, profile_id: int, placement: Any, call: str) -> Any:
        self._maybe_fail(call)
        gpu = self._mig_parent(device, write=True)
        p = self._gi_profile(gpu, profile_id)
        starts, size = placements(p.constant, p.slice_count)
        taken = set()
        for m in gpu.migs + gpu.empty_gis:
            q = self._profile_by_id(gpu, m.profile_id)
            taken |= set(range(m.start, m.start + placements(q.constant, q.slice_count)[1]))
        if placement is not None:
            if placement.start not in starts or placement.size != size:
                raise pynvml.NVMLError_InvalidArgument()
            starts = (placement.start,)
        free = [s for s in starts if not set(range(s, s + size)) & taken]
        if not free:
            raise pynvml.NVMLError_InsufficientResources()
        used = {m.gi_id for m in gpu.migs + gpu.empty_gis}
        gi_id = next(i for i in itertools.count(1) if i not in used)
        mig = self._new_mig(gpu, p, gi_id, free[0])
        gpu.empty_gis.append(mig)
        return self._handle(_C.c_nvmlGpuInstance_t, gpu, mig)

    def nvmlGpuInstanceDestroy(self, gpuInstance: Any) -> int:
        self._maybe_fail("nvmlGpuInstanceDestroy")
        gpu, mig = self._gi(gpuInstance)
        if not gpu.root:
            raise pynvml.NVMLError_NoPermission()
        if mig in gpu.migs:
            raise pynvml.NVMLError_InUse()  # its compute instance first
        gpu.empty_gis.remove(mig)
        return _C.NVML_SUCCESS

    # -- compute instances ----------------------------------------------------------------------

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, device: Any, profile: int, engProfile: int, version: int = 2
    ) -> Any:
        gpu, mig = self._gi(device)
        p = self._profile_by_id(gpu, mig.profile_id)
        if engProfile != _ENGINE or _CI_PROFILE.get(p.slice_count) != profile:
            raise pynvml.NVMLError_NotSupported()
        info = _C.c_nvmlComputeInstanceProfileInfo_v2_t()
        info.id, info.sliceCount, info.instanceCount = profile, p.slice_count, 1
        info.name = f"MIG {p.slice_count}c.{p.name}".encode()
        return info

    def nvmlGpuInstanceGetComputeInstances(
        self, gpuInstance: Any, profileId: int, computeInstancesRef: Any, countRef: Any
    ) -> int:
        gpu, mig = self._gi(gpuInstance)
        p = self._profile_by_id(gpu, mig.profile_id)
        if _CI_PROFILE.get(p.slice_count) != profileId:
            raise pynvml.NVMLError_NotSupported()
        found = [self._handle(_C.c_nvmlComputeInstance_t, gpu, mig)] if mig in gpu.migs else []
        self._fill(computeInstancesRef, countRef, found)
        return _C.NVML_SUCCESS

    def nvmlGpuInstanceCreateComputeInstance(self, gpuInstance: Any, profileId: int) -> Any:
        self._maybe_fail("nvmlGpuInstanceCreateComputeInstance")
        gpu, mig = self._gi(gpuInstance)
        if not gpu.root:
            raise pynvml.NVMLError_NoPermission()
        p = self._profile_by_id(gpu, mig.profile_id)
        if _CI_PROFILE.get(p.slice_count) != profileId:
            raise pynvml.NVMLError_NotSupported()
        if mig in gpu.migs:
            raise pynvml.NVMLError_InsufficientResources()  # its slices are all used
        used = {m.position for m in gpu.migs}
        mig.position = next(i for i in range(gpu.max_mig_devices) if i not in used)
        mig.uuid = f"MIG-f4ce0000-0000-5000-8000-{next(self._mig_serial):012d}"
        gpu.empty_gis.remove(mig)
        gpu.migs.append(mig)
        return self._handle(_C.c_nvmlComputeInstance_t, gpu, mig)

    def nvmlComputeInstanceGetInfo(self, computeInstance: Any) -> Any:
        gpu, mig = self._gi(computeInstance, need_ci=True)
        info = _C.c_nvmlComputeInstanceInfo_t()
        info.id, info.profileId = (
            0,
            _CI_PROFILE[self._profile_by_id(gpu, mig.profile_id).slice_count],
        )
        info.gpuInstance = self._handle(_C.c_nvmlGpuInstance_t, gpu, mig)
        return info

    nvmlComputeInstanceGetInfo_v2 = nvmlComputeInstanceGetInfo

    def nvmlComputeInstanceDestroy(self, computeInstance: Any) -> int:
        self._maybe_fail("nvmlComputeInstanceDestroy")
        gpu, mig = self._gi(computeInstance, need_ci=True)
        if not gpu.root:
            raise pynvml.NVMLError_NoPermission()
        if mig.pids:
            raise pynvml.NVMLError_InUse()
        gpu.migs.remove(mig)
        gpu.empty_gis.append(mig)
        return _C.NVML_SUCCESS

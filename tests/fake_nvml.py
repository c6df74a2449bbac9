"""A fake ``pynvml`` for tests: the hardware we lack, behind pynvml's real names.

:class:`FakeNVML` instances stand in for the ``pynvml`` module: the functions gpulab calls, with
the same names and signatures, return pynvml's own ctypes structures where pynvml does, and raise
pynvml's *real* exception classes (``pynvml.NVMLError_NotFound`` …), so code that catches
pynvml's exceptions behaves the same against both. Every ``NVML_*`` constant and ``NVMLError*``
class of the installed pynvml is available on the fake, and its ``c_nvml*`` ctypes structures. Calls before ``nvmlInit`` raise
``NVMLError_Uninitialized``, as the real library does. Where pynvml turns a driver's return code
into an exception (``_nvmlCheckReturn``), the fake raises ``pynvml.NVMLError(code)`` from the
code the driver would give, so the class is the one pynvml picks.

Boards (memory figures as NVML reports them; GPU instance profile ids and sizes for the A100s
as ``nvidia-smi mig -lgip`` lists them)::

    FakeNVML.p40()                 # Tesla P40, no MIG (NotSupported)
    FakeNVML.a100_mig_mixed()      # A100-SXM4-40GB in MIG mode: 3g.20gb, 2g.10gb, 1g.5gb, 1g.5gb
    FakeNVML.mixed_lab()           # P40 + A40 + that A100 + H100 80GB (MIG capable, disabled)
    FakeNVML.library_missing()     # nvmlInit raises NVMLError_LibraryNotFound
    FakeNVML.driver_not_loaded()   # nvmlInit raises NVMLError_DriverNotLoaded
    fake.vanish_after(3, index=1)  # GPU 1 answers 3 calls, then raises NVMLError_GpuIsLost
    fake.set_utilization(uuid, gpu_percent=40, memory_used=2 * GiB)

MIG devices at scattered indices (``nvmlDeviceGetMigDeviceHandleByIndex`` answers NOT_FOUND, or
INVALID_ARGUMENT, for the empty ones below ``nvmlDeviceGetMaxMigDeviceCount``)::

    mig_gpu(uuid, name, memory, profiles, layout, positions=[0, 3, 5],
            gap_error=pynvml.NVML_ERROR_INVALID_ARGUMENT)

MIG layouts (listing, creating, destroying GPU and compute instances: ``fake_nvml_mig.py``,
whose docstring says what each mimics)::

    fake.gpus[0].root = False      # every create/destroy answers NVML_ERROR_NO_PERMISSION
    fake.start_process(mig_uuid, 4242)   # destroying that compute instance: NVML_ERROR_IN_USE
    fake.fail_next("nvmlGpuInstanceCreateComputeInstance", RuntimeError("killed"))

Sampling (the calls are in ``fake_nvml_sampling.py``, whose docstring says what each mimics)::

    FakeNVML.h100_mig_lab(8)       # 8 × H100 80GB, each in MIG mode as 7 × 1g.10gb (GPM capable)
    fake.set_utilization(mig_uuid, gpu_percent=60)   # busy from now on, as GPM will report it
    fake.set_processes(gpu_uuid, [FakeProcess(pid=4242, used_memory=GiB, sm_percent=30)])
    fake.gpus[0].empty_process_read = pynvml.NVML_SUCCESS   # a driver's other "nothing ran"
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pynvml
from fake_nvml_mig import MigLayoutCalls, place_all, placements
from fake_nvml_sampling import SamplingCalls, note_busy

GiB = 2**30
MiB = 2**20

_C = pynvml  # constants


@dataclass
class FakeProfile:
    """A GPU instance profile a board offers: the ``NVML_GPU_INSTANCE_PROFILE_*`` constant used
    to ask for it, the ``id`` NVML reports for instances of it, its slices and memory (MiB)."""

    constant: int
    id: int
    slice_count: int
    memory_mb: int
    name: str = ""


@dataclass
class FakeMig:
    """A MIG device: its ``MIG-<uuid>``, GPU instance profile ``id`` and GPU instance id, the
    position ``nvmlDeviceGetMigDeviceHandleByIndex`` finds it at, its memory (bytes). ``start``
    is its GPU instance's placement (memory slices, see ``fake_nvml_mig``); ``pids`` the
    processes running on it. In ``FakeGpu.empty_gis`` the same record is a GPU instance without
    a compute instance (no MIG device)."""

    uuid: str
    profile_id: int
    gi_id: int
    position: int
    memory_total: int
    memory_used: int = 0
    gpm_percent: float = 0.0  # how busy this GPU instance is now (GPM's GRAPHICS_UTIL)
    busy_log: list[tuple[int, float]] = field(default_factory=list)  # see fake_nvml_sampling
    start: int = 0
    pids: list[int] = field(default_factory=list)


@dataclass
class FakeProcess:
    """A process on a device: host ``pid``, ``used_memory`` (bytes; ``None``: the driver answers
    ``NVML_VALUE_NOT_AVAILABLE``, which pynvml turns into ``usedGpuMemory = None``, as on
    Windows WDDM), ``sm_percent`` (what its per-process utilisation samples say; ``None``: it
    ran no kernel, so it has no samples), ``mps`` (an MPS client, listed by
    ``nvmlDeviceGetMPSComputeRunningProcesses``) and ``graphics`` (a graphics context, listed by
    ``nvmlDeviceGetGraphicsRunningProcesses``: an OpenGL/Vulkan program)."""

    pid: int
    used_memory: int | None = 0
    sm_percent: float | None = 0.0
    mps: bool = False
    graphics: bool = False


@dataclass
class FakeGpu:
    """A device. ``mig_mode`` is ``(current, pending)`` or ``None`` for a GPU without MIG
    (``NVMLError_NotSupported``); ``utilization_gpu=None`` means the rate is not supported;
    ``vanish_after`` is how many calls on its handles succeed before ``NVMLError_GpuIsLost``;
    ``gi_readable=False`` makes GPU instance queries fail with ``NVMLError_NoPermission`` (a
    container without the MIG monitor capability). ``mig_gap_error`` is the ``NVML_ERROR_*`` code
    ``nvmlDeviceGetMigDeviceHandleByIndex`` answers for an index below the maximum that holds no
    MIG device: NVML's documentation says ``NOT_FOUND``; NVIDIA's go-nvlib (``VisitMigDevices``)
    also skips ``INVALID_ARGUMENT`` there, so drivers answer either. The ``*_error`` codes below
    make the sampling calls fail as the driver would (see ``fake_nvml_sampling``). ``root=False``
    refuses MIG layout changes (``NVMLError_NoPermission``); ``empty_gis`` are GPU instances
    without a compute instance (``fake_nvml_mig``)."""

    uuid: str
    name: str
    memory_total: int
    compute_capability: tuple[int, int] | None = (8, 0)
    mig_mode: tuple[int, int] | None = None
    profiles: list[FakeProfile] = field(default_factory=list)
    migs: list[FakeMig] = field(default_factory=list)
    max_mig_devices: int = 0
    utilization_gpu: int | None = 0
    memory_used: int = 0
    vanish_after: int | None = None
    gi_readable: bool = True
    calls: int = 0
    processes: list[FakeProcess] = field(default_factory=list)
    process_utilization_supported: bool = True
    mig_gap_error: int = _C.NVML_ERROR_NOT_FOUND
    empty_process_read: int = _C.NVML_ERROR_NOT_FOUND
    process_read_error: int | None = None
    running_processes_error: int | None = None
    busy_log: list[tuple[int, float]] = field(default_factory=list)
    root: bool = True
    empty_gis: list[FakeMig] = field(default_factory=list)

    def touch(self) -> None:
        self.calls += 1
        if self.vanish_after is not None and self.calls > self.vanish_after:
            raise pynvml.NVMLError_GpuIsLost()


@dataclass(frozen=True)
class _Handle:
    gpu: FakeGpu
    mig: FakeMig | None = None


def _a100_40gb_profiles() -> list[FakeProfile]:
    return [
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_1_SLICE, 19, 1, 4864, "1g.5gb"),
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, 1, 4864, "1g.5gb+me"),
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, 1, 9856, "1g.10gb"),
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, 2, 9856, "2g.10gb"),
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, 3, 19968, "3g.20gb"),
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, 4, 19968, "4g.20gb"),
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, 7, 40192, "7g.40gb"),
    ]


def _a100_80gb_profiles() -> list[FakeProfile]:
    return [
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_1_SLICE, 19, 1, 9856, "1g.10gb"),
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, 1, 9856, "1g.10gb+me"),
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, 1, 19968, "1g.20gb"),
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, 2, 19968, "2g.20gb"),
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, 3, 40192, "3g.40gb"),
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, 4, 40192, "4g.40gb"),
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, 7, 80384, "7g.80gb"),
    ]


def _h200_profiles() -> list[FakeProfile]:
    # Sizes chosen to land on NVIDIA's published H200 names; the rounding is what is under test.
    return [
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_1_SLICE, 19, 1, 16896, "1g.18gb"),
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, 1, 33792, "1g.35gb"),
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, 2, 33792, "2g.35gb"),
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, 3, 69120, "3g.71gb"),
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, 4, 69120, "4g.71gb"),
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, 7, 138752, "7g.141gb"),
    ]


def _h100_80gb_profiles() -> list[FakeProfile]:
    return [
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_1_SLICE, 19, 1, 9856, "1g.10gb"),
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, 1, 19968, "1g.20gb"),
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, 2, 19968, "2g.20gb"),
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, 3, 40192, "3g.40gb"),
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, 4, 40192, "4g.40gb"),
        FakeProfile(_C.NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, 7, 80384, "7g.80gb"),
    ]


def mig_gpu(
    uuid: str,
    name: str,
    memory_total: int,
    profiles: list[FakeProfile],
    layout: list[tuple[str, str]],
    compute_capability: tuple[int, int] = (8, 0),
    positions: list[int] | None = None,
    gap_error: int = _C.NVML_ERROR_NOT_FOUND,
) -> FakeGpu:
    """A MIG-enabled GPU whose MIG devices are ``layout``: ``[(MIG uuid, profile name)]``,
    at ``positions`` (default 0, 1, 2 …; the others, up to 7, answer ``gap_error``: see
    :class:`FakeGpu`'s ``mig_gap_error``)."""
    by_name = {p.name: p for p in profiles}
    positions = positions or list(range(len(layout)))
    migs = [
        FakeMig(
            uuid=m_uuid,
            profile_id=by_name[profile].id,
            gi_id=gi,
            position=pos,
            memory_total=by_name[profile].memory_mb * MiB,
        )
        for gi, ((m_uuid, profile), pos) in enumerate(zip(layout, positions, strict=True), start=1)
    ]
    # each GPU instance at a placement that fits beside the others, as on a real GPU
    order = sorted(range(len(migs)), key=lambda i: -by_name[layout[i][1]].slice_count)
    geometry = [
        placements(by_name[layout[i][1]].constant, by_name[layout[i][1]].slice_count) for i in order
    ]
    starts = place_all(geometry, set())
    if starts is None:
        raise ValueError(f"no GPU holds this MIG layout: {[p for _, p in layout]}")
    for i, start in zip(order, starts):
        migs[i].start = start
    return FakeGpu(
        uuid=uuid,
        name=name,
        memory_total=memory_total,
        compute_capability=compute_capability,
        mig_mode=(_C.NVML_DEVICE_MIG_ENABLE, _C.NVML_DEVICE_MIG_ENABLE),
        profiles=profiles,
        migs=migs,
        max_mig_devices=7,
        mig_gap_error=gap_error,
    )


# -- boards -----------------------------------------------------------------------------------------

P40_UUID = "GPU-5e0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a50"
A40_UUID = "GPU-a40a40a4-0a40-4a40-8a40-a40a40a40a40"
A100_UUID = "GPU-8a3f0c1e-2b4d-4c6e-9f10-a1b2c3d4e5f6"
H100_UUID = "GPU-0b100b10-0000-4000-8000-000000000080"
A100_MIGS = [
    ("MIG-5c1e7a90-1111-5b2c-9d3e-000000000001", "3g.20gb"),
    ("MIG-5c1e7a90-2222-5b2c-9d3e-000000000002", "2g.10gb"),
    ("MIG-5c1e7a90-3333-5b2c-9d3e-000000000003", "1g.5gb"),
    ("MIG-5c1e7a90-4444-5b2c-9d3e-000000000004", "1g.5gb"),
]


def p40_gpu(uuid: str = P40_UUID) -> FakeGpu:
    return FakeGpu(uuid, "Tesla P40", 24576 * MiB, (6, 1))


def a40_gpu(uuid: str = A40_UUID) -> FakeGpu:
    return FakeGpu(uuid, "NVIDIA A40", 46068 * MiB, (8, 6))


def a100_mig_gpu(uuid: str = A100_UUID) -> FakeGpu:
    return mig_gpu(uuid, "NVIDIA A100-SXM4-40GB", 40960 * MiB, _a100_40gb_profiles(), A100_MIGS)


def h100_gpu(uuid: str = H100_UUID) -> FakeGpu:
    """H100 80GB, MIG capable but disabled: a whole GPU."""
    gpu = FakeGpu(uuid, "NVIDIA H100 80GB HBM3", 81559 * MiB, (9, 0))
    gpu.mig_mode = (_C.NVML_DEVICE_MIG_DISABLE, _C.NVML_DEVICE_MIG_DISABLE)
    gpu.max_mig_devices = 7
    return gpu


class FakeNVML(SamplingCalls, MigLayoutCalls):
    """A stand-in for the ``pynvml`` module over a list of :class:`FakeGpu` (index = position).

    ``init_error`` is a pynvml exception class ``nvmlInit`` raises; ``bytes_strings=True``
    returns names and UUIDs as ``bytes`` like pynvml < 11.515. ``driver_version`` is what
    ``nvmlSystemGetDriverVersion`` answers (``None``: NVML says it is not supported).
    """

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        *,
        init_error: type[Exception] | None = None,
        bytes_strings: bool = False,
        driver_version: str | None = "580.95.05",
    ) -> None:
        self.gpus = list(gpus or [])
        self.driver_version = driver_version
        self.init_error = init_error
        self.bytes_strings = bytes_strings
        self.refcount = 0
        self.init_calls = 0
        self.clock_us = 1_700_000_000_000_000  # NVML timestamps: µs
        self.sample_period_us = 10_000_000
        self.gpm_buffers: dict[int, Any] = {}  # address -> [struct, (µs, busy µs) or None]

    # -- builders ---------------------------------------------------------------------------------

    @classmethod
    def p40(cls, **kw: Any) -> FakeNVML:
        return cls([p40_gpu()], **kw)

    @classmethod
    def a100_mig_mixed(cls, **kw: Any) -> FakeNVML:
        return cls([a100_mig_gpu()], **kw)

    @classmethod
    def a100_80gb_mig(cls, layout: list[tuple[str, str]], **kw: Any) -> FakeNVML:
        gpu = mig_gpu(
            "GPU-a1008000-0000-4000-8000-000000000080",
            "NVIDIA A100-SXM4-80GB",
            81920 * MiB,
            _a100_80gb_profiles(),
            layout,
        )
        return cls([gpu], **kw)

    @classmethod
    def h200_mig(cls, layout: list[tuple[str, str]], **kw: Any) -> FakeNVML:
        gpu = mig_gpu(
            "GPU-0b200b20-0000-4000-8000-000000000141",
            "NVIDIA H200",
            143771 * MiB,
            _h200_profiles(),
            layout,
            compute_capability=(9, 0),
        )
        return cls([gpu], **kw)

    @classmethod
    def mixed_lab(cls, **kw: Any) -> FakeNVML:
        return cls([p40_gpu(), a40_gpu(), a100_mig_gpu(), h100_gpu()], **kw)

    @classmethod
    def library_missing(cls) -> FakeNVML:
        return cls(init_error=pynvml.NVMLError_LibraryNotFound)

    @classmethod
    def driver_not_loaded(cls) -> FakeNVML:
        return cls(init_error=pynvml.NVMLError_DriverNotLoaded)

    def vanish_after(self, n_calls: int, index: int = -1) -> FakeNVML:
        """GPU ``index`` answers ``n_calls`` more calls, then raises ``NVMLError_GpuIsLost``."""
        gpu = self.gpus[index]
        gpu.vanish_after = gpu.calls + n_calls
        return self

    def set_utilization(
        self, uuid: str, gpu_percent: int | None = None, memory_used: int | None = None
    ) -> None:
        """Set what a GPU (``GPU-…``) or MIG device (``MIG-…``) reports as busy / used."""
        gpu, mig = self._find(uuid)
        if mig is not None:  # MIG: utilisation rates stay unsupported; GPM reports gpu_percent
            if memory_used is not None:
                mig.memory_used = memory_used
            if gpu_percent is not None:
                note_busy(mig, gpu_percent)
                mig.gpm_percent = gpu_percent
            return
        note_busy(gpu, gpu_percent or 0)
        gpu.utilization_gpu = gpu_percent
        if memory_used is not None:
            gpu.memory_used = memory_used

    # -- pynvml API -------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            raise self.init_error()
        self.refcount += 1

    def nvmlShutdown(self) -> None:
        self._check()
        self.refcount -= 1

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._check()
        if self.driver_version is None:
            raise pynvml.NVMLError_NotSupported()
        return self._s(self.driver_version)

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._check()
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError_InvalidArgument()
        gpu = self.gpus[index]
        gpu.touch()
        return _Handle(gpu)

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> _Handle:
        self._check()
        gpu, mig = self._find(uuid.decode() if isinstance(uuid, bytes) else uuid)
        gpu.touch()
        return _Handle(gpu, mig)

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str | bytes:
        self._use(handle)
        return self._s(handle.mig.uuid if handle.mig else handle.gpu.uuid)

    def nvmlDeviceGetName(self, handle: _Handle) -> str | bytes:
        self._use(handle)
        if handle.mig:
            profile = self._profile_by_id(handle.gpu, handle.mig.profile_id)
            return self._s(f"{handle.gpu.name} MIG {profile.name}")
        return self._s(handle.gpu.name)

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: int | None = None) -> Any:
        self._use(handle)
        total, used = (
            (handle.mig.memory_total, handle.mig.memory_used)
            if handle.mig
            else (handle.gpu.memory_total, handle.gpu.memory_used)
        )
        return pynvml.c_nvmlMemory_t(total=total, free=total - used, used=used)

    def nvmlDeviceGetCudaComputeCapability(self, handle: _Handle) -> tuple[int, int]:
        self._use(handle)
        if handle.gpu.compute_capability is None:
            raise pynvml.NVMLError_NotSupported()
        return handle.gpu.compute_capability

    def nvmlDeviceGetMigMode(self, device: _Handle) -> list[int]:
        self._use(device)
        if device.mig is not None or device.gpu.mig_mode is None:
            raise pynvml.NVMLError_NotSupported()
        return list(device.gpu.mig_mode)

    def nvmlDeviceGetMaxMigDeviceCount(self, device: _Handle) -> int:
        self._use(device)
        if device.gpu.mig_mode is None:
            raise pynvml.NVMLError_NotSupported()
        return device.gpu.max_mig_devices

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: _Handle, index: int) -> _Handle:
        self._use(device)
        if device.gpu.mig_mode is None or not 0 <= index < device.gpu.max_mig_devices:
            raise pynvml.NVMLError_InvalidArgument()
        for mig in device.gpu.migs:
            if mig.position == index:
                return _Handle(device.gpu, mig)
        raise pynvml.NVMLError(device.gpu.mig_gap_error)  # pynvml's _nvmlCheckReturn

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, device: _Handle, profile: int, version: int = 2
    ) -> Any:
        self._use(device)
        for p in device.gpu.profiles:
            if p.constant == profile:
                info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
                info.id, info.sliceCount, info.memorySizeMB = p.id, p.slice_count, p.memory_mb
                info.instanceCount = 7 // p.slice_count
                info.name = f"MIG {p.name}".encode()
                return info
        raise pynvml.NVMLError_NotSupported()

    def nvmlDeviceGetGpuInstanceId(self, device: _Handle) -> int:
        self._use(device)
        if device.mig is None:
            raise pynvml.NVMLError_InvalidArgument()
        return device.mig.gi_id

    def nvmlDeviceGetAttributes(self, device: _Handle) -> Any:
        self._use(device)
        if device.mig is None:
            raise pynvml.NVMLError_NotSupported()
        profile = self._profile_by_id(device.gpu, device.mig.profile_id)
        return pynvml.c_nvmlDeviceAttributes(
            gpuInstanceSliceCount=profile.slice_count,
            computeInstanceSliceCount=profile.slice_count,
            memorySizeMB=profile.memory_mb,
        )

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> Any:
        self._use(handle)
        if handle.mig is not None or handle.gpu.utilization_gpu is None:
            raise pynvml.NVMLError_NotSupported()
        return pynvml.c_nvmlUtilization_t(gpu=handle.gpu.utilization_gpu, memory=0)

    # -- boards for sampling (the calls are in fake_nvml_sampling.py) ---------------------------

    @classmethod
    def h100_mig_lab(cls, n_gpus: int = 8, **kw: Any) -> FakeNVML:
        """``n_gpus`` H100 80GB in MIG mode, each split as 7 × 1g.10gb (``MIG-h100-<i>-<j>``)."""
        gpus = []
        for i in range(n_gpus):
            gpu = mig_gpu(
                f"GPU-h1000000-0000-4000-8000-{i:012d}",
                "NVIDIA H100 80GB HBM3",
                81559 * MiB,
                _h100_80gb_profiles(),
                [(f"MIG-h100-{i}-{j}", "1g.10gb") for j in range(7)],
                compute_capability=(9, 0),
            )
            gpus.append(gpu)
        return cls(gpus, **kw)

    # -- internals --------------------------------------------------------------------------------

    def _check(self) -> None:
        if self.refcount <= 0:
            raise pynvml.NVMLError_Uninitialized()

    def _use(self, handle: _Handle) -> None:
        self._check()
        handle.gpu.touch()

    def _s(self, text: str) -> str | bytes:
        return text.encode() if self.bytes_strings else text

    def _find(self, uuid: str) -> tuple[FakeGpu, FakeMig | None]:
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu, None
            for mig in gpu.migs:
                if mig.uuid == uuid:
                    return gpu, mig
        raise pynvml.NVMLError_NotFound()

    @staticmethod
    def _profile_by_id(gpu: FakeGpu, profile_id: int) -> FakeProfile:
        return next(p for p in gpu.profiles if p.id == profile_id)

    @staticmethod
    def _new_mig(gpu: FakeGpu, profile: FakeProfile, gi_id: int, start: int) -> FakeMig:
        """A new GPU instance (no compute instance yet: no UUID, no MIG device index)."""
        return FakeMig(
            uuid="",
            profile_id=profile.id,
            gi_id=gi_id,
            position=-1,
            memory_total=profile.memory_mb * MiB,
            start=start,
        )


# pynvml's constants, real exception classes and ctypes structures, on the fake "module".
for _name in dir(pynvml):
    if _name.startswith(("NVML_", "NVMLError", "c_nvml")) and not hasattr(FakeNVML, _name):
        setattr(FakeNVML, _name, getattr(pynvml, _name))

"""NVML sampling beyond whole-device utilisation: per-process use of a device (to attribute a
shared seat's work to its container) and GPM metrics (utilisation of MIG devices, Hopper or newer).

Calls NVML only through the module object :mod:`.nvml` loads, so that module stays the only one
that imports ``pynvml``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["GpmActivity", "ProcessReport", "ProcessUsage", "process_utilization"]

from .nvml_calls import load_nvml, optional, shutdown


@dataclass(frozen=True)
class ProcessUsage:
    """One process on a device. ``sm_percent``: mean of NVML's per-process SM utilisation samples
    (0–100) since the previous read, 0.0 for a process with none (it ran no kernel), ``None``
    when NVML cannot report per-process utilisation. ``memory_used_bytes``: ``None`` if unknown."""

    pid: int
    sm_percent: float | None
    memory_used_bytes: int | None


@dataclass(frozen=True)
class ProcessReport:
    """What runs on one device: ``processes`` by host pid, and ``last_seen_us``, the newest sample
    timestamp (µs, NVML's clock) to pass as the next read's ``since``. ``memory_readable``:
    NVML lists the device's processes with their memory (``False`` where the process lists are
    ``NVML_ERROR_NOT_SUPPORTED``, as on vGPU guests: no seat there can be checked from the
    host)."""

    processes: dict[int, ProcessUsage]
    last_seen_us: int
    memory_readable: bool = True


def process_utilization(
    devices: Mapping[str, int], nvml: Any = None
) -> dict[str, ProcessReport | None]:
    """Per-process use of each device in ``devices`` (``{GPU uuid: since}``, ``since`` the
    ``last_seen_us`` of the previous read, 0 at first), keyed by the same uuids.

    Processes come from ``nvmlDeviceGetComputeRunningProcesses``, the MPS clients from
    ``nvmlDeviceGetMPSComputeRunningProcesses`` and graphics contexts (OpenGL, Vulkan) from
    ``nvmlDeviceGetGraphicsRunningProcesses`` where they exist; a process in several lists
    (a CUDA program that also draws) is one, with its first list's ``usedGpuMemory``
    (bytes, ``None`` where NVML does not report it). Utilisation from
    ``nvmlDeviceGetProcessUtilization(handle, since)``: samples newer than ``since``, so successive
    reads cover the whole interval. NVML reports host pids. Not supported on MIG-enabled GPUs
    (NVML's documentation), where ``sm_percent`` is ``None``. A device NVML cannot read gives
    ``None``; never raises.
    """
    result: dict[str, ProcessReport | None] = {uuid: None for uuid in devices}
    nvml, _missing = load_nvml(nvml)
    if nvml is None or not devices:
        return result
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return result
    try:
        for uuid, since in devices.items():
            try:
                result[uuid] = _processes(nvml, uuid, since)
            except nvml.NVMLError:
                result[uuid] = None
        return result
    finally:
        shutdown(nvml)


def _processes(nvml: Any, uuid: str, since: int) -> ProcessReport:
    handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
    memory: dict[int, int | None] = {}
    readable = False
    for name in _PROCESS_LISTS:
        running = (
            optional(nvml, lambda n=name: getattr(nvml, n)(handle)) if hasattr(nvml, name) else None
        )
        readable = readable or (running is not None and name == _PROCESS_LISTS[0])
        for p in running or ():
            memory.setdefault(int(p.pid), p.usedGpuMemory)
    try:
        samples = nvml.nvmlDeviceGetProcessUtilization(handle, since)
    except nvml.NVMLError as exc:
        # NOT_FOUND (or pynvml's NVMLError(SUCCESS) for an empty buffer): nothing ran since then
        none_ran = isinstance(exc, nvml.NVMLError_NotFound) or getattr(exc, "value", None) == 0
        samples = [] if none_ran else None
    sums: dict[int, list[float]] = {}
    latest = since
    for smp in samples or ():
        sums.setdefault(int(smp.pid), []).append(float(smp.smUtil))
        latest = max(latest, int(smp.timeStamp))
    procs = {
        pid: ProcessUsage(
            pid,
            None if samples is None else (sum(sums[pid]) / len(sums[pid]) if pid in sums else 0.0),
            memory.get(pid),
        )
        for pid in set(memory) | set(sums)
    }
    return ProcessReport(procs, latest, readable)


_PROCESS_LISTS = (
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetMPSComputeRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses",
)


class GpmActivity:
    """How busy whole GPUs and MIG devices were between two reads, from GPU Performance Monitoring.

    GPM's ``NVML_GPM_METRIC_GRAPHICS_UTIL`` is the share of time (0–100) any compute or graphics
    engine was active between two counter samples: it covers the whole interval, and on MIG it is
    the only per-instance utilisation NVML offers (``nvmlDeviceGetUtilizationRates`` is "not
    supported" on MIG). GPM needs Hopper or newer (``nvmlGpmQueryDeviceSupport``); elsewhere, on
    each target's first read (one sample gives no rate), and when NVML gives no number (NaN: two
    reads within its 100 ms counter refresh), :meth:`read` answers ``None``. The previous sample
    is always ``sample1``, the new one ``sample2``.

    GPM sample buffers live in the library, so this object keeps NVML initialised from its first
    read until :meth:`close`. Not thread-safe; one per monitor.
    """

    def __init__(self, nvml: Any = None):
        self._nvml, _missing = load_nvml(nvml)
        self._open = False
        self._supported: dict[str, bool] = {}
        self._gi: dict[str, int] = {}
        self._previous: dict[str, Any] = {}

    def read(self, targets: Iterable[tuple[str, str | None]]) -> dict[str, float | None]:
        """Busy % since the previous read for each ``(GPU uuid, MIG uuid or None)``, keyed by the
        MIG uuid, or the GPU uuid for a whole GPU. Never raises."""
        targets = list(targets)
        out: dict[str, float | None] = {mig or gpu: None for gpu, mig in targets}
        nvml = self._nvml
        if nvml is None or not targets:
            return out
        if not self._open:
            try:
                nvml.nvmlInit()
            except nvml.NVMLError:
                return out
            self._open = True
        for gpu, mig in targets:
            if self._supported.get(gpu) is not False:
                out[mig or gpu] = self._read_one(nvml, gpu, mig)
        return out

    def _read_one(self, nvml: Any, gpu: str, mig: str | None) -> float | None:
        key = mig or gpu
        sample = None
        try:
            parent = nvml.nvmlDeviceGetHandleByUUID(gpu)
            if gpu not in self._supported:
                support = optional(nvml, lambda: nvml.nvmlGpmQueryDeviceSupport(parent))
                self._supported[gpu] = bool(support is not None and support.isSupportedDevice)
                if not self._supported[gpu]:
                    return None
            sample = nvml.nvmlGpmSampleAlloc()
            if mig is None:
                nvml.nvmlGpmSampleGet(parent, sample)
            else:
                if mig not in self._gi:
                    self._gi[mig] = nvml.nvmlDeviceGetGpuInstanceId(
                        nvml.nvmlDeviceGetHandleByUUID(mig)
                    )
                nvml.nvmlGpmMigSampleGet(parent, self._gi[mig], sample)
        except nvml.NVMLError:
            if sample is not None:
                self._free(sample)
            self._drop(key)
            return None
        previous, self._previous[key] = self._previous.get(key), sample
        if previous is None:
            return None
        try:
            get = nvml.c_nvmlGpmMetricsGet_t()
            get.version = nvml.NVML_GPM_METRICS_GET_VERSION
            get.numMetrics = 1
            get.sample1, get.sample2 = previous, sample
            get.metrics[0].metricId = nvml.NVML_GPM_METRIC_GRAPHICS_UTIL
            nvml.nvmlGpmMetricsGet(get)
            metric = get.metrics[0]
            value = float(metric.value)
            if metric.nvmlReturn != nvml.NVML_SUCCESS or math.isnan(value):
                return None  # NaN: two samples of one counter refresh (0 / 0), not an idle GPU
            return min(100.0, max(0.0, value))
        except nvml.NVMLError:
            return None
        finally:
            self._free(previous)

    def _drop(self, key: str) -> None:
        previous = self._previous.pop(key, None)
        if previous is not None:
            self._free(previous)

    def _free(self, sample: Any) -> None:
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlGpmSampleFree(sample)

    def forget(self, keep: Iterable[str]) -> None:
        """Free the samples of targets not in ``keep`` (uuids): slices that left the inventory."""
        for key in set(self._previous) - set(keep):
            self._drop(key)

    def close(self) -> None:
        """Free every sample and release NVML. The object may be read again afterwards."""
        if self._nvml is None:
            return
        for key in list(self._previous):
            self._drop(key)
        if self._open:
            shutdown(self._nvml)
            self._open = False

"""The sampling half of the fake ``pynvml`` (``fake_nvml.FakeNVML`` mixes it in): per-process
utilisation and GPU Performance Monitoring (GPM), as nvidia-ml-py's ``pynvml.py`` exposes them.

Each call does what pynvml's wrapper does with the return code the driver would give:

- ``nvmlDeviceGetProcessUtilization(handle, timeStamp)``: pynvml first asks for the size; only
  ``NVML_ERROR_INSUFFICIENT_SIZE`` leads to samples, every other code is raised as
  ``NVMLError(code)`` (its subclass for that code, or plain ``NVMLError`` for ``NVML_SUCCESS``).
  No sample newer than ``timeStamp``: ``FakeGpu.empty_process_read`` (``NOT_FOUND``, as NVML's
  documentation says; ``NVML_SUCCESS`` for a driver that answers the size query with no entries,
  which pynvml raises as a bare ``NVMLError`` whose ``value`` is 0). ``process_read_error`` makes
  the read fail with any other code. Not supported on MIG-enabled GPUs.
- ``nvmlDeviceGetComputeRunningProcesses`` / ``…MPSComputeRunningProcesses`` /
  ``…GraphicsRunningProcesses`` (v3): ``[]`` when nothing runs (the driver's ``NVML_SUCCESS`` on
  the size query), ``running_processes_error`` raised as ``NVMLError(code)`` by all three
  (``NVML_ERROR_NOT_SUPPORTED`` on a vGPU guest, whose driver keeps per-process figures from
  the guest); ``usedGpuMemory`` is ``None`` where the driver answers
  ``NVML_VALUE_NOT_AVAILABLE`` (pynvml's special case). A process listed for the whole GPU is
  listed for none of its MIG devices (``[]``, as before).
- GPM (Hopper or newer: compute capability >= 9.0): a sample holds the device's (or GPU
  instance's) cumulative busy time and its timestamp, refreshed every 100 ms (NVML's "internal
  sample refresh rate"; its documentation asks for samples at least that far apart).
  ``nvmlGpmMetricsGet`` computes GRAPHICS_UTIL as ``100 × Δbusy / Δt`` between ``sample1`` and
  ``sample2``: the busy share over the whole interval, whatever the rate was when each sample
  was read. NVML's documentation and DCGM pass the earlier sample as ``sample1``; what NVML
  does with a reversed pair is not documented, so the fake subtracts its unsigned 64-bit
  counters as C does and a reversed pair reads about 100 % (busy, whatever ran). Two samples of
  one refresh give 0 / 0: NaN, which DCGM guards against.

Time is ``jupyterhub_gpulab.clock.utcnow()``, the one clock tests move. A rate set with
``FakeNVML.set_utilization`` holds from that moment; a device's rate before any was set has held
since the beginning of time.
"""

from __future__ import annotations

import ctypes
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import pynvml

from jupyterhub_gpulab import clock

_C = pynvml
REFRESH_US = 100_000
_U64 = 2**64


def now_us() -> int:
    """The fake's NVML time: ``clock.utcnow()`` in microseconds."""
    return int(clock.utcnow().timestamp() * 1_000_000)


def _rate(unit: Any) -> float:
    """How busy a whole GPU (``FakeGpu``) or a GPU instance (``FakeMig``) is now (percent)."""
    percent = unit.gpm_percent if hasattr(unit, "gpm_percent") else unit.utilization_gpu
    return float(percent or 0)


def note_busy(unit: Any, percent: float, at_us: int | None = None) -> None:
    """Record that ``unit`` is ``percent`` busy from ``at_us`` (default now) on."""
    log = unit.busy_log
    if not log:
        log.append((0, _rate(unit)))
    log.append((now_us() if at_us is None else at_us, float(percent)))


def busy_us(unit: Any, until_us: int) -> Fraction:
    """Cumulative busy time of ``unit`` (µs) from the beginning of time to ``until_us``."""
    log = unit.busy_log
    if not log:
        log.append((0, _rate(unit)))
    total = Fraction(0)
    for i, (start, percent) in enumerate(log):
        end = log[i + 1][0] if i + 1 < len(log) else until_us
        end = min(end, until_us)
        if end > start:
            total += Fraction(percent) / 100 * (end - start)
    return total


class SamplingCalls:
    """pynvml's sampling functions for :class:`fake_nvml.FakeNVML` (see the module docstring)."""

    c_nvmlGpmMetricsGet_t = pynvml.c_nvmlGpmMetricsGet_t

    def set_processes(self, uuid: str, processes: list) -> None:
        """What runs on GPU ``uuid`` (``GPU-…``), replacing the previous list."""
        gpu, _mig = self._find(uuid)
        gpu.processes = list(processes)

    # -- processes ---------------------------------------------------------------------------

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        return self._running(handle, mps=False)

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: Any) -> list[Any]:
        return self._running(handle, mps=True)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[Any]:
        return self._running(handle, mps=False, graphics=True)

    def _running(self, handle: Any, *, mps: bool, graphics: bool = False) -> list[Any]:
        self._use(handle)
        if handle.gpu.running_processes_error is not None:
            raise pynvml.NVMLError(handle.gpu.running_processes_error)
        if handle.mig is not None:
            return []
        return [
            self._proc(p)
            for p in handle.gpu.processes
            if p.mps == mps and getattr(p, "graphics", False) == graphics
        ]

    def nvmlDeviceGetProcessUtilization(self, handle: Any, timeStamp: int) -> list[Any]:
        """One sample per process that ran a kernel, stamped one ``sample_period_us`` later than
        the previous call's; pynvml's handling of the size query's return code."""
        self._use(handle)
        gpu = handle.gpu
        mig_on = gpu.mig_mode is not None and gpu.mig_mode[0] == _C.NVML_DEVICE_MIG_ENABLE
        if handle.mig is not None or mig_on or not gpu.process_utilization_supported:
            ret, samples = _C.NVML_ERROR_NOT_SUPPORTED, []
        elif gpu.process_read_error is not None:
            ret, samples = gpu.process_read_error, []
        else:
            self.clock_us += self.sample_period_us
            samples = [
                pynvml.c_nvmlProcessUtilizationSample_t(
                    pid=p.pid, timeStamp=self.clock_us, smUtil=int(p.sm_percent), memUtil=0
                )
                for p in gpu.processes
                if p.sm_percent is not None and self.clock_us > timeStamp
            ]
            ret = _C.NVML_ERROR_INSUFFICIENT_SIZE if samples else gpu.empty_process_read
        if ret != _C.NVML_ERROR_INSUFFICIENT_SIZE:
            raise pynvml.NVMLError(ret)  # as pynvml does for every other code, SUCCESS included
        return samples

    @staticmethod
    def _proc(p: Any) -> Any:
        return SimpleNamespace(
            pid=p.pid,
            usedGpuMemory=p.used_memory,
            gpuInstanceId=0xFFFFFFFF,
            computeInstanceId=0xFFFFFFFF,
        )

    # -- GPM -----------------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, device: Any) -> Any:
        self._use(device)
        cc = device.gpu.compute_capability
        return pynvml.c_nvmlGpmSupport_t(
            version=pynvml.NVML_GPM_SUPPORT_VERSION,
            isSupportedDevice=int(cc is not None and cc >= (9, 0)),
        )

    def nvmlGpmSampleAlloc(self) -> Any:
        self._check()
        struct = pynvml.struct_c_nvmlGpmSample_t()
        self.gpm_buffers[ctypes.addressof(struct)] = [struct, None]
        return ctypes.pointer(struct)

    def nvmlGpmSampleFree(self, gpmSample: Any) -> None:
        self._check()
        if self.gpm_buffers.pop(self._addr(gpmSample), None) is None:
            raise pynvml.NVMLError_InvalidArgument()

    def nvmlGpmSampleGet(self, device: Any, gpmSample: Any) -> Any:
        self._gpm_ready(device)
        self._take(gpmSample, device.gpu)
        return gpmSample

    def nvmlGpmMigSampleGet(self, device: Any, gpuInstanceId: int, gpmSample: Any) -> Any:
        self._gpm_ready(device)
        mig = next((m for m in device.gpu.migs if m.gi_id == gpuInstanceId), None)
        if mig is None:
            raise pynvml.NVMLError_NotFound()
        self._take(gpmSample, mig)
        return gpmSample

    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any:
        self._check()
        if metricsGet.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            raise pynvml.NVMLError(_C.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        if not 0 < metricsGet.numMetrics <= pynvml.NVML_GPM_METRIC_MAX:
            raise pynvml.NVMLError_InvalidArgument()
        first, second = self._buffer(metricsGet.sample1), self._buffer(metricsGet.sample2)
        if first[1] is None or second[1] is None:
            raise pynvml.NVMLError_InvalidArgument()  # a sample never read into
        (t1, b1), (t2, b2) = first[1], second[1]
        dt, busy = (t2 - t1) % _U64, (b2 - b1) % _U64  # unsigned, as the C library subtracts
        util = float(100 * busy / dt) if dt else float("nan")
        for i in range(metricsGet.numMetrics):
            metric = metricsGet.metrics[i]
            if metric.metricId == pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL:
                metric.value, metric.nvmlReturn = util, pynvml.NVML_SUCCESS
            else:
                metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return metricsGet

    def _take(self, sample: Any, unit: Any) -> None:
        buffer = self._buffer(sample)
        now = now_us()
        refreshed = now - now % REFRESH_US
        buffer[1] = (refreshed, busy_us(unit, refreshed))

    def _gpm_ready(self, device: Any) -> None:
        self._use(device)
        if device.mig is not None:
            raise pynvml.NVMLError_InvalidArgument()  # GPM takes the parent device
        cc = device.gpu.compute_capability
        if cc is None or cc < (9, 0):
            raise pynvml.NVMLError_NotSupported()

    def _buffer(self, sample: Any) -> list:
        found = self.gpm_buffers.get(self._addr(sample))
        if found is None:
            raise pynvml.NVMLError_InvalidArgument()  # freed, or never allocated
        return found

    @staticmethod
    def _addr(sample: Any) -> int:
        return ctypes.addressof(sample.contents) if sample else 0

"""The utilisation monitor: samples every slice's GPU use and keeps a bounded history per slice.

The service calls :meth:`UtilizationMonitor.sample` every ``interval_s`` seconds (10 s by default)
and hands :meth:`~UtilizationMonitor.history` to the culler (:mod:`jupyterhub_gpulab.fairuse.culler`). All NVML reading
goes through :mod:`jupyterhub_gpulab.inventory.nvml`; this module only combines the figures and
maps processes to containers through ``/proc``.

Where each slice's figures come from:

- **whole GPU**: GPM's busy share over the interval (Hopper or newer,
  :class:`~jupyterhub_gpulab.inventory.nvml_sampling.GpmActivity`), else ``nvmlDeviceGetUtilizationRates``
  (the share of the driver's last sample period, 1/6 s to 1 s, in which a kernel ran);
  memory from ``nvmlDeviceGetMemoryInfo``.
- **MIG device**: GPM's per-GPU-instance busy share (Hopper or newer). NVML offers no MIG
  utilisation on Ampere (A100, A30): there ``gpu_percent`` is ``None`` and the culler falls back
  to the activity rule for that slice (it never calls a GPU idle it cannot see). Memory from the
  MIG device's ``nvmlDeviceGetMemoryInfo``.
- **shared seat**: the device's processes (``nvmlDeviceGetProcessUtilization``, samples since
  the previous read, and the compute, MPS and graphics running-process lists), each mapped to its Docker container through
  ``/proc/<pid>/cgroup`` (:func:`container_of_pid`), summed per container and so per seat. When
  some utilisation belongs to no known container (an MPS server that reports its clients' work
  under its own pid, a process outside Docker), seats that would read 0 % read ``None`` instead:
  unattributed work is never taken as a seat's idleness.

NVML reports host pids, so a service running in a container needs the host's ``/proc`` (``pid:
host``, or the host's ``/proc`` mounted read-only and ``proc_root`` pointing at it).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import clock
from ..fairuse.seatguard import DeviceRead, HostProcess, same_container
from ..inventory.containers import container_of_pid
from ..inventory.model import Inventory, Slice, SliceKind, Utilization
from ..inventory.nvml import sample_utilization
from ..inventory.nvml_sampling import GpmActivity, ProcessReport, process_utilization

__all__ = ["UtilizationMonitor", "container_of_pid"]


class UtilizationMonitor:
    """Samples of every slice, newest last, at most ``span_s`` seconds of them at ``interval_s``.

    ``span_s`` must cover the longest ``gpu_idle_timeout`` plus the warning lead (default 4 h);
    ``interval_s`` is the sampling interval the service uses (seconds; it only sizes the buffers).
    ``nvml``: the ``pynvml`` module by default, a fake in tests. ``proc_root``: where the host's
    ``/proc`` is visible. Not thread-safe: call it from one task.
    """

    def __init__(
        self,
        *,
        nvml: Any = None,
        span_s: float = 4 * 3600,
        interval_s: float = 10.0,
        proc_root: str | Path = "/proc",
    ):
        self.nvml = nvml
        self.proc_root = proc_root
        self.maxlen = max(2, math.ceil(span_s / interval_s) + 1)
        self._history: dict[str, deque[Utilization]] = {}
        self._gpm = GpmActivity(nvml)
        self._since: dict[str, int] = {}
        #: the latest read of each seated device's processes, each mapped to its container
        #: (``{GPU uuid: DeviceRead}``): what the seat guard (:mod:`.seatguard`) judges
        self.process_reads: dict[str, DeviceRead] = {}

    def history(self, slice_id: str) -> tuple[Utilization, ...]:
        """The samples of ``slice_id``, oldest first (empty when never sampled)."""
        return tuple(self._history.get(slice_id, ()))

    def latest(self, slice_id: str) -> Utilization | None:
        found = self._history.get(slice_id)
        return found[-1] if found else None

    def sample(self, inventory: Inventory, containers: Mapping[str, str]) -> dict[str, Utilization]:
        """Read every slice of ``inventory`` once, record the samples (time: ``clock.utcnow()``)
        and return them by slice id. ``containers`` maps held slices' ids to their container ids
        (from the ledger's open allocations); it is needed for shared seats only. Slices no longer
        in the inventory are forgotten. Never raises for NVML trouble: unknown figures are
        ``None``."""
        now = clock.utcnow()
        slices = inventory.slices
        base = sample_utilization(inventory, nvml=self.nvml)
        hard = [s for s in slices if s.kind is not SliceKind.SHARED]
        gpm = self._gpm.read(
            (s.device_uuid, s.visible_id if s.kind is SliceKind.MIG else None) for s in hard
        )
        found: dict[str, Utilization] = {}
        for s in hard:
            rate = gpm.get(s.visible_id)
            if rate is None:
                rate = base[s.id].gpu_percent
            found[s.id] = Utilization(rate, base[s.id].memory_used_bytes, at=now)
        seats = [s for s in slices if s.kind is SliceKind.SHARED]
        if seats:
            found.update(self._seats(now, seats, containers))
        self.record(found, present={s.id for s in slices})
        self._gpm.forget({s.visible_id for s in hard})
        return found

    def record(
        self, samples: Mapping[str, Utilization], *, present: set[str] | None = None
    ) -> None:
        """Append ``samples`` (by slice id) to the history, forgetting slices not in ``present``
        (default: the slices sampled). :meth:`sample` calls it; the service calls it directly
        with unknown figures (``gpu_percent=None``) where it knows NVML is absent, so that the
        history still says when the slice was looked at."""
        for sid, smp in samples.items():
            self._history.setdefault(sid, deque(maxlen=self.maxlen)).append(smp)
        keep = set(samples) if present is None else present
        for sid in set(self._history) - keep:
            del self._history[sid]

    def _seats(
        self, now, seats: list[Slice], containers: Mapping[str, str]
    ) -> dict[str, Utilization]:
        devices = sorted({s.device_uuid for s in seats})
        reports = process_utilization({d: self._since.get(d, 0) for d in devices}, nvml=self.nvml)
        owner: dict[int, str | None] = {}
        found: dict[str, Utilization] = {}
        for device in devices:
            report = reports.get(device)
            on_device = [s for s in seats if s.device_uuid == device]
            if report is None:
                found.update({s.id: Utilization(at=now, host_checked=False) for s in on_device})
                self.process_reads[device] = DeviceRead(now, False)
                continue
            self._since[device] = report.last_seen_us
            found.update(self._attribute(now, report, on_device, containers, owner))
            self.process_reads[device] = DeviceRead(
                now,
                report.memory_readable,
                tuple(
                    HostProcess(pid, owner.get(pid), p.memory_used_bytes)
                    for pid, p in sorted(report.processes.items())
                ),
            )
        for gone in set(self.process_reads) - set(devices):
            del self.process_reads[gone]
        return found

    def _attribute(
        self,
        now,
        report: ProcessReport,
        seats: list[Slice],
        containers: Mapping[str, str],
        owner: dict[int, str | None],
    ) -> dict[str, Utilization]:
        held = {s.id: containers[s.id] for s in seats if containers.get(s.id)}
        busy = {sid: 0.0 for sid in held}
        memory = {sid: 0 for sid in held}
        known = all(p.sm_percent is not None for p in report.processes.values())
        unattributed = False
        for pid, proc in report.processes.items():
            if pid not in owner:
                owner[pid] = container_of_pid(pid, self.proc_root)
            cid = owner[pid]
            seat = next((sid for sid, c in held.items() if cid and same_container(cid, c)), None)
            if seat is None:
                unattributed = unattributed or bool(proc.sm_percent)
                continue
            busy[seat] += proc.sm_percent or 0.0
            memory[seat] += proc.memory_used_bytes or 0
        found = {}
        for s in seats:
            if s.id not in held:
                found[s.id] = Utilization(
                    0.0 if known else None,
                    0 if report.memory_readable else None,
                    at=now,
                    host_checked=report.memory_readable,
                )
                continue
            percent: float | None = min(100.0, busy[s.id]) if known else None
            if percent == 0.0 and unattributed:
                percent = None
            # where NVML cannot list memory per process (vGPU guests) the seat's use is unknown
            used = memory[s.id] if report.memory_readable else None
            found[s.id] = Utilization(percent, used, at=now, host_checked=report.memory_readable)
        return found

    def close(self) -> None:
        """Release NVML's GPM buffers (the monitor can sample again afterwards)."""
        self._gpm.close()

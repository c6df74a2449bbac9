"""One node agent report: the node's hardware as NVML reads it, its utilisation, and the host.

The body of ``POST /services/gpulab/api/nodes/<node>/report`` (schema ``NodeReport`` in the
service's OpenAPI document, :mod:`jupyterhub_gpulab.service.web.nodeschemas`)::

    {"agent": "0.1.0", "hostname": "gpu2", "interval_s": 10, "cpus": 64,
     "memory_bytes": 540000000000, "source": "nvml", "warnings": [],
     "devices": [{"uuid": "GPU-…", "index": 0, "name": "NVIDIA A100-SXM4-80GB",
                  "memory_bytes": 85899345920, "compute_capability": [8, 0],
                  "mig_enabled": true, "vgpu_type": null, "driver_version": [580, 65, 6]}],
     "mig": [{"uuid": "MIG-…", "device_uuid": "GPU-…", "profile": "1g.10gb",
              "memory_bytes": 10334765056, "share": 0.1428, "rank": 0}],
     "utilization": {"GPU-…": {"gpu_percent": 35.0, "memory_used_bytes": 1073741824}},
     "processes": {"GPU-…": {"readable": true, "processes": [
         {"pid": 4242, "container": "<64 hex>", "memory_used_bytes": 734003200}]}}}

NVML is read without the lab's settings: the service splits GPUs into shared seats itself
(:mod:`jupyterhub_gpulab.inventory.wire`). Utilisation is per GPU and per MIG device, from
NVML's own rates (:func:`~jupyterhub_gpulab.inventory.sample_utilization`; MIG devices on
Ampere report none: ``null``).

``processes`` is what runs on each GPU as this host sees it: NVML's compute, MPS and graphics
process lists (host pids, :func:`~jupyterhub_gpulab.inventory.nvml_sampling.process_utilization`)
mapped to Docker containers through ``/proc/<pid>/cgroup``
(:func:`~jupyterhub_gpulab.inventory.containers.container_of_pid`): the same reads the service
makes on the hub's host, so the service's seat guard can check a node's seats from outside their
containers. ``readable: false`` where NVML cannot list a GPU's processes (``NOT_SUPPORTED``, as on
vGPU guests): that GPU's seats stay "soft", and ``warnings`` says why. At most
:data:`~jupyterhub_gpulab.inventory.wire.MAX_PROCESSES` processes per GPU (and
:data:`~jupyterhub_gpulab.inventory.wire.MAX_REPORT_PROCESSES` in all) are sent, the largest
users of memory first.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from .._version import __version__
from ..inventory import discover, sample_utilization
from ..inventory.containers import container_of_pid
from ..inventory.nvml_sampling import process_utilization
from ..inventory.wire import MAX_PROCESSES, MAX_REPORT_PROCESSES, hardware


def host_memory_bytes() -> int | None:
    """This host's physical memory in bytes, or ``None`` where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def device_processes(
    uuids: list[str], nvml: Any = None, proc_root: str | Path = "/proc"
) -> tuple[dict, list[str]]:
    """``({GPU uuid: {"readable", "processes": [{"pid", "container", "memory_used_bytes"}]}},
    warnings)`` for the GPUs ``uuids``; a GPU NVML cannot read at all is left out. ``container``:
    64-hex Docker id or ``None`` (outside Docker, or gone); bytes ``None`` where NVML does not
    say. Never raises."""
    found: dict[str, dict] = {}
    warnings: list[str] = []
    room = MAX_REPORT_PROCESSES
    for uuid, read in process_utilization(dict.fromkeys(uuids, 0), nvml=nvml).items():
        if read is None:
            continue
        if not read.memory_readable:
            warnings.append(
                f"{uuid}: NVML cannot list this GPU's processes (NOT_SUPPORTED, as on vGPU "
                "guests): its seats' caps are soft, not checked from the host"
            )
        # unreadable: the pids NVML's utilisation samples name carry no memory and mean nothing
        procs = sorted(
            read.processes.values() if read.memory_readable else (),
            key=lambda p: (-(p.memory_used_bytes or 0), p.pid),
        )
        found[uuid] = {
            "readable": read.memory_readable,
            "processes": [
                {
                    "pid": p.pid,
                    "container": container_of_pid(p.pid, proc_root),
                    "memory_used_bytes": p.memory_used_bytes,
                }
                for p in procs[: min(MAX_PROCESSES, room)]
            ],
        }
        room -= len(found[uuid]["processes"])
        if len(procs) > len(found[uuid]["processes"]):
            warnings.append(f"{uuid}: {len(procs)} processes, only the largest users sent")
    return found, warnings


def build_report(
    node: str, interval_s: float, nvml: Any = None, proc_root: str | Path = "/proc"
) -> dict:
    """The report of this host as node ``node`` (``nvml``: the ``pynvml`` module by default;
    ``proc_root``: where this host's ``/proc`` is visible). Never raises for NVML trouble: a host
    without a driver reports no devices and says why in ``warnings``."""
    inventory = discover(node=node, nvml=nvml)
    figures = sample_utilization(inventory, nvml=nvml)
    by_id = {s.id: s for s in inventory.slices}
    wire = hardware(inventory)
    processes, problems = device_processes(
        [d.uuid for d in inventory.devices if not d.mig_enabled], nvml, proc_root
    )
    wire["warnings"] = (wire["warnings"] + problems)[:50]
    return {
        "agent": __version__,
        "hostname": socket.gethostname(),
        "interval_s": float(interval_s),
        "cpus": os.cpu_count(),
        "memory_bytes": host_memory_bytes(),
        **wire,
        "utilization": {
            by_id[sid].visible_id: {
                "gpu_percent": u.gpu_percent,
                "memory_used_bytes": u.memory_used_bytes,
            }
            for sid, u in figures.items()
        },
        "processes": processes,
    }

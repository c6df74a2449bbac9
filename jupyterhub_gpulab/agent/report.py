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
     "utilization": {"GPU-…": {"gpu_percent": 35.0, "memory_used_bytes": 1073741824}}}

NVML is read without the lab's settings: the service splits GPUs into shared seats itself
(:mod:`jupyterhub_gpulab.inventory.wire`). Utilisation is per GPU and per MIG device, from
NVML's own rates (:func:`~jupyterhub_gpulab.inventory.sample_utilization`; MIG devices on
Ampere report none: ``null``).
"""

from __future__ import annotations

import os
import socket
from typing import Any

from .._version import __version__
from ..inventory import discover, sample_utilization
from ..inventory.wire import hardware


def host_memory_bytes() -> int | None:
    """This host's physical memory in bytes, or ``None`` where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def build_report(node: str, interval_s: float, nvml: Any = None) -> dict:
    """The report of this host as node ``node`` (``nvml``: the ``pynvml`` module by default).
    Never raises for NVML trouble: a host without a driver reports no devices and says why in
    ``warnings``."""
    inventory = discover(node=node, nvml=nvml)
    figures = sample_utilization(inventory, nvml=nvml)
    by_id = {s.id: s for s in inventory.slices}
    return {
        "agent": __version__,
        "hostname": socket.gethostname(),
        "interval_s": float(interval_s),
        "cpus": os.cpu_count(),
        "memory_bytes": host_memory_bytes(),
        **hardware(inventory),
        "utilization": {
            by_id[sid].visible_id: {
                "gpu_percent": u.gpu_percent,
                "memory_used_bytes": u.memory_used_bytes,
            }
            for sid, u in figures.items()
        },
    }

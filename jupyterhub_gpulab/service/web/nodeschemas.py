"""The JSON Schemas of the node API (:mod:`.nodeapi`): a node agent's report (the request body
of ``POST nodes/<node>/report``, validated with it: every count bounded to the ledger's columns,
every UUID in NVML's exact form) and the answers to it and to a new node token; merged into
:mod:`.openapi`'s document by :func:`node_schemas`."""

from __future__ import annotations

from ...inventory.wire import MAX_PROCESSES
from .apischemas import BOOL, INTEGER, STATUS_MESSAGE, STRING, _described, obj
from .inputs import MAX_BYTES, MAX_CPUS, MAX_RANK, NVML_GPU_UUID, NVML_MIG_UUID, NVML_UUID

__all__ = ["NODE_REPORT", "node_schemas"]
#: Linux's largest pid (``/proc/sys/kernel/pid_max`` can be at most 2**22)
MAX_PID = 2**22

_UUID = {"type": "string", "pattern": NVML_GPU_UUID, "description": "GPU-<uuid> as NVML prints it"}
_MIG_UUID = {
    "type": "string",
    "pattern": NVML_MIG_UUID,
    "description": "MIG-<uuid> (or MIG-GPU-<uuid>/<gi>/<ci> before R470) as NVML prints it",
}
_BYTES = {"type": "integer", "minimum": 0, "maximum": MAX_BYTES}
_BYTES_OR_NULL = {**_BYTES, "type": ["integer", "null"]}
NODE_REPORT = {
    "type": "object",
    "description": "What a node agent reads on its host (gpulab node-agent, "
    "jupyterhub_gpulab/agent/report.py): NVML's devices and MIG devices, without the lab's "
    "seat settings, and their utilisation.",
    "required": ["agent", "interval_s", "source", "devices", "mig", "utilization"],
    "additionalProperties": False,
    "properties": {
        "agent": {"type": "string", "maxLength": 32, "description": "the agent's version"},
        "hostname": {"type": ["string", "null"], "maxLength": 255},
        "interval_s": {"type": "number", "minimum": 1, "maximum": 3600},
        "cpus": {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_CPUS},
        "memory_bytes": _BYTES_OR_NULL,
        "source": {"type": "string", "enum": ["nvml", "none"]},
        "warnings": {
            "type": "array",
            "maxItems": 50,
            "items": {"type": "string", "maxLength": 500},
        },
        "devices": {
            "type": "array",
            "maxItems": 64,
            "items": {
                "type": "object",
                "required": ["uuid", "index", "name", "memory_bytes", "mig_enabled"],
                "additionalProperties": False,
                "properties": {
                    "uuid": _UUID,
                    "index": {"type": "integer", "minimum": 0, "maximum": 1023},
                    "name": {"type": "string", "minLength": 1, "maxLength": 255},
                    "memory_bytes": _BYTES,
                    "compute_capability": {
                        "type": ["array", "null"],
                        "items": {"type": "integer", "minimum": 0, "maximum": 99},
                        "minItems": 2,
                        "maxItems": 2,
                    },
                    "mig_enabled": BOOL,
                    "vgpu_type": {"type": ["string", "null"], "maxLength": 64},
                    "driver_version": {
                        "type": ["array", "null"],
                        "description": "the host's NVIDIA driver, [580, 65, 6]",
                        "items": {"type": "integer", "minimum": 0, "maximum": 99999},
                        "minItems": 1,
                        "maxItems": 4,
                    },
                },
            },
        },
        "mig": {
            "type": "array",
            "maxItems": 512,
            "items": {
                "type": "object",
                "required": ["uuid", "device_uuid", "profile", "memory_bytes", "share", "rank"],
                "additionalProperties": False,
                "properties": {
                    "uuid": _MIG_UUID,
                    "device_uuid": _UUID,
                    "profile": {"type": "string", "minLength": 1, "maxLength": 32},
                    "memory_bytes": _BYTES,
                    "share": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                    "rank": {"type": "integer", "minimum": 0, "maximum": MAX_RANK},
                },
            },
        },
        "utilization": {
            "type": "object",
            "description": "by GPU or MIG UUID",
            "maxProperties": 600,
            "propertyNames": {"pattern": NVML_UUID},
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "gpu_percent": {"type": ["number", "null"], "minimum": 0, "maximum": 100},
                    "memory_used_bytes": _BYTES_OR_NULL,
                },
            },
        },
        "processes": {
            "type": "object",
            "description": "by GPU UUID: the processes NVML lists on it (host pids) and their "
            "Docker container from the host's cgroups; absent from older agents (the node's "
            "seats stay soft)",
            "maxProperties": 64,
            "propertyNames": {"pattern": NVML_GPU_UUID},
            "additionalProperties": {
                "type": "object",
                "required": ["readable", "processes"],
                "additionalProperties": False,
                "properties": {
                    "readable": _described(
                        BOOL, "false: NVML cannot list this GPU's processes (vGPU guests)"
                    ),
                    "processes": {
                        "type": "array",
                        "maxItems": MAX_PROCESSES,
                        "items": {
                            "type": "object",
                            "required": ["pid", "container", "memory_used_bytes"],
                            "additionalProperties": False,
                            "properties": {
                                "pid": {"type": "integer", "minimum": 1, "maximum": MAX_PID},
                                "container": {
                                    "type": ["string", "null"],
                                    "pattern": "^[0-9a-f]{64}$",
                                    "description": "64-hex Docker container id",
                                },
                                "memory_used_bytes": _BYTES_OR_NULL,
                            },
                        },
                    },
                },
            },
        },
    },
}

NODE_REPORTED = obj(
    {
        **STATUS_MESSAGE,
        "node": STRING,
        "state": _described(STRING, "the node's service state after the report (Node.state)"),
        "slices": _described(INTEGER, "slices the lab offers on it from this report"),
    },
    "A report taken.",
)

NODE_TOKEN = obj(
    {**STATUS_MESSAGE, "node": STRING, "token": _described(STRING, "shown only in this answer")},
    "A new node agent token.",
)


def node_schemas() -> dict:
    """The node API's schemas by their OpenAPI component name."""
    return {"NodeReport": NODE_REPORT, "NodeReported": NODE_REPORTED, "NodeToken": NODE_TOKEN}

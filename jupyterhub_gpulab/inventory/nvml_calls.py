"""How gpulab opens and queries NVML, shared by :mod:`.nvml` (inventory) and
:mod:`.nvml_sampling` (per-process and GPM figures): the lazy ``pynvml`` import, which errors
mean NVML as a whole is unusable, and reads that tolerate unsupported queries.

Every function takes ``nvml``, a module-like object with pynvml's functions, constants and
exception classes (the real ``pynvml``, or the fake in ``tests/fake_nvml.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = [
    "CPU_STILL_WORKS",
    "describe_error",
    "fatal_errors",
    "load_nvml",
    "optional",
    "quiet",
    "shutdown",
    "text",
    "unavailable",
]

T = TypeVar("T")

CPU_STILL_WORKS = "no GPUs in the inventory; CPU profiles still work"


def load_nvml(nvml: Any) -> tuple[Any, str]:
    if nvml is not None:
        return nvml, ""
    try:
        import pynvml
    except ImportError:
        return None, (
            f"the nvidia-ml-py package (pynvml) is not installed, so NVML cannot be read: "
            f"{CPU_STILL_WORKS}. Install it (`pip install nvidia-ml-py`) or declare the GPUs "
            "in c.GPULab.inventory."
        )
    return pynvml, ""


def fatal_errors(nvml: Any) -> tuple[type[BaseException], ...]:
    """Errors that mean NVML as a whole is unusable, not one device."""
    return (
        nvml.NVMLError_LibraryNotFound,
        nvml.NVMLError_DriverNotLoaded,
        nvml.NVMLError_Uninitialized,
    )


def unavailable(nvml: Any, exc: BaseException) -> str:
    if isinstance(exc, nvml.NVMLError_LibraryNotFound):
        what = (
            "the NVIDIA driver library libnvidia-ml.so.1 was not found (no driver on this host, "
            "or the hub's container was started without the NVIDIA runtime)"
        )
    elif isinstance(exc, nvml.NVMLError_DriverNotLoaded):
        what = "the NVIDIA kernel driver is not loaded (`nvidia-smi` fails the same way)"
    else:
        what = f"NVML could not be used ({describe_error(exc)})"
    return (
        f"{what}: {CPU_STILL_WORKS}. Install or load the driver, or declare the GPUs in "
        "c.GPULab.inventory."
    )


def optional(nvml: Any, read: Callable[[], T]) -> T | None:
    """``read()``, or ``None`` where NVML says the query is not supported on this device."""
    try:
        return read()
    except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound):
        return None


def quiet(nvml: Any, read: Callable[[], T]) -> T | None:
    try:
        return read()
    except nvml.NVMLError:
        return None


def shutdown(nvml: Any) -> None:
    with contextlib.suppress(nvml.NVMLError):
        nvml.nvmlShutdown()


def text(value: str | bytes) -> str:
    """pynvml < 11.515 returns ``bytes`` for names and UUIDs, newer ones ``str``."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def describe_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"

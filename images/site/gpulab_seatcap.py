"""gpulab's seat memory cap, applied by the frameworks themselves ("capped by the framework").

Installed in the framework images' site-packages with ``gpulab-seatcap.pth``, so it runs at the
start of every Python process of the image's environment (kernels, scripts in a terminal,
DataLoader workers), not only in notebooks. It does nothing unless the spawner set
``GPULAB_SEAT_MEMORY_BYTES`` (bytes; only shared seats get it). Then:

- **PyTorch**: when ``torch`` is imported, ``torch.cuda.set_per_process_memory_fraction(seat /
  device memory, i)`` for every visible device, queued with ``torch.cuda._lazy_call`` so it runs
  at CUDA's first use (importing torch stays cheap and fork-safe); PyTorch's caching allocator
  then raises ``torch.OutOfMemoryError`` for an allocation past the seat;
- **TensorFlow**: when ``tensorflow`` is imported, one logical device per GPU with
  ``memory_limit`` = the seat in MiB (``tf.config.set_logical_device_configuration``), before
  TensorFlow initialises the GPU;
- **JAX** (when installed): ``XLA_PYTHON_CLIENT_MEM_FRACTION`` = seat / device memory (NVML's
  figure for device 0), unless already set, so XLA's allocator stays inside the seat.

What it does not stop: a process that bypasses the framework's allocator (CUDA or cuBLAS
called directly, CuPy, another library, a user who unsets the variable or the hook): the cap is
cooperative. Only MPS (``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``) or MIG enforce memory below the
framework; the pages say "capped by the framework" for this level, between "soft" and "MPS".

No dependency beyond the standard library (and the frameworks it caps); any failure is a
warning, never an import error.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import warnings

ENV = "GPULAB_SEAT_MEMORY_BYTES"
#: What was applied, for people and tests: ``{"torch": "queued" | [fractions], ...}``.
applied: dict[str, object] = {}
_MIB = 2**20
_installed = False


def seat_bytes(environ=os.environ) -> int | None:
    """The seat's memory in bytes from ``GPULAB_SEAT_MEMORY_BYTES``, or ``None`` (unset, not a
    positive integer)."""
    raw = environ.get(ENV, "").strip()
    if not raw.isdigit() or int(raw) <= 0:
        return None
    return int(raw)


def cap_torch(torch, seat: int) -> None:
    """Cap PyTorch's caching allocator at ``seat`` bytes on every visible device: now if CUDA is
    initialised already, else at its first use (``torch.cuda._lazy_call``)."""
    cuda = torch.cuda

    def apply() -> None:
        fractions = []
        for i in range(cuda.device_count()):
            total = cuda.get_device_properties(i).total_memory
            fraction = min(1.0, seat / total)
            cuda.set_per_process_memory_fraction(fraction, i)
            fractions.append(fraction)
        applied["torch"] = fractions

    lazy = getattr(cuda, "_lazy_call", None)
    if cuda.is_initialized() or lazy is None:
        if cuda.is_available():
            apply()
        return
    lazy(apply)
    applied["torch"] = "queued"


def cap_tensorflow(tf, seat: int) -> None:
    """One logical device of ``seat`` bytes (in MiB, TensorFlow's unit) per physical GPU; must
    run before TensorFlow initialises its GPUs (right after ``import tensorflow``)."""
    gpus = tf.config.list_physical_devices("GPU")
    limit_mib = max(1, seat // _MIB)
    for gpu in gpus:
        tf.config.set_logical_device_configuration(
            gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=limit_mib)]
        )
    applied["tensorflow"] = [limit_mib] * len(gpus)


def cap_jax(seat: int, environ=os.environ, device_memory=None) -> None:
    """Set ``XLA_PYTHON_CLIENT_MEM_FRACTION`` (seat / device memory) before JAX starts, unless
    set already. ``device_memory`` (bytes) defaults to NVML's total for device 0."""
    if "XLA_PYTHON_CLIENT_MEM_FRACTION" in environ:
        return
    total = device_memory if device_memory is not None else _nvml_total_memory()
    if not total:
        return
    fraction = min(1.0, seat / total)
    environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{fraction:.4f}"
    applied["jax"] = fraction


def _nvml_total_memory() -> int | None:
    try:
        import pynvml  # nvidia-ml-py, in the image for jupyterlab-nvdashboard

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``hooks[name](module)`` once, right after module ``name`` has executed."""

    def __init__(self, hooks):
        self.hooks = dict(hooks)
        self._finding: set[str] = set()

    def find_spec(self, name, path=None, target=None):
        if name not in self.hooks or name in self._finding:
            return None
        self._finding.add(name)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._finding.discard(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        hook = self.hooks.pop(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            try:
                hook(module)
            except Exception as e:  # a cap that fails must never break the import
                warnings.warn(f"gpulab seat cap for {name} not applied: {e}", stacklevel=2)

        spec.loader.exec_module = exec_module
        return spec


def install(environ=os.environ) -> bool:
    """Install the caps for this process if ``GPULAB_SEAT_MEMORY_BYTES`` is set; returns
    whether it was. Called by ``gpulab-seatcap.pth`` at interpreter start, possibly twice (a
    venv's ``lib64`` links to ``lib``, so site reads the ``.pth`` from both); once is enough."""
    global _installed
    seat = seat_bytes(environ)
    if seat is None:
        return False
    if _installed:
        return True
    _installed = True
    try:
        if importlib.util.find_spec("jax") is not None:
            cap_jax(seat, environ)
    except Exception as e:
        warnings.warn(f"gpulab seat cap for jax not applied: {e}", stacklevel=2)
    hooks = {
        "torch": lambda m: cap_torch(m, seat),
        "tensorflow": lambda m: cap_tensorflow(m, seat),
    }
    for name in list(hooks):
        if name in sys.modules:  # imported before us (unusual): cap now
            hooks.pop(name)(sys.modules[name])
    sys.meta_path.insert(0, _AfterImport(hooks))
    return True

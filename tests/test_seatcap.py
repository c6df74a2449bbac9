"""The framework images' seat memory cap (``images/site/gpulab_seatcap.py``, run at interpreter
start by ``gpulab-seatcap.pth``). No GPU here: each test runs a fresh interpreter whose
``torch`` / ``tensorflow`` / ``pynvml`` are stand-ins reporting a 24 GiB device, and checks the
fraction or limit the framework is asked to enforce. The same hook runs with the real PyTorch
and TensorFlow in the built images in ``test_images_e2e.py``; ``scripts/gpu-check.sh`` checks
on a real GPU that an allocation past the seat fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SITE = Path(__file__).resolve().parents[1] / "images" / "site"
GiB = 2**30

STANDINS = {
    # a CUDA PyTorch with one 24 GiB device (a P40), CUDA not initialised yet
    "torch/__init__.py": "from . import cuda\n",
    "torch/cuda.py": textwrap.dedent(
        """
        from types import SimpleNamespace
        queued, calls, initialised = [], [], False
        def is_initialized(): return initialised
        def is_available(): return True
        def _lazy_call(fn): queued.append(fn)
        def device_count(): return 1
        def get_device_properties(i): return SimpleNamespace(total_memory=24 * 2**30)
        def set_per_process_memory_fraction(fraction, device): calls.append((fraction, device))
        def _lazy_init():
            global initialised
            initialised = True
            for fn in queued: fn()
        """
    ),
    # TensorFlow's tf.config with two GPUs
    "tensorflow/__init__.py": textwrap.dedent(
        """
        from types import SimpleNamespace
        calls = []
        def _set(gpu, configs): calls.append((gpu, [c.memory_limit for c in configs]))
        config = SimpleNamespace(
            list_physical_devices=lambda kind: ["GPU:0", "GPU:1"] if kind == "GPU" else [],
            set_logical_device_configuration=_set,
            LogicalDeviceConfiguration=lambda memory_limit: SimpleNamespace(memory_limit=memory_limit),
        )
        """
    ),
    "jax/__init__.py": "",
    "pynvml.py": textwrap.dedent(
        """
        from types import SimpleNamespace
        def nvmlInit(): pass
        def nvmlShutdown(): pass
        def nvmlDeviceGetHandleByIndex(i): return i
        def nvmlDeviceGetMemoryInfo(h): return SimpleNamespace(total=24 * 2**30)
        """
    ),
}


def run(tmp_path: Path, code: str, seat: str | None) -> dict:
    for name, text in STANDINS.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPULAB_", "XLA_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(SITE)])
    if seat is not None:
        env["GPULAB_SEAT_MEMORY_BYTES"] = seat
    # what gpulab-seatcap.pth does at start-up, then the user's code
    prog = "import gpulab_seatcap; gpulab_seatcap.install()\n" + textwrap.dedent(code)
    out = subprocess.run(
        [sys.executable, "-c", prog], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_torch_is_capped_at_the_seat_when_cuda_first_starts(tmp_path):
    got = run(
        tmp_path,
        """
        import json, gpulab_seatcap
        gpulab_seatcap.install()  # site may read the .pth twice (a venv's lib64 -> lib)
        import torch
        before = list(torch.cuda.calls)
        torch.cuda._lazy_init()  # the first CUDA use
        print(json.dumps({"before": before, "after": torch.cuda.calls,
                          "applied": gpulab_seatcap.applied}))
        """,
        str(GiB),
    )
    assert got["before"] == []  # importing torch touches no GPU (fork-safe DataLoaders)
    assert got["after"] == [[1 / 24, 0]]
    assert got["applied"]["torch"] == [1 / 24]


def test_tensorflow_gets_a_logical_device_of_the_seat_per_gpu(tmp_path):
    got = run(
        tmp_path,
        """
        import json, tensorflow as tf
        print(json.dumps(tf.calls))
        """,
        str(4 * GiB),
    )
    assert got == [["GPU:0", [4096]], ["GPU:1", [4096]]]


def test_jax_gets_the_seats_fraction_before_it_starts(tmp_path):
    got = run(
        tmp_path,
        """
        import json, os
        print(json.dumps(os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")))
        """,
        str(6 * GiB),
    )
    assert got == "0.2500"


def test_without_a_seat_nothing_is_touched(tmp_path):
    for seat in (None, "", "0", "-5", "lots"):
        got = run(
            tmp_path,
            """
            import json, os, sys, torch, tensorflow as tf
            torch.cuda._lazy_init()
            hooked = any(type(f).__name__ == "_AfterImport" for f in sys.meta_path)
            print(json.dumps([torch.cuda.calls, tf.calls, hooked,
                              os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")]))
            """,
            seat,
        )
        assert got == [[], [], False, None], seat


def test_a_cap_that_fails_warns_and_never_breaks_the_import(tmp_path):
    run(tmp_path, "print('{}')", None)  # lays out the stand-ins
    broken = STANDINS["tensorflow/__init__.py"].replace(
        "list_physical_devices=lambda kind:", "list_physical_devices=lambda kind: 1 / 0 or"
    )
    (tmp_path / "tensorflow" / "__init__.py").write_text(broken)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULAB_")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(SITE)])
    env["GPULAB_SEAT_MEMORY_BYTES"] = str(GiB)
    prog = "import gpulab_seatcap; gpulab_seatcap.install()\nimport tensorflow; print('imported')"
    out = subprocess.run(
        [sys.executable, "-W", "always", "-c", prog], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0 and "imported" in out.stdout
    assert "gpulab seat cap for tensorflow not applied" in out.stderr

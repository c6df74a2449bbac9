"""``scripts/gpu-check.sh`` needs a GPU (none here nor in CI): here it is only checked to parse, as
bash and as the Python it runs, and to say it did not run, as its last JSON line, on a host
without a GPU. Its host-side seat check uses gpulab's own names, so a rename fails here. Its
first step, which PyTorch variant a GPU can run, runs here against the fake NVML: a P40 gets
the cuda12-legacy build, a Turing or newer card on driver R580 the CUDA 13 one."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fake_nvml import FakeNVML, a40_gpu

import jupyterhub_gpulab.inventory as inventory

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu-check.sh"


def _python(tag: str = "EOF") -> str:
    text = SCRIPT.read_text()
    return re.search(rf"<<'{tag}'\n(.*?)\n{tag}\n", text, re.S).group(1)


def _pick(monkeypatch, nvml: FakeNVML, wanted="", forced="") -> tuple[int, list[str]]:
    """Run the script's step 1 (its ``PICK`` program) on ``nvml`` as the script does (its
    SLICE_UUID and GPU_CHECK_VARIANT): (exit status, stdout lines)."""
    real = inventory.discover
    monkeypatch.setattr(inventory, "discover", lambda **kw: real(nvml=nvml, **kw))
    monkeypatch.setattr(sys, "argv", ["-", wanted, forced])
    out = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out):
        try:
            exec(compile(_python("PICK"), "gpu-check:PICK", "exec"), {"__name__": "__main__"})
        except SystemExit as e:
            code = e.code or 0
    return code, out.getvalue().splitlines()


def test_the_script_parses_as_bash():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_its_python_and_the_programs_it_runs_in_containers_parse():
    tree = ast.parse(_python())
    inner = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign)
        and isinstance(n.value, ast.Constant)
        and isinstance(n.value.value, str)
        and n.targets[0].id in ("CHECK", "DIRECT")
    ]
    assert len(inner) == 2
    for node in inner:
        ast.parse(node.value)
    assert "cuMemAlloc_v2" in inner[1].value  # CUDA directly: no framework cap applies


def test_the_names_its_host_check_imports_exist():
    import importlib

    both = _python() + _python("PICK")
    for module, names in re.findall(r"from (jupyterhub_gpulab[\w.]*) import ([\w, ]+)", both):
        found = importlib.import_module(module)
        for name in (n.strip() for n in names.split(",")):
            assert hasattr(found, name), f"{module}.{name}"


@pytest.mark.parametrize(
    ("nvml", "variant"),
    [
        pytest.param(FakeNVML.p40(), "cuda12-legacy", id="pascal-p40"),
        pytest.param(FakeNVML([a40_gpu()]), "cuda", id="ampere-a40-r580"),
        pytest.param(FakeNVML([a40_gpu()], driver_version="570.86.15"), "cuda12-legacy",
                     id="ampere-a40-before-r580"),
    ],
)  # fmt: skip
def test_it_builds_the_pytorch_variant_the_gpu_can_run(monkeypatch, nvml, variant):
    assert _pick(monkeypatch, nvml) == (0, [variant])


def test_a_named_slice_it_cannot_find_is_not_ok_and_says_so(monkeypatch):
    code, lines = _pick(monkeypatch, FakeNVML.p40(), wanted="GPU-nonexistent")
    last = json.loads(lines[-1])
    assert code == 1 and last["ok"] is False and last["checked"] is False
    assert "GPU-nonexistent" in last["why"]


def test_a_gpu_the_gate_refuses_is_reported_not_ok_with_the_reason():
    # the old script printed "ok": true here, having checked nothing
    body = _python()
    refusal = body[body.index("if problem:") :].split("\n\n", 1)[0]
    assert '"ok": False' in refusal and '"checked": False' in refusal and "problem" in refusal
    assert '"ok": True' not in body


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this host has a GPU")
def test_without_a_gpu_it_says_so_and_exits_2():
    r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    last = json.loads(r.stdout.strip().splitlines()[-1])
    assert last["ran"] is False and "nvidia-smi" in last["why"]

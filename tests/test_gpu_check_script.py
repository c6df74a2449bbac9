"""``scripts/gpu-check.sh`` needs a GPU (none here nor in CI): here it is only checked to parse, as
bash and as the Python it runs, and to say it did not run, as its last JSON line, on a host
without a GPU. Its host-side seat check uses gpulab's own names, so a rename fails here."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu-check.sh"


def _python() -> str:
    text = SCRIPT.read_text()
    return re.search(r"<<'EOF'\n(.*?)\nEOF\n", text, re.S).group(1)


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

    for module, names in re.findall(r"from (jupyterhub_gpulab[\w.]*) import ([\w, ]+)", _python()):
        found = importlib.import_module(module)
        for name in (n.strip() for n in names.split(",")):
            assert hasattr(found, name), f"{module}.{name}"


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this host has a GPU")
def test_without_a_gpu_it_says_so_and_exits_2():
    r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    last = json.loads(r.stdout.strip().splitlines()[-1])
    assert last["ran"] is False and "nvidia-smi" in last["why"]

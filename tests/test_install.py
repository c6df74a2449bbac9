"""The install steps run on a stock Debian: Debian's own python3 refuses `pip install` (PEP 668),
so the scripts install into the checkout's virtual environment made from that interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DEBIAN_PYTHON = Path("/usr/bin/python3")


def test_tests_run_in_a_virtual_environment_of_this_checkout():
    assert sys.prefix != sys.base_prefix, "the suite must run inside a virtual environment"
    import jupyterhub_gpulab

    assert Path(jupyterhub_gpulab.__file__).resolve().is_relative_to(REPO)


@pytest.mark.skipif(not os.environ.get("CI"), reason="CI proves the install path on stock Debian")
def test_ci_installs_with_debians_own_python():
    cfg = (Path(sys.prefix) / "pyvenv.cfg").read_text()
    assert "executable = /usr/bin/python3" in cfg, cfg
    # Debian's interpreter is the externally managed one: pip into it is refused, which is
    # exactly why the scripts make a virtual environment.
    marker = list(Path("/usr/lib").glob("python3*/EXTERNALLY-MANAGED"))
    assert marker, "this CI machine's /usr/bin/python3 is not Debian's externally managed one"
    r = subprocess.run(
        [str(DEBIAN_PYTHON), "-m", "pip", "install", "--dry-run", "six"],
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0
    assert "externally-managed-environment" in r.stderr or "No module named pip" in r.stderr


def test_ensure_venv_is_idempotent_and_names_the_venv_python():
    out = (
        subprocess.run(
            ["bash", str(REPO / "scripts/ensure-venv.sh"), "test"],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    assert Path(out).resolve() == Path(sys.executable).resolve() or Path(out) == Path(
        sys.prefix, "bin", "python"
    )

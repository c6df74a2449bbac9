"""The seed's own lab as shipped in ``examples/p40-lab/``: one Tesla P40, 24 students, one seat
each. The installed ``gpulab check-config`` passes it as written (24 seats that fit once each
seat's CUDA context is counted, the students' policy, the Pascal PyTorch profile), and the
example's ``seat_overcommit = "refuse"`` turns the tempting 24 × 1 GiB into an error that says
what fits. The card is declared (``GPULAB_P40_DECLARED``): this machine has no P40."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "p40-lab" / "jupyterhub_config.py"


def _check(config: Path, state: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("gpulab", path=os.path.dirname(sys.executable)) or shutil.which("gpulab")
    assert exe, "the gpulab console script is not installed (pip install -e .)"
    env = {**os.environ, "GPULAB_P40_DECLARED": "1", "GPULAB_STATE_DIR": str(state)}
    return subprocess.run(
        [exe, "check-config", "-f", str(config)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip


def test_the_p40_example_passes_check_config_with_24_seats_that_fit(tmp_path):
    proc = _check(EXAMPLE, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "24 slice(s) (24 shared seat), 3 profile(s), 2 group policy(ies)" in proc.stdout
    assert "CUDA context" not in proc.stdout  # no overcommit warning: the seats fit


def test_the_p40_example_refuses_24_seats_of_1_gib(tmp_path):
    text = EXAMPLE.read_text()
    assert '"memory_per_seat": "640MiB"' in text
    config = tmp_path / "jupyterhub_config.py"
    config.write_text(text.replace('"memory_per_seat": "640MiB"', '"memory_per_seat": "1GiB"'))
    proc = _check(config, tmp_path)
    assert proc.returncode == 1
    assert "24 seats of 1 GiB on a 24 GiB Tesla P40 need ~31.0 GiB" in proc.stderr
    assert "at most 18 seats of 1 GiB, or 24 of 724 MiB" in proc.stderr

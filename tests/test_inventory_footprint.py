"""A seat's real footprint: its cap plus a CUDA context, so "24 seats" means 24 that fit.

The rule (:func:`~jupyterhub_gpulab.inventory.slices.footprint_problem`) on the seed's lab (one
Tesla P40, 24 GiB, shared by 24 students), through every source that splits a GPU in seats:
a declared inventory and NVML (``shared_devices``, the fake NVML), each warning or refusing
with ``c.GPULab.seat_overcommit``, and the installed ``gpulab check-config``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from fake_nvml import P40_UUID, FakeNVML

from jupyterhub_gpulab.errors import ConfigError
from jupyterhub_gpulab.inventory import (
    InventoryError,
    SharedSettings,
    discover,
    load_declared,
    load_inventory,
)
from jupyterhub_gpulab.inventory.slices import CUDA_CONTEXT_BYTES, footprint_problem
from jupyterhub_gpulab.lab.config import GPULab

pytestmark = pytest.mark.unit

MiB = 2**20
GiB = 2**30
P40 = {"uuid": P40_UUID, "index": 0, "name": "Tesla P40", "memory": "24GiB",
       "compute_capability": "6.1", "driver_version": "580.95.05"}  # fmt: skip


def p40(seats: int, per_seat: str) -> list[dict]:
    return [{**P40, "shared": {"seats": seats, "memory_per_seat": per_seat}}]


def test_the_context_figure_is_the_lazy_loading_one():
    # PyTorch PR #86509 measured ~274 MiB with lazy loading, ~636 MiB eager: 300 MiB rounds up
    # the lazy figure and stays well under the eager one
    assert 274 * MiB < CUDA_CONTEXT_BYTES < 636 * MiB


def test_24_seats_of_1_gib_on_a_p40_warn_with_both_fixes():
    inv = load_declared(p40(24, "1GiB"))

    assert len(inv.slices) == 24  # kept: the admin chose "warn"
    (warning,) = inv.warnings
    assert warning.startswith(f"inventory[0] ({P40_UUID}): shared: ")
    assert (
        "24 seats of 1 GiB on a 24 GiB Tesla P40 need ~31.0 GiB once each seat's CUDA context "
        "(~300 MiB) is counted; at most 18 seats of 1 GiB, or 24 of 724 MiB"
    ) in warning


@pytest.mark.parametrize(
    ("seats", "per_seat", "fits"),
    [
        pytest.param(18, "1GiB", True, id="the-most-seats-of-1-GiB"),
        pytest.param(19, "1GiB", False, id="one-seat-more"),
        pytest.param(24, "724MiB", True, id="the-largest-cap-for-24"),
        pytest.param(24, "725MiB", False, id="one-MiB-more"),
    ],
)
def test_the_suggested_layouts_are_exactly_the_largest_that_fit(seats, per_seat, fits):
    inv = load_declared(p40(seats, per_seat))
    assert (inv.warnings == ()) is fits, inv.warnings


def test_the_figures_follow_the_device_and_the_context():
    device = load_declared([P40]).devices[0]
    small = SharedSettings(seats=4, memory_bytes=3 * GiB, compute_share=0.25)
    assert footprint_problem(device, small) is None
    problem = footprint_problem(device, small, context_bytes=4 * GiB)
    assert problem == (
        "4 seats of 3 GiB on a 24 GiB Tesla P40 need ~28 GiB once each seat's CUDA context "
        "(~4 GiB) is counted; at most 3 seats of 3 GiB, or 4 of 2 GiB"
    )


def test_refuse_makes_an_overcommitted_declared_lab_an_error():
    with pytest.raises(InventoryError) as e:
        load_declared(p40(24, "1GiB"), overcommit="refuse")
    (line,) = e.value.errors
    assert "at most 18 seats of 1 GiB, or 24 of 724 MiB" in line
    assert "c.GPULab.seat_overcommit = 'refuse'" in line
    assert load_declared(p40(24, "724MiB"), overcommit="refuse").warnings == ()


def test_an_nvml_p40_split_in_seats_warns_the_same_way():
    settings = SharedSettings(seats=24, memory_bytes=GiB, compute_share=1 / 24)
    inv = discover(nvml=FakeNVML.p40(), shared={P40_UUID: settings})

    assert len(inv.slices) == 24
    (warning,) = inv.warnings
    assert "overcommits its memory" in warning
    assert "at most 18 seats of 1 GiB, or 24 of 724 MiB" in warning


def test_refuse_makes_an_overcommitted_nvml_p40_an_error_too():
    # the seed lab's host: the P40 read from NVML and split by c.GPULab.shared_devices
    def load(per_seat: int, overcommit: str):
        settings = SharedSettings(seats=24, memory_bytes=per_seat, compute_share=1 / 24)
        return load_inventory(
            "nvml", None, nvml=FakeNVML.p40(), shared={P40_UUID: settings}, overcommit=overcommit
        )

    with pytest.raises(InventoryError) as e:
        load(GiB, "refuse")
    (line,) = e.value.errors
    assert line.startswith(f"GPU 0 (Tesla P40) ({P40_UUID}) overcommits its memory: "), line
    assert "at most 18 seats of 1 GiB, or 24 of 724 MiB" in line
    assert "c.GPULab.seat_overcommit = 'refuse'" in line
    assert len(load(724 * MiB, "refuse").slices) == 24  # what it names fits
    assert len(load(GiB, "warn").slices) == 24  # warn keeps them, as before


def test_the_lab_config_refuses_the_nvml_layout_as_check_config_and_the_hub_read_it(tmp_path):
    gl = GPULab(
        db_url=f"sqlite:///{tmp_path}/gpulab.sqlite",
        inventory_source="nvml",
        shared_devices={P40_UUID: {"seats": 24, "memory_per_seat": "1GiB"}},
        seat_overcommit="refuse",
        profiles=[
            {"slug": "seat", "display_name": "Seat", "image": "x", "slice": {"kind": "shared"}}
        ],
    )
    with pytest.raises(ConfigError) as e:
        gl.load(nvml=FakeNVML.p40())
    assert any("or 24 of 724 MiB" in m for m in e.value.errors), e.value.errors
    gl.shared_devices = {P40_UUID: {"seats": 24, "memory_per_seat": "700MiB"}}
    assert len(gl.load(nvml=FakeNVML.p40()).inventory.slices) == 24


def _check_config(tmp_path, extra: str = "") -> subprocess.CompletedProcess:
    config = tmp_path / "jupyterhub_config.py"
    config.write_text(
        f"c.GPULab.db_url = 'sqlite:///{tmp_path}/gpulab.sqlite'\n"
        f"c.GPULab.inventory = {p40(24, '1GiB')!r}\n"
        "c.GPULab.profiles = [{'slug': 'seat', 'display_name': 'PyTorch (1 GiB seat)', "
        "'image': 'gpulab/pytorch:test', 'slice': {'kind': 'shared'}}]\n"
        f"{extra}"
    )
    exe = shutil.which("gpulab", path=os.path.dirname(sys.executable)) or shutil.which("gpulab")
    assert exe, "the gpulab console script is not installed (pip install -e .)"
    return subprocess.run(
        [exe, "check-config", "-f", str(config)], capture_output=True, text=True, timeout=120
    )


def test_check_config_warns_about_the_p40_lab_and_refuses_it_when_asked(tmp_path):
    proc = _check_config(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "warning: inventory[0]" in proc.stdout
    assert "need ~31.0 GiB" in proc.stdout and "or 24 of 724 MiB" in proc.stdout

    proc = _check_config(tmp_path, "c.GPULab.seat_overcommit = 'refuse'\n")
    assert proc.returncode == 1
    assert "at most 18 seats of 1 GiB, or 24 of 724 MiB" in proc.stderr

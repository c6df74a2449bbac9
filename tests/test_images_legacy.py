"""The PyTorch for Pascal (``cuda12-legacy``): its lock, and labels taken from what the installed
build says of itself, so the image gate lets it onto a Tesla P40 and keeps a CUDA 13 build off.

The multi-GB image is never built here: the lock is checked as pip would use it, the labels as
``images/build-image.sh`` writes them (``python -m jupyterhub_gpulab.lab.imagelabels labels``)
from the build's ``torch.version.cuda`` and ``torch._C._cuda_getArchFlags()``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from images_support import CU126_ARCHS, CU130_ARCHS
from images_support import lock as lock_lines

from jupyterhub_gpulab.inventory.declared import load_declared
from jupyterhub_gpulab.inventory.model import SliceKind, SliceRequest
from jupyterhub_gpulab.lab import imagelabels, images

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "images" / "locks" / "pytorch-cuda12-legacy.txt"
P40 = [{"uuid": "GPU-p40", "index": 0, "name": "Tesla P40", "memory": "24GiB",
        "compute_capability": "6.1", "driver_version": "580.95.05"}]  # fmt: skip


def test_the_legacy_lock_pins_every_package_with_hashes_and_cu126_wheels():
    text = LOCK.read_text(encoding="utf-8")
    # one requirement per block: "name==version \" then its hashes
    blocks = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 1)[1])
    reqs = [b for b in blocks if not b.startswith("#") and b.strip()]
    pins = imagelabels.pins(text.splitlines())
    assert len(reqs) == len(pins) > 100
    for block in reqs:
        assert re.match(r"^[A-Za-z0-9][A-Za-z0-9._\[\]-]*==[^\s]+ \\", block), block.split()[0]
        assert "--hash=sha256:" in block, block.split()[0]
    assert (pins["torch"], pins["torchvision"]) == ("2.7.1", "0.22.1")
    assert imagelabels.cuda_major_of(text.splitlines()) == 12
    assert pins["nvidia-cuda-runtime-cu12"].startswith("12.6.")
    nvidia = {k for k in pins if k.startswith("nvidia-") and k != "nvidia-ml-py"}
    assert nvidia and all(k.endswith("-cu12") for k in nvidia), sorted(nvidia)
    # a framework lock only adds to the base image's venv
    base = imagelabels.pins(lock_lines("base.txt"))
    assert {k: pins.get(k) for k in base} == base


def labels(lock: str, archs: list[str] | None, cuda: str | None) -> dict[str, str]:
    arch_min = imagelabels.lowest_arch(archs) if archs else None
    arch_max = imagelabels.highest_arch(archs) if archs else None
    return imagelabels.labels_for(
        "pytorch", "cuda12-legacy", lock_lines(lock), arch_min, cuda_version=cuda,
        arch_max=arch_max,
    )  # fmt: skip


def gate(label_set: dict[str, str], lab: list[dict] = P40) -> str | None:
    need = images.requirements_from_labels("gpulab/pytorch:test", label_set)
    return images.unservable(need, SliceRequest(SliceKind.GPU), load_declared(lab).slices)


#: A Blackwell workstation card (compute capability 12.0) and a Hopper one (9.0).
BLACKWELL = [
    {**P40[0], "uuid": "GPU-b", "name": "NVIDIA RTX PRO 6000", "compute_capability": "12.0"}
]
HOPPER = [{**P40[0], "uuid": "GPU-h", "name": "NVIDIA H100", "compute_capability": "9.0"}]


def test_the_newest_architecture_without_ptx_is_the_maximum():
    assert imagelabels.highest_arch(CU126_ARCHS) == (9, 0)
    assert imagelabels.highest_arch(["sm_90", "sm_100", "sm_120a"]) == (12, 0)
    # PTX (compute_XY) is compiled by the driver for any newer GPU: no maximum
    assert imagelabels.highest_arch(CU130_ARCHS) is None
    assert imagelabels.highest_arch(["sm_80", "compute_80"]) is None
    assert imagelabels.highest_arch([]) is None


def test_a_cu126_build_without_ptx_is_kept_off_blackwell_naming_both():
    legacy = labels("pytorch-cuda12-legacy.txt", CU126_ARCHS, "12.6")
    assert legacy[images.LABEL_MAX_CC] == "9.0"
    why = gate(legacy, BLACKWELL)
    assert why and "NVIDIA RTX PRO 6000" in why and "it has compute capability 12.0" in why
    assert "compute capability 5.0 to 9.x (built up to sm_90, no PTX)" in why
    assert gate(legacy, HOPPER) is None and gate(legacy) is None
    # the CUDA 13 build carries PTX (compute_120): no maximum, Blackwell runs it
    cuda13 = labels("pytorch-cuda.txt", CU130_ARCHS, "13.0")
    assert images.LABEL_MAX_CC not in cuda13 and gate(cuda13, BLACKWELL) is None
    # an image labelled before the maximum existed (or without the build's list) has none
    assert images.LABEL_MAX_CC not in labels("pytorch-cuda12-legacy.txt", None, None)
    old = {k: v for k, v in legacy.items() if k != images.LABEL_MAX_CC}
    assert gate(old, BLACKWELL) is None


def test_the_builds_own_arch_list_admits_the_cu126_torch_on_a_p40():
    legacy = labels("pytorch-cuda12-legacy.txt", CU126_ARCHS, "12.6")
    assert legacy[images.LABEL_CUDA] == "12"
    assert legacy[images.LABEL_MIN_CC] == "5.0"
    assert legacy[images.LABEL_MIN_DRIVER] == "525.60.13"
    assert legacy[images.LABEL_FRAMEWORK + "torch"] == "2.7.1"
    assert gate(legacy) is None


def test_a_cuda_13_build_is_kept_off_the_p40_by_its_own_report():
    cuda13 = labels("pytorch-cuda.txt", CU130_ARCHS, "13.0")
    assert (cuda13[images.LABEL_CUDA], cuda13[images.LABEL_MIN_CC]) == ("13", "7.5")
    why = gate(cuda13)
    assert why and "Tesla P40" in why and "compute capability 6.1" in why
    # a CUDA 12 build whose arch list starts at sm_75 (torch 2.8's cu128) is refused too
    cu128 = labels("pytorch-cuda12-legacy.txt", CU130_ARCHS[:-3], "12.8")
    assert cu128[images.LABEL_MIN_CC] == "7.5" and gate(cu128)


def test_without_the_builds_report_the_per_release_table_is_the_cautious_fallback():
    # torch + CUDA 12 by the table alone is the cu128 line (sm_75): kept off the P40
    assert labels("pytorch-cuda12-legacy.txt", None, None)[images.LABEL_MIN_CC] == "7.5"
    # an arch list never goes below what the CUDA major itself supports
    assert labels("pytorch-cuda12-legacy.txt", ["sm_35"], "12.6")[images.LABEL_MIN_CC] == "5.0"
    # the CUDA the build reports picks the driver facts over the lock's runtime wheel
    built13 = labels("pytorch-cuda12-legacy.txt", CU130_ARCHS, "13.0")
    assert (built13[images.LABEL_CUDA], built13[images.LABEL_MIN_DRIVER]) == ("13", "580.65.06")
    with pytest.raises(ValueError, match="'twelve'"):
        labels("pytorch-cuda12-legacy.txt", CU126_ARCHS, "twelve")


def test_the_build_scripts_labels_command_reads_the_builds_report():
    out = subprocess.run(
        [sys.executable, "-m", "jupyterhub_gpulab.lab.imagelabels", "labels", "pytorch",
         "cuda12-legacy", str(LOCK), "cuda=12.6", *CU126_ARCHS],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    got = dict(line.split("=", 1) for line in out.splitlines())
    assert got[images.LABEL_MIN_CC] == "5.0" and got[images.LABEL_VARIANT] == "cuda12-legacy"
    assert got[images.LABEL_MAX_CC] == "9.0"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(
            ["--variant", "cuda12-legacy", "tensorflow"],
            "no cuda12-legacy variant of tensorflow",
            id="legacy-is-pytorch-only",
        ),
        pytest.param(
            ["--variant", "cuda11", "pytorch"],
            "--variant must be cpu, cuda or cuda12-legacy",
            id="unknown-variant",
        ),
    ],
)
def test_build_image_refuses_a_variant_it_has_no_lock_for(argv, message):
    proc = subprocess.run(
        ["bash", str(REPO / "images" / "build-image.sh"), *argv],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1 and message in proc.stderr, proc.stderr

"""What the code, scripts and README say of the documentation holds: every page they point an
admin to exists, and the images page's advice and GPU-generation table agree with the image
labels the build writes (:mod:`jupyterhub_gpulab.lab.imagelabels`). Reads files; no Sphinx
build (``test_docs.py`` builds the site)."""

from __future__ import annotations

import re
from pathlib import Path

from images_support import CU126_ARCHS, CU130_ARCHS
from images_support import lock as lock_lines

from jupyterhub_gpulab.lab import imagelabels, images

REPO = Path(__file__).resolve().parents[1]
IMAGES_PAGE = REPO / "docs" / "source" / "admin" / "images.md"
#: Pages the site's build writes (not in the source tree until it runs).
GENERATED = "docs/source/_generated/"


def _pointers() -> dict[str, list[str]]:
    """``{"docs/….md": [files naming it]}`` over the README, scripts, images and Python code."""
    found: dict[str, list[str]] = {}
    files = [REPO / "README.md", *REPO.glob("images/*.sh"), *REPO.glob("scripts/*.sh")]
    for folder in ("jupyterhub_gpulab", "benchmarks"):
        files += (REPO / folder).rglob("*.py")
    for f in files:
        for ref in re.findall(r"docs/[A-Za-z0-9_/.-]+\.md", f.read_text(encoding="utf-8")):
            found.setdefault(ref, []).append(str(f.relative_to(REPO)))
    return found


def test_every_doc_page_the_code_and_scripts_point_to_exists():
    pointers = _pointers()
    assert "docs/source/admin/images.md" in pointers  # build-image.sh's pointer is read
    missing = {
        ref: where
        for ref, where in pointers.items()
        if not ref.startswith(GENERATED) and not (REPO / ref).is_file()
    }
    assert not missing, f"pointers to pages that do not exist: {missing}"


def test_the_images_page_does_not_send_an_admin_to_make_a_lock_that_exists():
    # the cu126 lock was once still to be resolved; it is images/locks/pytorch-cuda12-legacy.txt
    text = IMAGES_PAGE.read_text(encoding="utf-8")
    assert (REPO / "images" / "locks" / "pytorch-cuda12-legacy.txt").is_file()
    assert not re.search(r"needs a lock resolved against PyTorch's\s+`?cu126", text)
    advice = text.split("For the P40, give its profiles", 1)[1].split("\n\n", 1)[0]
    assert "`cuda12-legacy`" in advice


#: NVIDIA's compute capabilities from Maxwell to Blackwell.
GENERATIONS = [(5, 0), (5, 2), (5, 3), (6, 0), (6, 1), (7, 0), (7, 5), (8, 0), (8, 6), (8, 9),
               (9, 0), (10, 0), (12, 0)]  # fmt: skip
#: Each CUDA PyTorch variant: its lock and what its build says of itself.
BUILDS = {
    "cuda12-legacy": ("pytorch-cuda12-legacy.txt", CU126_ARCHS, "12.6"),
    "cuda": ("pytorch-cuda.txt", CU130_ARCHS, "13.0"),
}


def _admits(variant: str, cc: tuple[int, int]) -> bool:
    lock, archs, cuda = BUILDS[variant]
    labels = imagelabels.labels_for(
        "pytorch", variant, lock_lines(lock), imagelabels.lowest_arch(archs),
        cuda_version=cuda, arch_max=imagelabels.highest_arch(archs),
    )  # fmt: skip
    need = images.requirements_from_labels(f"gpulab/pytorch:x-{variant}", labels)
    return images.device_problem(need, "GPU 0", cc, (580, 95, 5)) is None


def _cc(text: str) -> tuple[int, int]:
    major, minor = text.strip().split(".")
    return int(major), int(minor)


def _table() -> list[tuple[str, tuple[int, int], tuple[int, int] | None]]:
    """``(variant, lowest, highest or None)`` of each GPU row of the generation table."""
    section = (
        IMAGES_PAGE.read_text(encoding="utf-8")
        .split("## Which PyTorch each GPU generation gets", 1)[1]
        .split("\n## ", 1)[0]
    )
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        m = re.search(r"`gpulab/pytorch:<hub>-([a-z0-9-]+)`", line)
        if len(cells) < 3 or not m or m.group(1) not in BUILDS:
            continue
        span = cells[1]
        if span.startswith("≥"):
            rows.append((m.group(1), _cc(span[1:]), None))
        else:
            low, high = span.split("–")
            rows.append((m.group(1), _cc(low), _cc(high)))
    return rows


def test_the_generation_table_has_a_row_for_every_gpu_an_image_admits_and_no_other():
    rows = _table()
    assert {v for v, _lo, _hi in rows} == set(BUILDS)
    for cc in GENERATIONS:
        admitting = {v for v in BUILDS if _admits(v, cc)}
        listed = {v for v, lo, hi in rows if lo <= cc and (hi is None or cc <= hi)}
        # every generation some image runs on has a row naming one of those images
        assert admitting and listed, f"compute capability {cc}: no row, or no image runs on it"
        # and a row never offers a generation an image the gate keeps off it
        assert listed <= admitting, f"compute capability {cc}: the table offers {listed}"

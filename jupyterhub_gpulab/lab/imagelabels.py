"""Write a framework image's labels at build time (``images/build-image.sh``,
``images/docker-stacks/build.sh``): from its lock file, what the installed framework says of its
own build (CUDA version, architecture list), and the CUDA facts below. The labels' meaning and
the gate that reads them back: :mod:`.images`. Pure logic, no I/O but the ``__main__`` reading
the lock file.

    python -m jupyterhub_gpulab.lab.imagelabels labels pytorch cuda12-legacy \
        images/locks/pytorch-cuda12-legacy.txt cuda=12.6 sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..inventory.model import format_version
from .images import (
    FRAMEWORKS,
    LABEL_CUDA,
    LABEL_FRAMEWORK,
    LABEL_IMAGE,
    LABEL_MAX_CC,
    LABEL_MIN_CC,
    LABEL_MIN_DRIVER,
    LABEL_SEAT_CAP,
    LABEL_VARIANT,
)


@dataclass(frozen=True)
class CudaFacts:
    """What the CUDA libraries of one major version need of the host: the lowest driver
    (Linux x86_64) and the lowest compute capability, with where that is written."""

    min_driver: str
    min_compute_capability: tuple[int, int]
    source: str


#: By CUDA major version. The images' CUDA libraries are pip wheels (``nvidia-*``), which run on
#: any driver of their major's minimum (CUDA minor version compatibility).
CUDA_FACTS = {
    12: CudaFacts(
        "525.60.13",
        (5, 0),
        # CUDA 12.0 release notes, "CUDA Driver" Table 2 (minor version compatibility: CUDA 12.x
        # needs >= 525.60.13 on Linux); CUDA 12 removed Kepler (sm_35/37), keeping sm_50 and up.
        "CUDA 12.x minor version compatibility (CUDA Toolkit 12.0 release notes, Table 2): "
        "driver >= 525.60.13; CUDA 12 supports compute capability 5.0 and newer",
    ),
    13: CudaFacts(
        "580.65.06",
        (7, 5),
        # CUDA 13.0 release notes: Table 3 "CUDA Toolkit and Corresponding Driver Versions"
        # (13.0 GA, Linux x86_64 >= 580.65.06); "offline compilation and library support for
        # the Maxwell, Pascal and Volta architectures (compute capability < 7.5) removed",
        # announced in the CUDA 12.9 release notes.
        "CUDA Toolkit 13.0 release notes, Table 3: driver >= 580.65.06; Maxwell, Pascal and "
        "Volta (compute capability < 7.5) no longer supported",
    ),
}

#: The lowest architecture a framework's CUDA wheels are compiled for, where it is higher than
#: its CUDA major's: used only when the build could not read the installed framework's own
#: list (``torch._C._cuda_getArchFlags()``, TensorFlow's ``build_info``), which wins over this
#: per-release table, since one release ships several CUDA builds (torch 2.7's cu126 wheels on
#: PyPI start at sm_50, its cu128 ones at sm_75).
FRAMEWORK_MIN_CC = {
    # PyTorch 2.8 release notes: the CUDA 12.8+ wheels dropped Maxwell, Pascal and Volta
    # (sm_50-sm_70); its CUDA 13.0 wheels start at sm_75 as well.
    ("torch", 12): ((7, 5), "PyTorch 2.8 release notes: CUDA 12.8+ wheels start at sm_75"),
    ("torch", 13): ((7, 5), "PyTorch CUDA 13.0 wheels: TORCH_CUDA_ARCH_LIST starts at 7.5"),
    # tensorflow.org/install/pip: ">= 525.60.13"; TensorFlow's hermetic CUDA builds compile
    # sm_60 and newer (.bazelrc HERMETIC_CUDA_COMPUTE_CAPABILITIES).
    ("tensorflow", 12): ((6, 0), "TensorFlow pip wheels: sm_60 and newer"),
}

_CUDA_RUNTIME = re.compile(r"^nvidia-cuda-runtime(?:-cu(\d+))?==(\d+)\.")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")


def pins(lock_lines: Iterable[str]) -> dict[str, str]:
    """``{normalised name: version}`` of a hash-pinned lock file's ``name==version`` lines."""
    out = {}
    for line in lock_lines:
        m = _PIN.match(line.strip())
        if m:
            out[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
    return out


def cuda_major_of(lock_lines: Iterable[str]) -> int | None:
    """The CUDA major version of a lock's ``nvidia-cuda-runtime`` wheel (``-cu12`` or the
    CUDA 13 name without a suffix), or ``None`` without one (a CPU lock)."""
    for line in lock_lines:
        m = _CUDA_RUNTIME.match(line.strip())
        if m:
            return int(m.group(1) or m.group(2))
    return None


def labels_for(
    image: str,
    variant: str,
    lock_lines: Iterable[str],
    arch_min: tuple[int, int] | None = None,
    seat_cap: bool = True,
    cuda_version: str | None = None,
    arch_max: tuple[int, int] | None = None,
) -> dict[str, str]:
    """The labels of an image built from ``lock_lines`` (see the module docstring).

    What the installed build says wins over the tables: ``arch_min`` is the lowest compute
    capability the framework was compiled for (:func:`lowest_arch` of its arch list), which
    replaces :data:`FRAMEWORK_MIN_CC` (never below the CUDA major's own floor), and
    ``cuda_version`` (``torch.version.cuda``, ``"12.6"``) the CUDA it was built with, whose
    major picks the driver facts instead of the lock's ``nvidia-cuda-runtime`` wheel.
    ``arch_max`` (:func:`highest_arch`: the newest architecture of a list without PTX) becomes
    the maximum; without it (PTX, or no list read) the image states none. Raises
    ``ValueError`` for a CUDA variant whose CUDA major has no facts here, or a malformed
    ``cuda_version``."""
    lines = list(lock_lines)
    pinned = pins(lines)
    out = {LABEL_IMAGE: image, LABEL_VARIANT: variant}
    for name in FRAMEWORKS:
        if name in pinned:
            key = "tensorflow" if name == "tensorflow-cpu" else name
            out[LABEL_FRAMEWORK + key] = pinned[name]
    if seat_cap:
        out[LABEL_SEAT_CAP] = "framework"
    major = cuda_major_of(lines)
    if cuda_version:
        if not re.fullmatch(r"\d+(\.\d+)*", cuda_version):
            raise ValueError(f"CUDA version {cuda_version!r} is not such as '12.6'")
        major = int(cuda_version.split(".")[0])
    if variant == "cpu" or major is None:
        return out
    facts = CUDA_FACTS.get(major)
    if facts is None:
        raise ValueError(f"no driver facts for CUDA {major}: add them to CUDA_FACTS ({__name__})")
    floor = [facts.min_compute_capability]
    if arch_min:
        floor.append(arch_min)
    else:
        floor += [
            cc
            for (framework, cuda), (cc, _source) in FRAMEWORK_MIN_CC.items()
            if cuda == major and framework in pinned
        ]
    out[LABEL_CUDA] = str(major)
    out[LABEL_MIN_DRIVER] = facts.min_driver
    out[LABEL_MIN_CC] = format_version(max(floor))
    if arch_max:
        out[LABEL_MAX_CC] = format_version(arch_max)
    return out


_ARCH = re.compile(r"^(sm|compute)_(\d+)(\d)[a-z]?$")


def _archs(arch_flags: Iterable[str]) -> list[tuple[str, tuple[int, int]]]:
    """``[("sm", (7, 5)), ("compute", (12, 0))]`` of ``["sm_75", "compute_120"]``."""
    found = []
    for flag in arch_flags:
        m = _ARCH.match(flag.strip())
        if m:
            found.append((m.group(1), (int(m.group(2)), int(m.group(3)))))
    return found


def lowest_arch(arch_flags: Iterable[str]) -> tuple[int, int] | None:
    """The lowest compute capability in a framework's architecture list (``"sm_75"``,
    ``"compute_90"``, ``"sm_120a"``): ``(7, 5)``; ``None`` for an empty list."""
    found = [cc for _kind, cc in _archs(arch_flags)]
    return min(found) if found else None


def highest_arch(arch_flags: Iterable[str]) -> tuple[int, int] | None:
    """The newest architecture a list carries machine code for (``sm_90`` of ``sm_50 … sm_90``):
    ``(9, 0)``, when it carries no PTX; ``None`` when it does (``compute_XY``: the driver
    compiles PTX for any newer GPU) or the list is empty."""
    found = _archs(arch_flags)
    if not found or any(kind == "compute" for kind, _cc in found):
        return None
    return max(cc for _kind, cc in found)


def facts_labels(framework: str, cuda_major: int) -> dict[str, str]:
    """The CUDA labels of an image whose ``framework`` (``torch``, ``tensorflow``) uses CUDA
    ``cuda_major``, from the facts alone (images built on another base, e.g. docker-stacks).
    Raises ``ValueError`` for a CUDA major without facts."""
    facts = CUDA_FACTS.get(cuda_major)
    if facts is None:
        raise ValueError(
            f"no driver facts for CUDA {cuda_major}: add them to CUDA_FACTS ({__name__})"
        )
    cc = max([facts.min_compute_capability] + [
        c for (f, m), (c, _s) in FRAMEWORK_MIN_CC.items() if f == framework and m == cuda_major
    ])  # fmt: skip
    return {
        LABEL_CUDA: str(cuda_major),
        LABEL_MIN_DRIVER: facts.min_driver,
        LABEL_MIN_CC: format_version(cc),
    }


def _main(argv: list[str]) -> int:
    """``python -m jupyterhub_gpulab.lab.imagelabels labels IMAGE VARIANT LOCK [cuda=X.Y]
    [ARCH_FLAG…]`` or ``… facts FRAMEWORK CUDA_MAJOR``: print ``key=value`` lines, one label each
    (for ``docker import --change`` / ``docker build --label``). ``cuda=12.6`` and the arch flags
    (``sm_50 sm_60 …``) are what the installed framework says of its own build."""
    if len(argv) == 3 and argv[0] == "facts":
        for key, value in sorted(facts_labels(argv[1], int(argv[2])).items()):
            print(f"{key}={value}")
        return 0
    if len(argv) < 4 or argv[0] != "labels":
        print(_main.__doc__)
        return 2
    image, variant, lock = argv[1], argv[2], argv[3]
    with open(lock, encoding="utf-8") as f:
        lines = f.read().splitlines()
    said = argv[4:]
    cuda = next((a[len("cuda=") :] for a in said if a.startswith("cuda=")), None)
    archs = [a for a in said if not a.startswith("cuda=")]
    for key, value in sorted(
        labels_for(
            image,
            variant,
            lines,
            lowest_arch(archs),
            cuda_version=cuda or None,
            arch_max=highest_arch(archs),
        ).items()
    ):
        print(f"{key}={value}")
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(_main(sys.argv[1:]))

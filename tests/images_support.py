"""What the image gate's tests share: the seed lab's P40 beside an L4, and the labels
``images/build-image.sh`` writes for an image, read from its lock file."""

from __future__ import annotations

from jupyterhub_gpulab.lab import imagelabels, images

LOCKS = images.__file__.rsplit("/jupyterhub_gpulab/", 1)[0] + "/images/locks/"

#: The seed lab's P40 (Pascal) beside an L4, both on a host with driver R580.
P40_LAB = [
    {"uuid": "GPU-p40", "index": 0, "name": "Tesla P40", "memory": "24GiB",
     "compute_capability": "6.1", "driver_version": "580.95.05"},
    {"uuid": "GPU-l4", "index": 1, "name": "NVIDIA L4", "memory": "24GiB",
     "compute_capability": "8.9", "driver_version": "580.95.05"},
]  # fmt: skip


#: What PyPI's torch 2.7.x (CUDA 12.6) and 2.13 (CUDA 13) builds say of themselves
#: (``torch._C._cuda_getArchFlags()``).
CU126_ARCHS = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
CU130_ARCHS = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]


def lock(name: str) -> list[str]:
    with open(LOCKS + name, encoding="utf-8") as f:
        return f.read().splitlines()


def cuda13_labels(image="gpulab/pytorch:6.1.1-cuda") -> dict:
    return imagelabels.labels_for("pytorch", "cuda", lock("pytorch-cuda.txt"))

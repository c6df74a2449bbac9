"""A node agent process over a fake NVML: the GPUs a test Swarm node declares.

    python tests/agent_fakes.py BOARDS -- <gpulab node-agent arguments>
    python tests/agent_fakes.py by-node -- …   (the boards of $GPULAB_NODE_NAME)

runs :func:`jupyterhub_gpulab.agent.app.main` (the real agent: its reports, its HTTP, its token)
with ``fake_nvml.FakeNVML`` of ``BOARDS`` in place of ``pynvml``, the one part a machine without
GPUs lacks. ``BOARDS`` names a layout of :data:`BOARDS`: the e2e lab of ``e2e_support.LAB``
split over the two GPU nodes of the test Swarm, with the same UUIDs, so the tests that run on
one Docker host and on the Swarm expect the same slices.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_nvml import FakeGpu, FakeNVML, MiB, _a100_80gb_profiles, mig_gpu  # noqa: E402


def a100() -> FakeGpu:
    """e2e_support.LAB's A100 80GB: two 1g.10gb and one 3g.40gb MIG instances."""
    return mig_gpu(
        "GPU-e2e0a100-0000-4000-8000-000000000000",
        "NVIDIA A100-SXM4-80GB",
        81920 * MiB,
        _a100_80gb_profiles(),
        [
            ("MIG-e2e00100-0000-4000-8000-000000000000", "1g.10gb"),
            ("MIG-e2e00101-0000-4000-8000-000000000001", "1g.10gb"),
            ("MIG-e2e00300-0000-4000-8000-000000000000", "3g.40gb"),
        ],
    )


def t4() -> FakeGpu:
    """e2e_support.LAB's T4 (the lab's c.GPULab.shared_devices splits it into 5 seats)."""
    return FakeGpu("GPU-e2e0f400-0000-4000-8000-000000000001", "Tesla T4", 16384 * MiB, (7, 5))


def a40() -> FakeGpu:
    return FakeGpu("GPU-e2e0a400-0000-4000-8000-000000000002", "NVIDIA A40", 49152 * MiB, (8, 6))


def bench_uuid(node: str, i: int) -> str:
    """The UUID of GPU ``i`` of benchmark node ``node`` (``"n2"``), in NVML's form."""
    return f"GPU-be0c{int(node[1:]):04x}-0000-4000-8000-{i:012x}"


def bench(node: str) -> list[FakeGpu]:
    """benchmarks/swarm.py's boards: two T4s per GPU node (the lab splits each in 5 seats)."""
    return [FakeGpu(bench_uuid(node, i), "Tesla T4", 16384 * MiB, (7, 5)) for i in range(2)]


BOARDS = {
    "a100": lambda: [a100()],
    "bench-n2": lambda: bench("n2"),
    "bench-n3": lambda: bench("n3"),
    "t4+a40": lambda: [t4(), a40()],  # this host's GPU 0 and 1
    "none": lambda: [],
}


#: ``by-node``: the boards of the node named by ``$GPULAB_NODE_NAME`` (an agent run as a Swarm
#: global service, whose environment names its node: ``{{.Node.Hostname}}``)
BY_NODE = {"gpulab-swn2": "a100", "gpulab-swn3": "t4+a40"}


def main() -> None:
    boards, _, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    if boards == "by-node":
        import os

        boards = BY_NODE.get(os.environ.get("GPULAB_NODE_NAME", ""), "none")
    from jupyterhub_gpulab.agent.app import main as agent_main

    agent_main(rest, nvml=FakeNVML(BOARDS[boards]()))


if __name__ == "__main__":
    main()

"""The spawner's backend-neutral core (spawner/core.py) and its Docker backend (gpudocker.py): a
spawner class whose backend cannot attach a GPU slice is refused when it is defined, never
started with nothing attached; and the ledger has one async seam (ledger/aio.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from dockerspawner import DockerSpawner, SwarmSpawner

import jupyterhub_gpulab
from jupyterhub_gpulab.spawner import GPUDockerSpawner
from jupyterhub_gpulab.spawner.core import SliceSpawnerCore

PACKAGE = Path(jupyterhub_gpulab.__file__).parent


def test_a_spawner_on_the_core_without_a_backend_is_refused_when_defined():
    with pytest.raises(TypeError, match="_attach_slice.*no GPU slice attached"):

        class Bare(SliceSpawnerCore, DockerSpawner):
            pass


def test_a_swarm_service_spawner_is_refused_since_it_would_get_no_slice():
    # SwarmSpawner creates services (create_service), which the container seam never sees
    with pytest.raises(TypeError, match="containers only; its services would start with no slice"):

        class SwarmGPU(GPUDockerSpawner, SwarmSpawner):
            pass


def test_a_site_subclass_of_the_docker_spawner_is_accepted():
    class SiteSpawner(GPUDockerSpawner):
        pass

    assert SiteSpawner.object_type == "container"


def test_every_blocking_call_leaves_the_event_loop_through_the_ledger_seam():
    offenders = [
        f"{p.relative_to(PACKAGE)}:{n}"
        for p in PACKAGE.rglob("*.py")
        if p != PACKAGE / "ledger" / "aio.py"
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\bto_thread\(", line)
    ]
    assert offenders == []


def test_no_spawner_module_is_over_400_lines():
    sizes = {p.name: len(p.read_text().splitlines()) for p in (PACKAGE / "spawner").glob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 400} == {}

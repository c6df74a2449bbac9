"""The Swarm backend's storage on the real test Swarm (three engines): a course volume is read and
written on the node that holds it, not on the manager, and one no node holds is reported absent
(collect then says "missing")."""

from __future__ import annotations

import pytest
from leakcheck import unique
from swarm_support import ENGINES, require_swarm, sdocker
from traitlets.config import Config

from jupyterhub_gpulab.backends import backend_for
from jupyterhub_gpulab.courses.storage import Entry

pytestmark = pytest.mark.swarm

IMAGE = "gpulab/singleuser:6.1.1"


def test_a_course_volume_is_read_and_written_on_the_swarm_node_that_holds_it():
    require_swarm()
    c = Config()
    c.JupyterHub.spawner_class = "gpulab-swarm"
    c.GPUSwarmSpawner.node_engines = dict(ENGINES)
    backend = backend_for(c)
    volume = unique("gpulab-coursework-sw--ann")
    holder = "gpulab-swn3"
    sdocker("volume", "create", volume, engine=ENGINES[holder])
    try:
        files = backend.storage(IMAGE)
        assert files.exists(volume)
        assert files.node_of(volume) == holder
        files.write_tree(
            volume, "assignments/hw1", [Entry("a.py", b"print(1)\n", 5.0)], (1000, 100)
        )
        entries, skipped = files.read_tree(volume, "assignments/hw1", 1 << 20)
        assert [(e.path, e.data) for e in entries if e.data is not None] == [
            ("a.py", b"print(1)\n")
        ]
        assert skipped == []
        # the file is on the holder's engine, and no other node got a volume of that name
        for node, url in ENGINES.items():
            listed = sdocker("volume", "ls", "-q", engine=url).stdout.split()
            assert (volume in listed) == (node == holder), node
        assert not files.exists(unique("gpulab-coursework-sw--nobody"))
    finally:
        for url in ENGINES.values():  # a wrong-node write would have made one there too
            sdocker("volume", "rm", "-f", volume, engine=url, check=False)
        backend.close()

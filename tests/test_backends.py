"""The engine seam's contracts (backends/, spawner/backendbase.py): a spawner on the core without
any one method ``start()`` needs is refused when defined, naming it; an engine backend without
any one word of the vocabulary is refused likewise; the Docker and Swarm spawners share one base
and one backend object answers for each lab's configuration."""

from __future__ import annotations

import pytest
from dockerspawner import DockerSpawner
from traitlets.config import Config

from jupyterhub_gpulab.backends import Backend, backend_for
from jupyterhub_gpulab.backends.base import VOCABULARY
from jupyterhub_gpulab.backends.dockerengine import DockerBackend
from jupyterhub_gpulab.backends.swarmengine import SwarmBackend
from jupyterhub_gpulab.spawner import GPUDockerSpawner
from jupyterhub_gpulab.spawner.backendbase import EngineBackend
from jupyterhub_gpulab.spawner.core import START_USES, SliceSpawnerCore
from jupyterhub_gpulab.spawner.formmixin import ProfileFormMixin
from jupyterhub_gpulab.spawner.gpuswarm import GPUSwarmSpawner

#: What the core's start() calls on its backend (spawner/core.py's docstring), written out here
#: so that dropping one from the core's check fails this test.
START_NEEDS = (
    "_attach_slice",
    "_start_object",
    "_discard_object",
    "_list_lab_objects",
    "_remove_object",
)


def _impl(name):
    if name == "_attach_slice":
        return lambda self, create_kwargs, s: None

    async def method(self, *args):
        return []

    return method


@pytest.mark.parametrize("left_out", START_NEEDS)
def test_a_spawner_backend_without_any_one_method_start_needs_is_refused_naming_it(left_out):
    body = {m: _impl(m) for m in START_NEEDS if m != left_out}
    with pytest.raises(TypeError, match=rf"without a backend for {left_out}: .*no GPU slice"):
        type("Partial", (ProfileFormMixin, SliceSpawnerCore, DockerSpawner), body)
    # with it, the same class is accepted
    bases = (ProfileFormMixin, SliceSpawnerCore, DockerSpawner)
    full = type("Full", bases, {**body, left_out: _impl(left_out)})
    assert issubclass(full, SliceSpawnerCore)


def test_a_spawner_on_the_core_without_the_form_s_choice_is_refused_naming_what_start_calls():
    """Every backend method, but no ProfileFormMixin: start() would claim nothing and fail on
    ``_pick_profile`` (an AttributeError, a 500); refused when the class is defined."""
    body = {m: _impl(m) for m in START_NEEDS}
    with pytest.raises(TypeError, match=r"without _pick_profile, which"):
        type("NoForm", (SliceSpawnerCore, DockerSpawner), body)


def test_a_spawner_on_the_core_without_an_object_s_names_is_refused_naming_them():
    from jupyterhub.spawner import Spawner

    body = {m: _impl(m) for m in START_NEEDS}
    with pytest.raises(TypeError, match=r"without object_id, object_name, which"):
        type("NoObject", (ProfileFormMixin, SliceSpawnerCore, Spawner), body)


def test_the_core_s_check_names_every_name_start_uses_that_the_core_does_not_define():
    """Read start() and _launch() as written: each ``self.<name>`` they read is the core's,
    JupyterHub's Spawner's, or named by the check (a new use must join the check)."""
    import ast
    import inspect
    import textwrap

    from jupyterhub.spawner import Spawner

    from jupyterhub_gpulab.spawner.core import BACKEND_METHODS

    used, assigned = set(), set()
    for fn in (SliceSpawnerCore.start, SliceSpawnerCore._launch):
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "self":
                (assigned if isinstance(node.ctx, ast.Store) else used).add(node.attr)
    unowned = {
        n for n in used - assigned if not hasattr(SliceSpawnerCore, n) and not hasattr(Spawner, n)
    }
    assert unowned <= set(START_USES), unowned - set(START_USES)
    # and what the core only refuses by default must come from the backend
    assert {"_start_object", "_discard_object"} <= set(BACKEND_METHODS) & used


@pytest.mark.parametrize("left_out", VOCABULARY)
def test_an_engine_backend_without_any_one_word_of_the_vocabulary_is_refused(left_out):
    body = {m: (lambda self, *a, **k: None) for m in VOCABULARY if m != left_out}
    with pytest.raises(TypeError, match=rf"is a backend without {left_out}$"):
        type("Partial", (Backend,), body)


def test_the_vocabulary_names_what_courses_the_cli_and_the_probes_ask():
    # courses: servers, exec_run, get_file, storage, run_once; image labels; the network probe;
    # the CLI's survey of the engine's containers
    for word in ("servers", "exec_run", "get_file", "storage", "run_once", "image_labels"):
        assert word in VOCABULARY
    # the spawner's: a server object's create, start and removal
    for word in ("create_server", "start_server", "remove_server"):
        assert word in VOCABULARY
    for word in ("gateway", "containers", "inspect_container", "info"):
        assert word in VOCABULARY


def test_the_docker_and_swarm_spawners_share_one_base_for_discard_labels_and_image_labels():
    for name in ("_discard_object", "_lab_labels", "_image_labels", "lab_backend"):
        assert getattr(GPUDockerSpawner, name) is getattr(EngineBackend, name), name
        assert getattr(GPUSwarmSpawner, name) is getattr(EngineBackend, name), name


def test_the_lab_backend_follows_the_spawner_class_and_its_network_and_asks_nothing_when_made():
    c = Config()
    c.DockerSpawner.network_name = "gpulab-net"
    c.DockerSpawner.client_kwargs = {"base_url": "unix:///nonexistent/docker.sock"}
    docker_backend = backend_for(c)
    assert isinstance(docker_backend, DockerBackend)
    assert docker_backend.network == "gpulab-net"

    s = Config()
    s.JupyterHub.spawner_class = "gpulab-swarm"
    s.GPUSwarmSpawner.node_engines = {"n1": "unix:///nonexistent/n1.sock"}
    swarm = backend_for(s)
    assert isinstance(swarm, SwarmBackend)
    assert set(swarm.nodes) == {"n1"}


class _SurveyedEngine:
    """The three words the survey of other labs' containers asks a backend, recorded."""

    def __init__(self, rows, inspected):
        self.rows, self.inspected, self.asked = rows, inspected, []

    def containers(self, all=False):
        self.asked.append(("containers", all))
        return self.rows

    def inspect_container(self, cid):
        self.asked.append(("inspect_container", cid))
        return self.inspected[cid]

    def info(self):
        self.asked.append(("info",))
        return {"DefaultRuntime": "runc"}


async def test_the_reconcile_s_survey_asks_the_lab_s_backend_and_no_raw_client():
    from types import SimpleNamespace

    from ledger_support import lab_inventory

    from jupyterhub_gpulab.spawner.engine import EngineSurvey

    rows = [{"Id": "f" * 64, "Names": ["/trainer"], "Labels": {}, "State": "running"}]
    gpu = {"Driver": "nvidia", "DeviceIDs": ["GPU-t4-0002"], "Capabilities": [["gpu"]]}
    engine = _SurveyedEngine(rows, {"f" * 64: {"HostConfig": {"DeviceRequests": [gpu]}}})
    survey = EngineSurvey().look(engine, None, lab_inventory(), rows=rows)
    assert [(f.container_name, f.devices) for f in survey.foreign] == [
        ("trainer", ("GPU-t4-0002",))
    ]
    assert engine.asked == [("info",), ("inspect_container", "f" * 64)]

    # GPUDockerSpawner's listing hands the survey the lab's backend (not DockerSpawner's client)
    handed = []

    async def docker(method, **kwargs):
        assert (method, kwargs) == ("containers", {"all": True})
        return rows

    runtime = SimpleNamespace(our_containers=lambda backend, got: handed.append(backend) or [])
    spawner = SimpleNamespace(docker=docker, runtime=lambda: runtime, lab_backend=lambda: engine)
    assert await GPUDockerSpawner._list_lab_objects(spawner) == []
    assert handed == [engine]


def _unreachable():
    from jupyterhub_gpulab.backends.dockerengine import Engine, api_client

    return DockerBackend(Engine(lambda: api_client("unix:///nonexistent/docker.sock")))


def test_the_network_probe_and_the_image_reader_say_why_when_the_engine_does_not_answer():
    from jupyterhub_gpulab.service.imageneeds import ImageNeeds
    from jupyterhub_gpulab.spawner.network import bridge_gateway

    assert bridge_gateway("bridge", default="10.9.9.9", backend=_unreachable()) == "10.9.9.9"
    with pytest.raises(RuntimeError, match="network 'bridge'"):
        bridge_gateway("bridge", backend=_unreachable())
    assert ImageNeeds(_unreachable).labels("gpulab/anything:1") is None


@pytest.mark.docker
def test_the_image_reader_and_the_network_probe_ask_the_real_engine_through_the_backend():
    import os

    from e2e_support import require_docker

    from jupyterhub_gpulab.service.imageneeds import ImageNeeds
    from jupyterhub_gpulab.spawner.network import bridge_gateway

    require_docker()
    image = os.environ.get("GPULAB_TEST_LAB_IMAGE", "gpulab/singleuser:6.1.1-lab")
    needs = ImageNeeds()
    assert isinstance(needs.labels(image), dict)
    assert needs.labels("gpulab/no-such-image:0") is None
    assert bridge_gateway("bridge").count(".") == 3  # an IPv4 address on docker0


@pytest.mark.docker
def test_the_docker_backend_makes_starts_and_removes_a_server_object_on_the_real_engine():
    """The words the spawner's start, stop and reconcile speak (create_server, start_server,
    remove_server), on the engine itself: a created object is not a running server until
    started; removal takes a running one; a second removal finds it gone and says so."""
    import os
    import uuid

    from e2e_support import require_docker

    from jupyterhub_gpulab.spawner.container import LABEL_LAB, LABEL_USER

    require_docker()
    image = os.environ.get("GPULAB_TEST_LAB_IMAGE", "gpulab/singleuser:6.1.1-lab")
    lab = f"test-backend-{uuid.uuid4().hex[:8]}"
    backend = backend_for(Config())
    request = {
        "image": image,
        "command": ["sleep", "120"],
        "entrypoint": [],
        "labels": {LABEL_USER: "alice", LABEL_LAB: lab},
    }
    made = backend.create_server(request)
    try:
        assert backend.servers(lab_id=lab) == []  # created, not started
        backend.start_server(made["Id"])
        [server] = backend.servers(lab_id=lab)
        assert (server.id, server.user) == (made["Id"], "alice")
    finally:
        removed = backend.remove_server(made["Id"])
    assert removed is True
    assert backend.servers(lab_id=lab) == []
    assert made["Id"] not in {c["Id"] for c in backend.containers(all=True)}
    assert backend.remove_server(made["Id"]) is False  # gone already: not an error
    backend.close()

"""Shared pytest fixtures. Add yours in a clearly separated block."""

from __future__ import annotations

import pytest
from fake_nvml import FakeNVML

# -- inventory: a fake pynvml (tests/fake_nvml.py) --------------------------------------------------


@pytest.fixture
def fake_nvml() -> FakeNVML:
    """A fresh fake ``pynvml`` over a mixed lab: GPU 0 Tesla P40, GPU 1 A40, GPU 2 A100-40GB in
    MIG mode (3g.20gb, 2g.10gb, 1g.5gb, 1g.5gb), GPU 3 H100 80GB (MIG capable, disabled)."""
    return FakeNVML.mixed_lab()


# -- the API contract: every response of the service's api/ checked against its OpenAPI document


@pytest.fixture(scope="module")
def api_contract():
    """Validate every response from the gpulab service's ``api/`` against the OpenAPI document
    (``tests/api_contract.py``) for the whole module: ``pytestmark =
    pytest.mark.usefixtures("api_contract")``."""
    from api_contract import validating_requests

    with validating_requests():
        yield


# -- the one clock tests move (tests/clock_support.py) ---------------------------------------------


@pytest.fixture
def clock_start():
    """Where ``at`` starts; override in a module for a fixed date."""
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).replace(microsecond=0)


@pytest.fixture
def clock_file():
    """Where ``at`` also writes its time for a hub process (``hub_fakes.CLOCK_FILE`` next to the
    hub's config); ``None``: this process only. Override in a module that runs a hub."""
    return None


@pytest.fixture
def at(monkeypatch, clock_start, clock_file):
    """gpulab's clock, frozen at ``clock_start`` and moved by the test: ``at.move(seconds)``,
    ``at.now = …``; ``jupyterhub_gpulab.clock.utcnow()`` returns ``at.now``."""
    from clock_support import MovingClock

    from jupyterhub_gpulab import clock

    moving = MovingClock(clock_start, clock_file)
    monkeypatch.setattr(clock, "utcnow", moving)
    yield moving
    moving.release()


@pytest.fixture
def backend(request) -> str:
    """The spawner backend a hub test runs on: ``"docker"`` (GPUDockerSpawner on this host's
    engine) unless the test asks for both (``@e2e_support.on_both_backends``), when it runs once
    on each: ``"swarm"`` is GPUSwarmSpawner on the test Swarm (``swarm_support``)."""
    return getattr(request, "param", "docker")


@pytest.fixture
def hub_maker(backend):
    """``(tmp_path, **kw) -> Hub``: how :func:`hub_factory` makes a hub (the e2e lab's
    :func:`e2e_support.new_hub`, or :func:`swarm_support.new_swarm_hub` on the Swarm backend);
    a module overrides this fixture for another kind of hub."""
    if backend == "swarm":
        from swarm_support import new_swarm_hub

        return new_swarm_hub
    from e2e_support import new_hub

    return new_hub


@pytest.fixture
def hub_factory(tmp_path, hub_maker):
    """Make real hubs on demand with ``hub_maker``; each is stopped and its containers (or
    services) removed after the test."""
    from e2e_support import require_docker

    require_docker()
    hubs = []

    def make(**kw):
        h = hub_maker(tmp_path, **kw)
        hubs.append(h)
        return h

    yield make
    for h in hubs:
        if hasattr(h, "close"):
            h.close()
        else:  # a module's own kind of hub (hubtools.Hub) on this host's engine
            from e2e_support import remove_node_containers

            h.stop()
            remove_node_containers(h.workdir.name)


# -- nothing left behind: this session's containers, volumes and Swarm services (leakcheck.py) --

_ENGINES = pytest.StashKey[set]()


def pytest_runtest_setup(item):
    """Note which engines this session used: the leak check asks only those (a ``-m "not
    docker"`` run makes no engine call)."""
    marks = {m.name for m in item.iter_markers()}
    used = item.session.config.stash.setdefault(_ENGINES, set())
    if marks & {"docker", "swarm"}:
        used.add("docker")
    if "swarm" in marks:
        used.add("swarm")


def pytest_sessionfinish(session, exitstatus):
    """Fail the run when a container, volume or Swarm service named by this session
    (:func:`leakcheck.unique`) survived it: every test removes what it made."""
    used = session.config.stash.get(_ENGINES, set())
    if "docker" not in used:
        return
    from leakcheck import RUN, leftovers

    left = leftovers(swarm="swarm" in used)
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep(
            "=", f"leak check: {len(left)} object(s) of run {RUN} survived it", red=True
        )
        for line in left:
            reporter.write_line(line)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED

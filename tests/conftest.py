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


# -- one real hub with the gpulab service for the whole session (tests/service_support.py) --------


@pytest.fixture(scope="session")
def service_hub(tmp_path_factory):
    """A real hub (its proxy too) with the managed gpulab service, the declared lab of
    ``ledger_support.LAB``, the people of ``service_support.PEOPLE`` and no spawner of gpulab's:
    one for the session, shared by every module whose tests leave its ledger as they found it
    (no device drained, no allocation open). A module that needs another config starts its own
    with ``service_support.running_service_hub``."""
    from service_support import running_service_hub

    with running_service_hub(tmp_path_factory.mktemp("service-hub")) as hub:
        yield hub


@pytest.fixture(scope="module")
def ledger(hub):
    """A ledger on the database of the module's own ``hub`` fixture (``service_support.ledger_for``:
    the database its config names, the service's too), closed after the module. A module whose
    hub keeps its ledger elsewhere defines its own ``ledger``."""
    from service_support import ledger_for

    ledger = ledger_for(hub)
    yield ledger
    ledger.close()


@pytest.fixture
def lab_left_empty(request):
    """After a test that used the module's ``hub`` (and ``ledger``): no server running, no slice
    held (``ledger_support.empty_lab``); a test without the hub is left alone. Use it as
    ``pytestmark = pytest.mark.usefixtures("lab_left_empty")``."""
    yield
    if "hub" not in request.fixturenames:
        return
    from ledger_support import empty_lab

    empty_lab(request.getfixturevalue("hub"), request.getfixturevalue("ledger"))


# -- a real browser (tests/browser_support.py) ------------------------------------------------


@pytest.fixture
def browser():
    """A headless chromium driven by Selenium (``browser_support.chromium``), quit after the
    test; skipped (outside CI) or failed (in CI) where none is installed. Mark the test
    ``browser``."""
    from browser_support import browser_problem, chromium
    from service_support import require_or_skip

    require_or_skip(browser_problem(), "A headless chromium")
    with chromium() as driver:
        yield driver


# -- what a selection needs: markers, the ``unit`` selection, and the guards that keep it honest -
#
# Each kind of outside part a test may need is a marker (pyproject.toml). A test carrying none is
# marked ``unit`` here: ``pytest -m unit`` runs in seconds with nothing set up. A test that starts
# a JupyterHub subprocess (with its proxy) is marked ``hub`` where it does not say so itself: the
# hub helpers it imports say it. ``scripts/test.sh`` asks ``pytest --gpulab-needs`` which of these
# the selection needs and sets up only those.

#: the markers of outside parts, in the order scripts/test-setup.sh sets them up
NEEDS = ("docker", "postgres", "hub", "browser", "swarm", "sso")
#: the test helpers that start a hub subprocess (a module that imports one starts hubs)
HUB_STARTERS = {
    "hubtools": {"Hub"},
    "service_support": {"make_hub", "start_hub", "running_service_hub"},
    "inprocess_support": {"inprocess_service_hub"},
    "e2e_support": {"new_hub", "DockerHub"},
    "course_support": {"course_hub", "running_course"},
    "swarm_support": {"new_swarm_hub", "SwarmHub"},
}
_HUB_FIXTURES = {"hub_factory", "hub_maker", "service_hub"}
_selected: dict[str, bool] = {}
#: the engines this session's tests used (the leak check at its end asks only those)
_ENGINES = pytest.StashKey[set]()


def pytest_addoption(parser):
    parser.addoption(
        "--gpulab-needs",
        action="store_true",
        help="print which outside parts the selected tests need (a comma-separated subset of "
        f"{','.join(NEEDS)}; 'none' for none) and run nothing (scripts/test.sh reads it)",
    )


def _starts_hubs(item) -> bool:
    if _HUB_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    module = getattr(item, "module", None)
    for obj in vars(module).values() if module else ():
        names = HUB_STARTERS.get(getattr(obj, "__module__", None), ())
        if getattr(obj, "__name__", None) in names:
            return True
    return False


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Before ``-m`` selects: mark hub-starting tests ``hub``, and tests needing nothing ``unit``
    (a ``docs`` test needs nothing outside either, but a Sphinx build takes seconds: not unit; a
    ``slow`` one, e.g. the term's small simulation, takes minutes: not unit either)."""
    for item in items:
        if not any(item.get_closest_marker(n) for n in NEEDS) and _starts_hubs(item):
            item.add_marker(pytest.mark.hub)
        if not any(item.get_closest_marker(n) for n in (*NEEDS, "docs", "slow")):
            item.add_marker(pytest.mark.unit)


def _needs_of(item) -> set[str]:
    return {n for n in NEEDS if item.get_closest_marker(n)}


def pytest_collection_finish(session):
    import e2e_support

    needs = set().union(*(_needs_of(i) for i in session.items)) if session.items else set()
    # teardown helpers skip their engine calls when no selected test needs an engine
    e2e_support.ENGINE_SELECTED = bool(needs & {"docker", "swarm"})
    if session.config.getoption("--gpulab-needs"):
        print("gpulab-needs=" + (",".join(n for n in NEEDS if n in needs) or "none"))
        session.items.clear()  # collect only


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before the test's fixtures: whether it is a ``unit`` test (the hub guard reads it), and
    which engines this session used: the leak check asks only those (a ``-m "not docker"`` run
    makes no engine call)."""
    _selected["unit"] = item.get_closest_marker("unit") is not None
    marks = {m.name for m in item.iter_markers()}
    used = item.session.config.stash.setdefault(_ENGINES, set())
    if marks & {"docker", "swarm"}:
        used.add("docker")
    if "swarm" in marks:
        used.add("swarm")


def pytest_sessionstart(session):
    """Guard: a ``unit`` test (or its fixture) that starts a hub fails, naming the marker it
    lacks, rather than passing here and failing where the selection set up no proxy."""
    import hubtools

    start = hubtools.Hub.start

    def guarded(self, *args, **kw):
        if _selected.get("unit"):
            pytest.fail(
                "this test starts a JupyterHub but is marked unit: mark it @pytest.mark.hub "
                "(or docker/swarm/sso where it needs those too)",
                pytrace=False,
            )
        return start(self, *args, **kw)

    hubtools.Hub.start = guarded


# -- nothing left behind: this session's containers, volumes and Swarm services (leakcheck.py) --


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

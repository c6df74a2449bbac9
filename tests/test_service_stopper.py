"""Stop a server, then close its allocations: one home (hubapi/stopper.py) for the admin's stop
and the culler's, with one set of background stops that the service lets finish at shutdown.

A real hub with real containers whose ``docker stop`` takes a few seconds, so the hub answers the
admin's stop with 202 (still stopping) and the closing goes on in the background.
"""

from __future__ import annotations

import pytest
from e2e_support import slow_stop_hub

from jupyterhub_gpulab.hubapi.client import HubClient
from jupyterhub_gpulab.lab.config import GPULab, load_config_file
from jupyterhub_gpulab.ledger import Ledger
from jupyterhub_gpulab.service import actions
from jupyterhub_gpulab.service.app import GPULabService
from jupyterhub_gpulab.service.culling import Culler
from jupyterhub_gpulab.service.state import LabState

pytestmark = pytest.mark.docker

#: jupyterhub-singleuser ignores SIGWINCH: `docker stop` waits its 3 s timeout, and the hub
#: answers a stop with 202 after 1 s.
SLOW_STOP = """
c.DockerSpawner.extra_create_kwargs = {"stop_signal": "SIGWINCH", "stop_timeout": 3}
c.JupyterHub.tornado_settings = {"slow_stop_timeout": 1}
"""


@pytest.fixture
def hub(tmp_path):
    with slow_stop_hub(tmp_path, SLOW_STOP) as h:
        yield h


async def test_an_admin_stop_still_in_flight_finishes_before_the_service_exits(hub):
    hub.create_user("ann", ["students"])
    assert hub.spawn("ann", {"profile": "mig"}).status_code in (201, 202)
    hub.wait_ready("ann")
    config = load_config_file(hub.config_path)
    ledger = Ledger(f"sqlite:///{hub.workdir}/gpulab.sqlite")
    client = HubClient(hub.url + "/hub/api/", hub.token)
    state = LabState(GPULab(config=config), ledger)
    culler = Culler(state, client, GPULabService(config=config))
    try:
        [held] = ledger.open_allocations("ann")

        message, done = await actions.stop_server(state, client, "ann", by="admin")
        assert (message, done) == ("Stopping ann's server…", False)
        assert client.active is None  # the admin's stop has not finished

        await culler.close()  # what the service awaits when it exits

        # the stop finished: its allocation is closed and the hub's servers were read again
        assert not ledger.get(held.id).open
        assert client.active is not None and ("ann", "") not in client.active
        assert hub.server("ann") is None
    finally:
        state.close()
        ledger.close()

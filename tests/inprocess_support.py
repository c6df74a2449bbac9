"""The gpulab service run in the test's own process behind a real hub that declares it unmanaged
(:class:`InProcessService`), so a test hands it a fake NVML and moves its clock; and such a hub,
started once the service it waits for has booted (:func:`inprocess_service_hub`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests
from e2e_support import remove_node_containers
from hubtools import Hub
from service_support import PREFIX, make_hub, start_hub

from jupyterhub_gpulab.lab.config import GPULab, load_config_file
from jupyterhub_gpulab.ledger import Ledger


class InProcessService:
    """The gpulab service run in this process (a thread with its own event loop) behind a real
    hub that declares it unmanaged (``start_hub(managed=False, api_token=…)``), so a test can
    hand it a fake NVML through its constructor and change that fake between requests."""

    def __init__(
        self, hub: Hub, api_token: str, *, nvml=None, ledger: Ledger | None = None, grants=None
    ):
        self.hub = hub
        self.api_token = api_token
        self.nvml = nvml
        self.ledger = ledger
        self.grants = grants  # who the service thinks holds which gpulab scope (default: config)
        self.loop = None
        self.service = None
        self._thread = None

    def _hub_auth(self):
        from jupyterhub.services.auth import HubOAuth

        return HubOAuth(
            api_url=f"http://127.0.0.1:{self.hub.hub_port}/hub/api",
            api_token=self.api_token,
            oauth_client_id="service-gpulab",
            base_url=PREFIX,
            hub_prefix="/hub/",
            oauth_redirect_uri=PREFIX + "oauth_callback",
            access_scopes={"access:services!service=gpulab"},
            cache_max_age=60,
        )

    def start(self, timeout: float = 30) -> InProcessService:
        import asyncio
        import threading

        from jupyterhub_gpulab.service.app import GPULabService, Service

        config = load_config_file(self.hub.config_path)
        ready = threading.Event()
        failure: list[BaseException] = []

        def run():
            self.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self.loop)

            async def boot():
                self.service = Service(
                    GPULab(config=config),
                    GPULabService(config=config),
                    hub_auth=self._hub_auth(),
                    ledger=self.ledger,
                    nvml=self.nvml,
                    grants=self.grants,
                )
                await self.service.start("127.0.0.1", self.hub.service_port)

            try:
                self.loop.run_until_complete(boot())
            except BaseException as e:  # reported to the test thread
                failure.append(e)
                ready.set()
                return
            ready.set()
            self.loop.run_forever()
            self.service.stop()
            self.loop.close()

        self._thread = threading.Thread(target=run, name="gpulab-service", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise TimeoutError("the in-process gpulab service did not start")
        if failure:
            raise failure[0]
        r = requests.get(
            f"http://127.0.0.1:{self.hub.service_port}{PREFIX}api/openapi.json", timeout=10
        )
        r.raise_for_status()
        return self

    def call(self, fn, timeout: float = 30):
        """Run ``fn()`` (a coroutine function) on the service's loop and return its result."""
        import asyncio

        return asyncio.run_coroutine_threadsafe(fn(), self.loop).result(timeout)

    def stop(self) -> None:
        if self.loop is not None and self._thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(30)
            self._thread = None


@contextmanager
def inprocess_service_hub(
    workdir: Path,
    token: str,
    *,
    extra: str,
    users: dict[str, list[str]],
    nvml=None,
    fakes: bool = False,
    proxy_url: bool = False,
    node: str | None = None,
) -> Iterator[Hub]:
    """A hub (:func:`service_support.make_hub`, ``extra`` its config lines) whose gpulab service
    is unmanaged with API token ``token``, started while an :class:`InProcessService` (``nvml``:
    its NVML) answers for the service, that service stopped once the hub is up; ``users``
    (``{name: groups}``) created besides the people of the matrix. ``fakes``: the hub runs
    ``hub_fakes`` (its clock file); ``proxy_url``: the service reaches servers through the hub's
    proxy. Stopped afterwards (also when it failed to start: its proxy may run), and the
    containers of node ``node`` removed."""
    import hub_fakes

    hub = make_hub(
        workdir,
        managed=False,
        api_token=token,
        extra=extra + (hub_fakes.config_snippet() if fakes else ""),
    )
    if fakes:
        hub.env[hub_fakes.ENV] = "1"
    if proxy_url:
        hub.extra_config += f'c.GPULabService.proxy_url = "{hub.url}"\n'
    hub.write_config()
    try:
        boot = InProcessService(hub, token, nvml=nvml).start()
        try:
            start_hub(hub.workdir, hub=hub)
        finally:
            boot.stop()
        for name, groups in users.items():
            hub.create_user(name, groups)
        yield hub
    finally:
        hub.stop()
        if node is not None:
            remove_node_containers(node)

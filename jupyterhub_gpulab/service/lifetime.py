"""How the service process lives beside the hub that started it: it leaves with that hub, and it
waits for a port a previous service still holds.

JupyterHub starts a managed service in a session of its own, so a hub killed with SIGKILL leaves
the service running on its port; the restarted hub's service would then die on "Address already
in use", and JupyterHub refuses to start when a managed service exits while it starts.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import threading
import time

log = logging.getLogger("gpulab.service")


def watch_hub(
    hub_pid: int,
    loop: asyncio.AbstractEventLoop,
    stop: asyncio.Event,
    *,
    every_s: float = 1.0,
    grace_s: float = 10.0,
) -> threading.Thread:
    """Set ``stop`` once the hub that started this process (pid ``hub_pid``, its parent) is
    gone: every ``every_s`` seconds a thread (a busy event loop cannot delay it) compares the
    parent pid with ``hub_pid``, which differs once the process was re-parented. A service still
    running ``grace_s`` seconds later exits at once."""

    def run() -> None:
        while os.getppid() == hub_pid:
            time.sleep(every_s)
        log.warning(
            "The hub (pid %d) that started this service is gone; stopping, so that the next "
            "hub's service can listen on this port",
            hub_pid,
        )
        loop.call_soon_threadsafe(stop.set)
        time.sleep(grace_s)
        log.error("The service did not stop within %g s of its hub; exiting", grace_s)
        os._exit(1)

    t = threading.Thread(target=run, name="gpulab-watch-hub", daemon=True)
    t.start()
    return t


async def listen_when_free(app, address: str, port: int, *, timeout_s: float, **kwargs):
    """``app.listen(port, address=address, **kwargs)`` (a Tornado application), waiting up to
    ``timeout_s`` seconds while another process holds the port; raises the ``OSError``
    (``EADDRINUSE``) after that, and any other at once."""
    deadline = time.monotonic() + timeout_s
    told = False
    while True:
        try:
            return app.listen(port, address=address, **kwargs)
        except OSError as e:
            if e.errno != errno.EADDRINUSE or time.monotonic() >= deadline:
                raise
            if not told:
                told = True
                log.warning(
                    "Port %d is in use (a gpulab service left by a hub that was killed?); "
                    "waiting up to %g s for it",
                    port,
                    timeout_s,
                )
            await asyncio.sleep(0.5)

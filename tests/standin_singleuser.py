"""A stand-in single-user server for hub tests that need running servers but no Jupyter: it
listens where the hub says (``$JUPYTERHUB_SERVICE_URL``), answers ``…/api/kernels`` with the
kernel models in ``$HOME/kernels.json`` (a test writes them there; none: ``[]``), ``…/api`` (the
hub's readiness check) with the version JSON and every other GET with ``[]``, always with
JupyterHub's ``X-JupyterHub-Version`` header, and exits on SIGINT or SIGTERM. It serves any
user's prefix: benchmarks/scale.py points every server of a hub at one of these.

The hub's ``SimpleLocalProcessSpawner`` runs it (``c.Spawner.cmd = [sys.executable, this]``).
Real single-user servers, in containers, run in the Docker end-to-end tests.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

from jupyterhub._version import __version__


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (the standard library's name)
        body = b"[]"
        path = urlparse(self.path).path.rstrip("/")
        kernels = Path(os.environ.get("HOME", "/nonexistent")) / "kernels.json"
        if path.endswith("/api/kernels") and kernels.is_file():
            body = kernels.read_bytes()
        elif path.endswith("/api"):
            body = b'{"version": "%s"}' % __version__.encode()
        self.send_response(200)
        self.send_header("X-JupyterHub-Version", __version__)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # a hub's storm checks every server at once (the default is 5)


def main() -> int:
    url = urlparse(os.environ["JUPYTERHUB_SERVICE_URL"])
    server = Server((url.hostname or "127.0.0.1", url.port or 8888), Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``gpulab node-agent``: report this node's GPUs and their use to the gpulab service, forever.

    gpulab node-agent --url https://hub.example.edu/services/gpulab/ --node gpu2 \\
        --token-file /etc/gpulab/node-token
    gpulab node-agent --help-all

Every ``interval`` seconds it reads NVML (:mod:`.report`) and posts the report to
``<url>api/nodes/<node>/report`` with ``Authorization: token <node token>`` (made on the hub host
with ``gpulab node-token <node>``, or by an admin through ``POST api/nodes/<node>/token``). A
node whose agent stops reporting leaves service after the service's ``node_timeout``; the next
report brings it back. A refused or failed report is logged (once per kind of failure) and tried
again at the next interval; the agent never exits on its own but for a bad setting.

Settings come from the command line, the environment (``GPULAB_SERVICE_URL``,
``GPULAB_NODE_NAME``, ``GPULAB_NODE_TOKEN`` or ``GPULAB_NODE_TOKEN_FILE``: what a Swarm
service or a systemd unit sets) or a config file (``--config``; ``c.NodeAgent.*``).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from traitlets import Bool, Unicode, default, validate
from traitlets.config import Application

from .._version import __version__
from ..lab.traits import Duration
from ..ledger.nodes import NODE_TOKEN_PREFIX
from .report import build_report

log = logging.getLogger("gpulab.agent")


class NodeAgent(Application):
    """The gpulab node agent (module docstring)."""

    name = "gpulab-node-agent"
    version = __version__
    description = """Report this node's GPUs (NVML) and their utilisation to the gpulab service,
    with the node's token. Run one on every GPU node of a lab of several nodes: a systemd unit or
    a Docker Swarm global service (docs: admin guide, "Many GPU servers")."""
    examples = """
    gpulab node-agent --url https://hub.example.edu/services/gpulab/ --node gpu2 --token-file /etc/gpulab/node-token
    """
    aliases = {
        "url": "NodeAgent.url",
        "node": "NodeAgent.node_name",
        "token-file": "NodeAgent.token_file",
        "interval": "NodeAgent.interval",
        ("f", "config"): "NodeAgent.config_file",
        "log-level": "Application.log_level",
    }
    flags = {
        "once": ({"NodeAgent": {"once": True}}, "Send one report, print the answer, and exit."),
        "debug": ({"Application": {"log_level": logging.DEBUG}}, "Log at DEBUG level."),
    }

    config_file = Unicode(
        "", config=True, help="A Python config file setting c.NodeAgent.* (optional)."
    )

    url = Unicode(
        config=True,
        help="""The gpulab service's URL as the hub's users reach it (through the hub's proxy),
        ending in ``/services/gpulab/``. Default: ``$GPULAB_SERVICE_URL``.
        ``--url https://hub.example.edu/services/gpulab/``""",
    )

    @default("url")
    def _default_url(self):
        return os.environ.get("GPULAB_SERVICE_URL", "")

    @validate("url")
    def _check_url(self, proposal):
        value = proposal.value
        if value and urlsplit(value).scheme not in ("http", "https"):
            raise ValueError(
                f"c.NodeAgent.url {value!r} must be an http(s) URL such as "
                "https://hub.example.edu/services/gpulab/"
            )
        return value if not value or value.endswith("/") else value + "/"

    node_name = Unicode(
        config=True,
        help="""This node's name in the lab: the Swarm node's hostname (what the Swarm backend
        pins tasks by), unless the node carries the label ``org.jupyter.gpulab.node``. Default:
        ``$GPULAB_NODE_NAME``, else this host's name. ``--node gpu2``""",
    )

    @default("node_name")
    def _default_node_name(self):
        return os.environ.get("GPULAB_NODE_NAME") or socket.gethostname()

    token_file = Unicode(
        config=True,
        help="""A file holding this node's token (one line; ``gpulab node-token <node>`` on the
        hub host prints one). Default: ``$GPULAB_NODE_TOKEN_FILE``; ``$GPULAB_NODE_TOKEN`` holds
        the token itself where no file is given. ``--token-file /etc/gpulab/node-token``""",
    )

    @default("token_file")
    def _default_token_file(self):
        return os.environ.get("GPULAB_NODE_TOKEN_FILE", "")

    interval = Duration(
        10,
        positive=True,
        config=True,
        help="""Seconds between reports; the service marks a node unreachable after its own
        ``c.GPULabService.node_timeout`` (default 60) without one. ``--interval 10``""",
    )

    request_timeout = Duration(
        10, positive=True, config=True, help="Seconds one report may take before it fails."
    )

    once = Bool(False, config=True, help="Send one report and exit (``--once``).")

    #: the NVML module to read (tests hand in a fake); None: the installed nvidia-ml-py
    nvml: Any = None

    def initialize(self, argv: list[str] | None = None) -> None:
        self.parse_command_line(argv)
        if self.config_file:
            self.load_config_file(self.config_file)
        logging.basicConfig(
            level=self.log_level,
            format="[%(levelname).1s %(asctime)s %(name)s] %(message)s",
            stream=sys.stderr,
        )
        if not self.url:
            raise SystemExit(
                "gpulab node-agent: no service URL; pass --url https://hub.example.edu/services/"
                "gpulab/ (or set GPULAB_SERVICE_URL)"
            )
        self._token = self.read_token()
        self._stop = threading.Event()
        self._last_problem: str | None = None

    def read_token(self) -> str:
        """The node's token, from the file or ``$GPULAB_NODE_TOKEN``; exits saying what is wrong."""
        if self.token_file:
            try:
                token = Path(self.token_file).read_text().strip()
            except OSError as e:
                raise SystemExit(f"gpulab node-agent: cannot read the token file: {e}") from None
        else:
            token = os.environ.get("GPULAB_NODE_TOKEN", "").strip()
        if not token.startswith(NODE_TOKEN_PREFIX):
            raise SystemExit(
                "gpulab node-agent: no node token (it starts with "
                f"{NODE_TOKEN_PREFIX!r}); make one on the hub host with `gpulab node-token "
                f"{self.node_name} -f jupyterhub_config.py` and pass --token-file"
            )
        return token

    @property
    def report_url(self) -> str:
        return f"{self.url}api/nodes/{quote(self.node_name, safe='')}/report"

    def send(self) -> dict:
        """Read this host and post one report; returns the service's answer (JSON). Raises
        ``urllib.error.URLError`` (``HTTPError`` for a refusal) or ``OSError``."""
        body = json.dumps(build_report(self.node_name, self.interval, self.nvml)).encode()
        req = urllib.request.Request(
            self.report_url,
            data=body,
            method="POST",
            headers={
                "Authorization": f"token {self._token}",
                "Content-Type": "application/json",
                "User-Agent": f"gpulab-node-agent/{__version__}",
            },
        )
        with urllib.request.urlopen(req, timeout=self.request_timeout) as resp:
            return json.loads(resp.read() or b"{}")

    def report_once(self) -> bool:
        """One report; logs the outcome (a repeated failure once). Returns whether it was taken."""
        try:
            answer = self.send()
        except urllib.error.HTTPError as e:
            try:
                message = json.loads(e.read()).get("message", "")
            except (ValueError, OSError, AttributeError):
                message = ""
            self._problem(f"the service refused the report: HTTP {e.code} {message}".strip())
            return False
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", e)
            self._problem(f"cannot reach the service at {self.url}: {reason}")
            return False
        if self._last_problem is not None:
            log.info("gpulab node-agent: reporting again (%s)", answer.get("message", "ok"))
        elif self.once:
            print(json.dumps(answer, indent=2))
        else:
            log.debug("report taken: %s", answer.get("message"))
        self._last_problem = None
        return True

    def _problem(self, text: str) -> None:
        if text != self._last_problem:
            log.error("gpulab node-agent (node %s): %s", self.node_name, text)
        self._last_problem = text

    def start(self) -> None:
        log.info(
            "gpulab node-agent %s: node %s reports to %s every %g s",
            __version__,
            self.node_name,
            self.report_url,
            self.interval,
        )
        if self.once:
            raise SystemExit(0 if self.report_once() else 1)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self._stop.set())
        while not self._stop.is_set():
            self.report_once()
            self._stop.wait(self.interval)
        log.info("gpulab node-agent: stopped")


def main(argv: list[str] | None = None, nvml: Any = None) -> None:
    """Run the agent (``nvml``: a pynvml stand-in, for tests)."""
    app = NodeAgent()
    app.nvml = nvml
    app.initialize(argv)
    app.start()


if __name__ == "__main__":
    main()

"""Run a real JupyterHub (with its real proxy) as a subprocess for end-to-end tests.

``Hub(workdir, extra_config)`` writes a ``jupyterhub_config.py`` (a base that makes containers reach
the hub through the docker0 gateway, a DummyAuthenticator, a service token with admin scopes,
then ``extra_config``), starts ``jupyterhub`` and waits for its API. ``hub.api(...)`` talks to the
REST API with the service token; ``hub.stop()`` sends SIGTERM and waits for the process (DockerSpawner
removes containers one by one on shutdown); ``hub.kill()`` sends SIGKILL to the hub alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import requests

# A line of a test polling the hub (``200 GET … (tests@…)``) or the proxy's periodic route check.
_POLL_LINE = re.compile(r" 200 (GET|HEAD) \S+ \(tests@| GET /api/routes")

DOCKER_GATEWAY = "172.17.0.1"


#: ports this process has handed out (a hub binds them only when it starts)
_GIVEN: set[int] = set()


def _ephemeral_low() -> int:
    """The lowest port the kernel picks for outgoing connections (32768 on Debian)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port free now on every address, below the kernel's ephemeral range and never handed
    out before in this process.

    Port 0 gave an ephemeral port, which the kernel may hand to any outgoing connection (a
    test's HTTP client, the Docker client) before the hub binds it: CI at e334bc7 failed one SSO
    test with the hub's "Address already in use" on 58393."""
    low = 20000
    high = max(low + 1000, _ephemeral_low() - 1)
    rng = secrets.SystemRandom()
    for _ in range(500):
        port = rng.randint(low, high)
        if port in _GIVEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
        _GIVEN.add(port)
        return port
    raise RuntimeError(f"no free port between {low} and {high}")


BASE_CONFIG = """
c = get_config()  # noqa
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "0.0.0.0"
c.JupyterHub.hub_port = {hub_port}
c.JupyterHub.hub_connect_ip = "{gateway}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.JupyterHub.db_url = "sqlite:///{workdir}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{workdir}/jupyterhub_cookie_secret"
c.ConfigurableHTTPProxy.pid_file = "{workdir}/proxy.pid"
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.JupyterHub.last_activity_interval = 5
c.JupyterHub.services = [{{"name": "tests", "api_token": "{token}"}}]
c.JupyterHub.load_roles = [
    {{
        "name": "tests",
        "services": ["tests"],
        "scopes": ["admin:users", "admin:servers", "admin:server_state", "access:servers",
                   "list:users", "read:users", "admin:groups", "read:groups"],
    }}
]
c.JupyterHub.allow_named_servers = True
c.JupyterHub.named_server_limit_per_user = 5
c.GPULab.db_url = "sqlite:///{workdir}/gpulab.sqlite"
"""

#: Appended only while the suite runs at a chosen moment (docs: developing, "The suite at a chosen
#: moment"): JupyterHub starts a managed service with a short environment of its own, so without
#: these lines the gpulab service would read the real clock while the test and the hub read
#: libfaketime's.
FAKETIME_CONFIG = """
import os as _os
_faketime = {k: v for k, v in _os.environ.items() if k == "LD_PRELOAD" or k.startswith("FAKETIME")}
for _service in c.JupyterHub.services:
    if "command" in _service:
        _service["environment"] = {**_service.get("environment", {}), **_faketime}
"""


class Hub:
    """A JupyterHub subprocess in ``workdir``; see the module docstring."""

    def __init__(
        self,
        workdir: Path,
        extra_config: str = "",
        *,
        log_name: str = "hub.log",
        env: dict[str, str] | None = None,
        gateway: str = DOCKER_GATEWAY,
    ):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.hub_port = free_port()
        self.proxy_api_port = free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_config = extra_config
        self.env = env or {}
        self.gateway = gateway
        self.log_path = self.workdir / log_name
        self.proc: subprocess.Popen | None = None
        self._log = None

    @property
    def config_path(self) -> Path:
        return self.workdir / "jupyterhub_config.py"

    def write_config(self) -> None:
        base = BASE_CONFIG.format(
            port=self.port,
            hub_port=self.hub_port,
            proxy_api_port=self.proxy_api_port,
            gateway=self.gateway,
            workdir=self.workdir,
            token=self.token,
        )
        tail = FAKETIME_CONFIG if "FAKETIME" in os.environ else ""
        self.config_path.write_text(base + "\n" + textwrap.dedent(self.extra_config) + tail)

    def start(self, timeout: float = 60) -> Hub:
        self.write_config()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop())
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(self.config_path)],
            cwd=self.workdir,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"jupyterhub exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            try:
                if requests.get(self.url + "/hub/api/", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"jupyterhub did not answer within {timeout}s:\n{self.log_tail()}")

    def log_tail(self, n: int = 60, skip_polls: bool = False) -> str:
        """The log's last ``n`` lines; with ``skip_polls``, the last ``n`` that are not a test's
        own polling (a 200 to ``tests@`` or the proxy's route check), so a failed wait shows what
        the hub did rather than forty lines of the test asking."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        if skip_polls:
            lines = [ln for ln in lines if not _POLL_LINE.search(ln)]
        return "\n".join(lines[-n:])

    def stop(self, timeout: float = 120) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        # the proxy is started in its own process; make sure ours is gone
        pid_file = self.workdir / "proxy.pid"
        if pid_file.exists():
            with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
                os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
        if self._log:
            self._log.close()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL the hub process alone, as a crash or the OOM killer would: its proxy, its
        managed services and its containers keep running. ``start()`` starts a new hub on the
        same ports, database and proxy pid file."""
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.proc = None
        if self._log:
            self._log.close()

    # -- REST API ---------------------------------------------------------------------------

    def api(self, method: str, path: str, **kw) -> requests.Response:
        headers = kw.pop("headers", {})
        headers.setdefault("Authorization", f"token {self.token}")
        kw.setdefault("timeout", 60)
        return requests.request(method, f"{self.url}/hub/api{path}", headers=headers, **kw)

    def create_user(self, name: str, groups: list[str] | None = None, admin: bool = False) -> None:
        r = self.api("POST", f"/users/{name}", json={"admin": admin})
        assert r.status_code in (201, 409), r.text
        for g in groups or []:
            r = self.api("POST", f"/groups/{g}")
            assert r.status_code in (201, 409), r.text
            r = self.api("POST", f"/groups/{g}/users", json={"users": [name]})
            assert r.status_code == 200, r.text

    def server_path(self, user: str, name: str = "") -> str:
        return f"/users/{user}/servers/{name}" if name else f"/users/{user}/server"

    def spawn(self, user: str, options: dict | None = None, name: str = "") -> requests.Response:
        return self.api("POST", self.server_path(user, name), json=options or {})

    def user_model(self, user: str) -> dict:
        r = self.api("GET", f"/users/{user}")
        r.raise_for_status()
        return r.json()

    def server(self, user: str, name: str = "") -> dict | None:
        return self.user_model(user).get("servers", {}).get(name)

    def spawn_ready(
        self, user: str, options: dict | None = None, name: str = "", timeout: float = 90
    ) -> dict:
        """Start ``user``'s server ``name`` with ``options`` (the hub must accept it: 201 or
        202) and wait until it is ready: its server model (:meth:`wait_ready`)."""
        r = self.spawn(user, options, name=name)
        assert r.status_code in (201, 202), r.text
        return self.wait_ready(user, name, timeout=timeout)

    def stop_all_servers(self, users=None) -> None:
        """Stop every server of ``users`` (default: every user the hub lists), one at a time
        (:meth:`stop_server`)."""
        for u in self.api("GET", "/users").json():
            if users is None or u["name"] in users:
                for name in list(u.get("servers") or {}):
                    self.stop_server(u["name"], name)

    def wait_ready(self, user: str, name: str = "", timeout: float = 90) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.server(user, name)
            if s and s.get("ready"):
                return s
            if s is None and time.monotonic() > deadline - timeout + 2:
                # a failed spawn leaves no server
                raise RuntimeError(f"{user}/{name} has no server:\n{self.log_tail()}")
            time.sleep(0.3)
        raise TimeoutError(f"{user}/{name} not ready in {timeout}s:\n{self.log_tail()}")

    def stop_server(self, user: str, name: str = "", timeout: float = 60) -> None:
        r = self.api("DELETE", self.server_path(user, name))
        assert r.status_code in (202, 204), r.text
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.server(user, name) is None:
                return
            time.sleep(0.3)
        raise TimeoutError(f"{user}/{name} did not stop in {timeout}s")


def wait_for(what: str, check, timeout: float = 60, hub: Hub | None = None, every: float = 0.25):
    """``check()``'s first truthy result, tried every ``every`` seconds; AssertionError naming
    ``what`` (with the last 40 lines of ``hub``'s log, when given) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every)
    tail = f":\n{hub.log_tail(60, skip_polls=True)}" if hub else ""
    raise AssertionError(f"{what} within {timeout}s{tail}")


def docker_available() -> str | None:
    """``None`` when a Docker engine answers, else the reason it does not."""
    if shutil.which("docker") is None:
        return "the docker CLI is not installed (scripts/ensure-docker.sh installs it)"
    r = subprocess.run(
        ["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True
    )
    if r.returncode != 0:
        return f"no Docker engine answers: {r.stderr.strip()[:200]} (scripts/ensure-docker.sh starts one)"
    return None


def _keep_work_folders() -> bool:
    return os.environ.get("GPULAB_BENCH_KEEP", "").lower() not in ("", "0", "false", "no")


def make_work_folder(prefix: str) -> Path:
    """A fresh work folder for a benchmark's hubs (their configs, logs and ledgers) under the
    system's temporary folder, named on stderr: a run that fails or is stopped keeps it, and its
    hubs' logs are what explain the failure. :func:`remove_work_folder` ends it."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    kept = "kept" if _keep_work_folders() else "removed once the result is printed"
    print(f"work folder: {path} ({kept}; GPULAB_BENCH_KEEP=1 keeps it)", file=sys.stderr)
    return path


def remove_work_folder(path: Path) -> None:
    """Remove a benchmark's work folder (:func:`make_work_folder`) once its result is made, before
    it is printed (the last line stays the result): a run of ``scale.py`` leaves ~40 MB. Kept when
    ``GPULAB_BENCH_KEEP`` is set (not ``0``, ``false``, ``no``). A part that cannot be removed is
    named on stderr."""
    if _keep_work_folders():
        return
    shutil.rmtree(
        path, onerror=lambda _f, p, e: print(f"not removed: {p}: {e[1]}", file=sys.stderr)
    )

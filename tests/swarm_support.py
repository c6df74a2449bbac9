"""A real hub running GPUSwarmSpawner on the real three-node Swarm of ``scripts/ensure-swarm.sh``.

The Swarm (made by the test setup): ``gpulab-swn1`` (manager, CPU only), ``gpulab-swn2`` and
``gpulab-swn3`` (workers whose default runtime is the NVIDIA stand-in, which logs what each
container was given), each a dockerd in network namespaces of its own, on 10.213.0.0/24; the
host (where the hub runs) is 10.213.0.1 there.

:class:`SwarmHub` is a ``hubtools.Hub`` that also runs the gpulab service (node agents report to
it) and one real node agent per GPU node, inside that node's network namespace, over a fake NVML
(``agent_fakes.py``: the e2e lab of ``e2e_support.LAB``, its A100 on swn2, its T4 and A40 on
swn3). It offers what ``e2e_support.DockerHub`` offers about a server's object, in Swarm's terms,
so a test written once runs on both backends (the ``backend`` fixture, conftest.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from e2e_support import IMAGE, LAB, PROFILES
from hubtools import Hub, free_port
from leakcheck import unique

from jupyterhub_gpulab.ledger import Ledger

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
MANAGER = os.environ.get("GPULAB_SWARM_MANAGER", "unix:///var/run/gpulab-swarm/n1.sock")
HOST_IP = os.environ.get("GPULAB_SWARM_HOST_IP", "10.213.0.1")
NODES = os.environ.get("GPULAB_SWARM_NODES", "gpulab-swn1,gpulab-swn2,gpulab-swn3").split(",")
GPU_NODES = os.environ.get("GPULAB_SWARM_GPU_NODES", "gpulab-swn2,gpulab-swn3").split(",")
ENGINES = dict(
    kv.split("=", 1)
    for kv in os.environ.get(
        "GPULAB_SWARM_ENGINES",
        ",".join(f"{n}=unix:///var/run/gpulab-swarm/n{n[-1]}.sock" for n in NODES),
    ).split(",")
)
#: the fake boards each GPU node's agent reports (agent_fakes.BOARDS)
BOARDS = {"gpulab-swn2": "a100", "gpulab-swn3": "t4+a40"}
#: where each GPU node's NVIDIA runtime stand-in logs what its containers got
HOOK_LOGS = {n: f"/var/log/gpulab-swarm/n{n[-1]}-hook.jsonl" for n in NODES}
SHARED = {
    "GPU-e2e0f400-0000-4000-8000-000000000001": {
        "seats": 5,
        "memory_per_seat": "3GiB",
        "compute_share": 0.2,
    }
}
#: which node holds each of LAB's GPUs
GPU_NODE = {
    "GPU-e2e0a100-0000-4000-8000-000000000000": "gpulab-swn2",
    "GPU-e2e0f400-0000-4000-8000-000000000001": "gpulab-swn3",
    "GPU-e2e0a400-0000-4000-8000-000000000002": "gpulab-swn3",
}


def sdocker(*args, engine: str = MANAGER, check: bool = True, timeout: float = 60):
    """The docker CLI against a Swarm engine (the manager by default, or a node's)."""
    return subprocess.run(
        ["docker", *args],
        capture_output=True,
        text=True,
        check=check,
        timeout=timeout,
        env=dict(os.environ, DOCKER_HOST=engine),
    )


def swarm_problem() -> str | None:
    """``None`` when the test Swarm is up with every node Ready, else why not."""
    try:
        r = sdocker("node", "ls", "--format", "{{.Hostname}} {{.Status}}", check=False, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"the Swarm manager does not answer: {e}"
    if r.returncode != 0:
        return (
            f"no Swarm at {MANAGER}: {r.stderr.strip()[:200]} (scripts/ensure-swarm.sh makes one)"
        )
    ready = {line.split()[0] for line in r.stdout.splitlines() if line.endswith(" Ready")}
    missing = sorted(set(NODES) - ready)
    return f"Swarm nodes not Ready: {missing}" if missing else None


def require_swarm() -> None:
    reason = swarm_problem()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Swarm tests: {reason}")
        pytest.skip(reason)


def revive_swarm() -> None:
    """Start any engine a test stopped again, and wait until every node is Ready."""
    r = subprocess.run(
        [str(REPO / "scripts" / "ensure-swarm.sh"), IMAGE], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr


def swarm_config(prefix: str, service_port: int, workdir: Path, extra: str = "") -> str:
    return f"""
from jupyterhub_gpulab.hub.hubconfig import configure_service
c.JupyterHub.ip = {HOST_IP!r}
c.JupyterHub.spawner_class = "gpulab-swarm"
c.DockerSpawner.image = {IMAGE!r}
c.DockerSpawner.prefix = {prefix!r}
c.Spawner.poll_interval = 2
c.Spawner.start_timeout = 90
c.Spawner.http_timeout = 60
c.GPUSwarmSpawner.reconcile_interval = 5
c.GPULab.node_name = {prefix!r}
c.GPULab.inventory_source = "agents"
c.GPULab.shared_devices = {SHARED!r}
c.GPULab.profiles = {PROFILES!r}
c.GPULab.group_policies = {{
    "students": {{"profiles": ["mig", "seat", "cpu"], "max_slices_per_user": 1}},
    "researchers": {{"max_slices_per_user": 3}},
}}
c.GPULab.default_policy = {{"max_slices_per_user": 1}}
c.Authenticator.admin_users = {{"admin"}}
c.GPULabService.cookie_secret_file = "{workdir}/gpulab_cookie_secret"
c.GPULabService.sample_interval = 2
c.GPULabService.hub_poll_interval = 2
c.GPULabService.node_timeout = "6s"
c.GPULabService.node_check_every = 1
configure_service(c, config_file=__file__, url="http://127.0.0.1:{service_port}")
{extra}
"""


class SwarmHub(Hub):
    """A hub on the test Swarm, with the gpulab service and a node agent per GPU node (module
    docstring). ``start()`` starts the hub (and, the first time, the agents) and waits until
    every GPU node has reported; ``close()`` stops everything and removes the lab's services."""

    backend = "swarm"

    def __init__(self, workdir: Path, extra: str = "", boards: dict[str, str] | None = None):
        self.prefix = unique("sw")
        self.boards = {**BOARDS, **(boards or {})}
        self.service_port = free_port()
        workdir = Path(workdir) / self.prefix
        super().__init__(
            workdir,
            swarm_config(self.prefix, self.service_port, workdir, extra),
            env={"DOCKER_HOST": MANAGER},
            gateway=HOST_IP,
        )
        self.url = f"http://{HOST_IP}:{self.port}"
        self.agents: dict[str, subprocess.Popen] = {}

    @property
    def node(self) -> str:
        return self.prefix

    def ledger(self) -> Ledger:
        return Ledger(f"sqlite:///{self.workdir}/gpulab.sqlite")

    # -- the hub, the service, the agents ---------------------------------------------------

    def start(self, timeout: float = 60) -> SwarmHub:
        super().start(timeout)
        from service_support import wait_for_service

        wait_for_service(self)
        for node in GPU_NODES:
            if node not in self.agents or self.agents[node].poll() is not None:
                self.start_agent(node)
        self.wait_reported(GPU_NODES)
        return self

    def token_file(self, node: str) -> Path:
        path = self.workdir / f"{node}.token"
        if not path.exists():
            r = subprocess.run(
                [sys.executable, "-m", "jupyterhub_gpulab.cli", "node-token", node,
                 "-f", str(self.config_path)],
                capture_output=True, text=True, cwd=self.workdir,
            )  # fmt: skip
            assert r.returncode == 0, r.stderr
            path.write_text(r.stdout.strip() + "\n")
            path.chmod(0o600)
        return path

    def start_agent(self, node: str, boards: str | None = None) -> subprocess.Popen:
        """The node's agent, in the node's network namespace (it reaches the hub's proxy over
        the nodes' network, as on a real GPU server), over its fake boards."""
        log = open(self.workdir / f"agent-{node}.log", "ab")  # noqa: SIM115 (the process owns it)
        proc = subprocess.Popen(
            [
                "nsenter", f"--net=/run/netns/{node}",
                sys.executable, str(TESTS / "agent_fakes.py"), boards or self.boards[node], "--",
                "--url", f"{self.url}/services/gpulab/", "--node", node,
                "--token-file", str(self.token_file(node)), "--interval", "1",
            ],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )  # fmt: skip
        self.agents[node] = proc
        return proc

    def stop_agent(self, node: str, sig=signal.SIGKILL) -> None:
        proc = self.agents.pop(node, None)
        if proc is not None and proc.poll() is None:
            proc.send_signal(sig)
            proc.wait(10)

    def wait_reported(self, nodes, timeout: float = 60) -> None:
        led = self.ledger()
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                seen = {n.name: n for n in led.nodes()}
                if all(n in seen and seen[n].agent_seen_at and seen[n].available for n in nodes):
                    return
                time.sleep(0.25)
        finally:
            led.close()
        logs = "\n".join(
            (self.workdir / f"agent-{n}.log").read_text(errors="replace")[-2000:] for n in nodes
        )
        raise TimeoutError(f"nodes {nodes} did not report within {timeout}s:\n{logs}")

    def close(self) -> None:
        self.stop()
        for node in list(self.agents):
            self.stop_agent(node, signal.SIGTERM)
        ids = self.object_ids()
        if ids:
            sdocker("service", "rm", *ids, check=False)

    # -- what tests ask of a server's service -----------------------------------------------

    def service(self, name: str) -> dict:
        return json.loads(sdocker("service", "inspect", name).stdout)[0]

    def task(self, name: str) -> dict:
        """The service's current task (``docker service ps``'s newest), with ``"node"``: the
        node's hostname."""
        from jupyterhub_gpulab.spawner.swarmtasks import current_task

        rows = json.loads(
            sdocker("inspect", *sdocker("service", "ps", "-q", name).stdout.split()).stdout
        )
        task = dict(current_task(rows))
        node = json.loads(sdocker("node", "inspect", task["NodeID"]).stdout)[0]
        task["node"] = node["Description"]["Hostname"]
        return task

    def env_of(self, name: str) -> dict[str, str]:
        env = self.service(name)["Spec"]["TaskTemplate"]["ContainerSpec"]["Env"]
        return dict(line.split("=", 1) for line in env)

    def labels_of(self, name: str) -> dict[str, str]:
        return self.service(name)["Spec"]["Labels"]

    def limits_of(self, name: str) -> tuple[int, int]:
        limits = self.service(name)["Spec"]["TaskTemplate"]["Resources"]["Limits"]
        return limits["MemoryBytes"], limits["NanoCPUs"]

    def object_ids(self) -> list[str]:
        out = sdocker("service", "ls", "-q", "--filter", f"name={self.prefix}-").stdout
        return out.split()

    def container(self, name: str) -> tuple[str, str]:
        """``(node, container id)`` of the service's running task."""
        task = self.task(name)
        return task["node"], task["Status"]["ContainerStatus"]["ContainerID"]

    def kill_object(self, name: str) -> None:
        """Kill the server's container on its node (the process dies; Swarm sees it fail)."""
        node, cid = self.container(name)
        sdocker("kill", cid, engine=ENGINES[node])

    def remove_object(self, name: str) -> None:
        sdocker("service", "rm", name)

    def declare_inventory(self, ledger) -> None:
        """Nothing: the nodes' agents reported the lab's inventory at start."""


def process_env(node: str, container_id: str) -> dict[str, str]:
    """A task container's PID 1 environment, on its node."""
    out = sdocker("exec", container_id, "cat", "/proc/1/environ", engine=ENGINES[node]).stdout
    return dict(kv.split("=", 1) for kv in out.split("\0") if "=" in kv)


def hook_records(node: str) -> dict[str, dict]:
    """What the NVIDIA runtime stand-in on ``node`` saw, by container id."""
    found = {}
    try:
        for line in Path(HOOK_LOGS[node]).read_text().splitlines():
            rec = json.loads(line)
            found[rec["container_id"]] = rec
    except FileNotFoundError:
        pass
    return found


def new_swarm_hub(tmp_path: Path, extra: str = "", **_docker_only) -> SwarmHub:
    """``hub_maker`` for the Swarm backend (``attach_mode`` and such are the Docker backend's)."""
    require_swarm()
    return SwarmHub(tmp_path, extra=extra)


__all__ = ["LAB", "SwarmHub", "hook_records", "new_swarm_hub", "process_env", "require_swarm"]

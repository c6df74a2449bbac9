"""Node agents and the service, on a real hub with the real managed service (no Swarm needed):
what a node token may do and what it may not, what a report changes in the ledger, the agent's
own command line (``gpulab node-agent``) against it, and an admin's node actions. Every response
of the API is checked against its OpenAPI document."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from service_support import (
    PREFIX,
    login,
    running_service_hub,
    user_token,
)

from jupyterhub_gpulab.agent.report import build_report
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest

pytestmark = pytest.mark.usefixtures("api_contract")

TESTS = Path(__file__).resolve().parent
SHARED = 'c.GPULab.shared_devices = {"GPU-e2e0f400-0000-4000-8000-000000000001": {"seats": 5, "memory_per_seat": "3GiB", "compute_share": 0.2}}\n'


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with running_service_hub(tmp_path_factory.mktemp("nodes-hub"), extra=SHARED) as hub:
        for who in ("admin", "instructor"):
            hub.tokens = getattr(hub, "tokens", {})
            hub.tokens[who] = user_token(hub, login(hub, who), who)
        yield hub


def report_of(boards: str, node: str) -> dict:
    from agent_fakes import BOARDS
    from fake_nvml import FakeNVML

    return build_report(node, 1, FakeNVML(BOARDS[boards]()))


def post(hub, node, body, token, raw: bytes | None = None):
    return requests.post(
        f"{hub.url}{PREFIX}api/nodes/{node}/report",
        data=raw if raw is not None else json.dumps(body),
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
        timeout=30,
    )


def test_a_report_puts_the_nodes_gpus_in_the_ledger_split_as_the_lab_says(hub, ledger):
    token = ledger.issue_node_token("gpu7")
    r = post(hub, "gpu7", report_of("t4+a40", "gpu7"), token)
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "in-service" and r.json()["slices"] == 6
    mine = {s["id"]: s for s in ledger.slices() if s["node"] == "gpu7"}
    assert set(mine) == {"GPU-e2e0a400-0000-4000-8000-000000000002"} | {
        f"GPU-e2e0f400-0000-4000-8000-000000000001/seat-{i}" for i in range(5)
    }
    assert all(s["available"] for s in mine.values())
    assert ledger.node("gpu7").agent_seen_at is not None
    # the host's driver reaches the ledger, for the image gate (fake_nvml's 580.95.05)
    a40 = next(
        d for d in ledger.devices() if d["uuid"] == "GPU-e2e0a400-0000-4000-8000-000000000002"
    )
    assert a40["driver_version"] == "580.95.05"
    assert (
        mine["GPU-e2e0a400-0000-4000-8000-000000000002"]["cc_key"] == 86
        and mine["GPU-e2e0f400-0000-4000-8000-000000000001/seat-0"]["cc_key"] == 75
    )
    # and a claim may take one (the slice's node is the allocation's)
    got = ledger.claim(
        SliceRequest(kind=SliceKind.GPU),
        user="zed",
        profile="a40",
        only_slice="GPU-e2e0a400-0000-4000-8000-000000000002",
    )
    assert got.allocation.node == "gpu7"
    ledger.release(got.allocation.id, "stopped")


def test_a_node_token_reports_for_its_own_node_only(hub, ledger):
    token = ledger.issue_node_token("gpu8")
    body = report_of("a100", "gpu8")
    r = post(hub, "gpu9", body, token)
    assert r.status_code == 403 and "gpu8's, not 'gpu9'" in r.json()["message"]
    assert ledger.node("gpu9") is None  # nothing recorded
    # a hub token, even an admin's, is not a node token; no token is nobody
    assert post(hub, "gpu8", body, hub.tokens["admin"]).status_code == 403
    assert post(hub, "gpu8", body, "").status_code == 403
    assert post(hub, "gpu8", body, "gpulabnode_guessed").status_code == 403
    # a revoked token is refused from then on
    assert post(hub, "gpu8", body, token).status_code == 200
    ledger.revoke_node_token("gpu8")
    assert post(hub, "gpu8", body, token).status_code == 403


def gpu_uuid_as(spell):
    """A change of a report: its first GPU's UUID spelt by ``spell`` wherever it appears (its MIG
    devices' parent, its utilisation), as an agent that wrote it another way would send it."""

    def change(body: dict) -> None:
        uuid = body["devices"][0]["uuid"]
        text = json.dumps(body).replace(json.dumps(uuid)[1:-1], json.dumps(spell(uuid))[1:-1])
        body.update(json.loads(text))

    return change


@pytest.mark.parametrize(
    "change, expect",
    [
        pytest.param(lambda b: b.pop("devices"), "'devices' is a required property", id="missing"),
        pytest.param(lambda b: b.update(extra=1), "Unknown field 'extra'", id="unknown field"),
        pytest.param(
            lambda b: b["devices"][0].update(memory_bytes=-1), "devices/0/memory_bytes", id="negative"
        ),
        pytest.param(
            lambda b: b.update(devices=b["devices"] * 65), "devices", id="too many devices"
        ),
        pytest.param(
            lambda b: b["mig"][0].update(device_uuid="GPU-00000000-0000-4000-8000-000000000bad"),
            "not a reported GPU in MIG mode",
            id="orphan MIG",
        ),
        # integers past any column (2**63 overflowed SQLite's: a 500), and NaN (no bound holds)
        pytest.param(lambda b: b.update(memory_bytes=2**63), "memory_bytes: 9223372036854775808 is greater than the maximum", id="host memory 2**63"),
        pytest.param(lambda b: b.update(cpus=2**63), "cpus: 9223372036854775808 is greater", id="cpus 2**63"),
        pytest.param(lambda b: b["devices"][0].update(memory_bytes=2**63), "devices/0/memory_bytes: 9223372036854775808 is greater", id="GPU memory 2**63"),
        pytest.param(lambda b: b["mig"][0].update(rank=2**63), "mig/0/rank: 9223372036854775808 is greater", id="MIG rank 2**63"),
        pytest.param(lambda b: b.update(interval_s=float("nan")), "NaN is not a number JSON has", id="interval NaN"),
        pytest.param(lambda b: b.update(interval_s=float("inf")), "Infinity is not a number JSON has", id="interval infinite"),
        # one GPU written another way would be a second device: only NVML's exact form is taken
        pytest.param(gpu_uuid_as(str.lower), "devices/0/uuid: 'gpu-e2e0a100-0000-4000-8000-000000000000' is not a UUID as NVML prints it", id="lower-case UUID"),
        pytest.param(gpu_uuid_as(lambda u: f" {u} "), "devices/0/uuid: ' GPU-e2e0a100", id="UUID with spaces"),
        pytest.param(gpu_uuid_as(lambda u: u[:12] + "\u2010" + u[13:]), "devices/0/uuid: 'GPU-e2e0a100\u20100000", id="UUID with U+2010"),
        pytest.param(gpu_uuid_as(lambda u: u + "\n"), "devices/0/uuid", id="UUID and a newline"),
        pytest.param(lambda b: b["mig"][0].update(uuid="MIG-E2E00100-0000-4000-8000-000000000000"), "mig/0/uuid: 'MIG-E2E00100", id="upper-case MIG UUID"),
        pytest.param(
            lambda b: b["utilization"].update({"GPU-e2e0a100-0000-4000-8000-000000000000": {"gpu_percent": 400}}),
            "utilization/GPU-e2e0a100-0000-4000-8000-000000000000/gpu_percent",
            id="impossible percent",
        ),
    ],
)  # fmt: skip
def test_a_malformed_report_is_a_400_naming_the_problem_and_changes_nothing(
    hub, ledger, change, expect
):
    token = ledger.issue_node_token("gpu6")
    body = report_of("a100", "gpu6")
    change(body)
    r = post(hub, "gpu6", body, token)
    assert r.status_code == 400, r.text
    assert expect in r.json()["message"]
    assert not [s for s in ledger.slices() if s["node"] == "gpu6"]
    assert ledger.node("gpu6").agent_seen_at is None


def test_an_oversized_or_unreadable_report_is_refused(hub, ledger):
    token = ledger.issue_node_token("gpu5")
    r = post(hub, "gpu5", None, token, raw=b"x" * (200 * 1024))
    assert r.status_code == 413
    r = post(hub, "gpu5", None, token, raw=b"{not json")
    assert r.status_code == 400
    r = requests.post(
        f"{hub.url}{PREFIX}api/nodes/bad name!/report",
        headers={"Authorization": f"token {token}"},
        timeout=30,
    )
    assert r.status_code == 400 and "not a node name" in r.json()["message"]


def run_agent(
    hub, node: str, token_file: Path, boards="a100", *more
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable, str(TESTS / "agent_fakes.py"), boards, "--",
            "--url", f"{hub.url}{PREFIX}", "--node", node, "--token-file", str(token_file),
            "--once", *more,
        ],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_agent_command_reports_with_its_token_and_says_what_is_wrong(hub, ledger, tmp_path):
    # gpu8 (above) holds the A100; its agent gets a new token from the command line
    token_file = tmp_path / "token"
    cli = subprocess.run(
        [sys.executable, "-m", "jupyterhub_gpulab.cli", "node-token", "gpu8",
         "-f", str(hub.config_path)],
        capture_output=True, text=True, cwd=hub.workdir,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    token_file.write_text(cli.stdout)
    r = run_agent(hub, "gpu8", token_file)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["node"] == "gpu8"
    assert {s["id"] for s in ledger.slices() if s["node"] == "gpu8"} == {
        "MIG-e2e00100-0000-4000-8000-000000000000",
        "MIG-e2e00101-0000-4000-8000-000000000001",
        "MIG-e2e00300-0000-4000-8000-000000000000",
    }
    # a MIG instance carries its GPU's compute capability (the image gate compares it)
    assert {s["cc_key"] for s in ledger.slices() if s["node"] == "gpu8"} == {80}
    # another node's name with this token: refused, and the agent says so
    r = run_agent(hub, "gpu3", token_file)
    assert r.returncode == 1 and "HTTP 403" in r.stderr and "gpu8's" in r.stderr
    # no token at all: the agent says how to make one
    empty = tmp_path / "empty"
    empty.write_text("")
    r = run_agent(hub, "gpu8", empty)
    assert r.returncode != 0 and "gpulab node-token gpu8" in r.stderr


def test_an_admin_drains_a_node_and_mints_tokens_a_reader_may_not(hub, ledger):
    admin = {"Authorization": f"token {hub.tokens['admin']}"}
    reader = {"Authorization": f"token {hub.tokens['instructor']}"}
    url = f"{hub.url}{PREFIX}api/nodes"
    assert requests.get(url, headers=reader, timeout=30).status_code == 200
    assert requests.post(f"{url}/lab-node/drain", headers=reader, timeout=30).status_code == 403
    assert requests.post(f"{url}/gpu2/token", headers=reader, timeout=30).status_code == 403
    r = requests.post(f"{url}/lab-node/drain", json={"reason": "PSU"}, headers=admin, timeout=30)
    assert r.status_code == 200, r.text
    nodes = {n["name"]: n for n in requests.get(url, headers=admin, timeout=30).json()["nodes"]}
    assert nodes["lab-node"]["state"] == "drained" and nodes["lab-node"]["drain_reason"] == "PSU"
    assert not [s for s in ledger.slices() if s["node"] == "lab-node" and s["available"]]
    r = requests.delete(f"{url}/lab-node/drain", headers=admin, timeout=30)
    assert r.status_code == 200 and "back in service" in r.json()["message"]
    assert requests.post(f"{url}/no-such/drain", headers=admin, timeout=30).status_code == 404
    r = requests.post(f"{url}/gpu2/token", headers=admin, timeout=30)
    assert r.status_code == 201
    assert ledger.node_for_token(r.json()["token"]) == "gpu2"


def test_a_node_cannot_take_another_nodes_gpus(hub, ledger):
    """gpu7 reported the T4 and the A40 (above): another node's token reporting them is refused,
    and the ledger keeps them on gpu7, with their holders."""
    if ledger.node("gpu7") is None:
        post(hub, "gpu7", report_of("t4+a40", "gpu7"), ledger.issue_node_token("gpu7"))
    token = ledger.issue_node_token("gpu1")
    r = post(hub, "gpu1", report_of("t4+a40", "gpu1"), token)
    assert r.status_code == 400, r.text
    assert (
        "GPU-e2e0a400-0000-4000-8000-000000000002 is node gpu7's in the ledger"
        in r.json()["message"]
    )
    assert {d["uuid"]: d["node"] for d in ledger.devices()}[
        "GPU-e2e0a400-0000-4000-8000-000000000002"
    ] == "gpu7"
    assert not [s for s in ledger.slices() if s["node"] == "gpu1"]


def test_a_restarted_service_gives_its_agents_one_timeout_before_judging_them(tmp_path, at):
    """The agents could not report while the service was down: a node is not marked
    unreachable for that, only when it stays silent for a whole timeout after the start."""
    from traitlets.config import Config

    from jupyterhub_gpulab.lab.config import GPULab
    from jupyterhub_gpulab.ledger import Ledger
    from jupyterhub_gpulab.service.nodes import NodeReports
    from jupyterhub_gpulab.service.state import LabState

    c = Config()
    c.GPULab.inventory_source = "agents"
    c.GPULab.profiles = [{"slug": "cpu", "display_name": "CPU", "image": "i"}]
    led = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    state = LabState(GPULab(config=c), led)
    NodeReports(state, timeout_s=60).receive("gpu1", report_of("a100", "gpu1"))
    at.move(600)  # the service was down ten minutes
    restarted = NodeReports(state, timeout_s=60)
    assert restarted.expire() == []
    at.move(30)
    assert restarted.expire() == []
    at.move(31)
    assert restarted.expire() == ["gpu1"]
    assert not [s for s in led.slices() if s["available"]]
    # its next report brings it back, and its figures join the lab's latest sample
    restarted.receive("gpu1", report_of("a100", "gpu1"))
    assert all(s["available"] for s in led.slices())
    assert set(state.sample.by_slice) == {
        "MIG-e2e00100-0000-4000-8000-000000000000",
        "MIG-e2e00101-0000-4000-8000-000000000001",
        "MIG-e2e00300-0000-4000-8000-000000000000",
    }
    assert state.history("MIG-e2e00100-0000-4000-8000-000000000000")[-1].at == at.now
    led.close()

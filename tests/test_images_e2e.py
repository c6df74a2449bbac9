"""Picking "PyTorch" gives PyTorch: a real hub spawns the framework images (CPU variants) and a
student's work runs through the Jupyter server's own APIs, as JupyterLab drives them — kernels
over their websocket, a terminal, the contents API — never ``docker exec``.

One hub for the module (spawns are the slow part): a declared lab with an A100 in MIG mode, a
T4 in seats and a Tesla P40, every device with its compute capability and driver; the gpulab
service listens on the containers' network, so the status bar entry reaches it.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
import uuid

import jupyterhub
import pytest
import requests
from e2e_support import env_of, inspect, remove_node_containers
from hubtools import DOCKER_GATEWAY, Hub, docker_available, free_port
from leakcheck import unique
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

pytestmark = pytest.mark.docker

V = jupyterhub.__version__
PYTORCH = os.environ.get("GPULAB_TEST_PYTORCH_IMAGE", f"gpulab/pytorch:{V}-cpu")
TENSORFLOW = os.environ.get("GPULAB_TEST_TENSORFLOW_IMAGE", f"gpulab/tensorflow:{V}-cpu")
PLAIN = os.environ.get("GPULAB_TEST_IMAGE", f"gpulab/singleuser:{V}")
GiB = 2**30

LAB = [
    {"uuid": "GPU-img-a100", "index": 0, "name": "NVIDIA A100-SXM4-80GB", "memory": "80GiB",
     "compute_capability": "8.0", "driver_version": "580.95.05",
     "mig": [{"uuid": "MIG-img-1g-0", "profile": "1g.10gb"},
             {"uuid": "MIG-img-1g-1", "profile": "1g.10gb"}]},
    {"uuid": "GPU-img-t4", "index": 1, "name": "Tesla T4", "memory": "16GiB",
     "compute_capability": "7.5", "driver_version": "580.95.05",
     "shared": {"seats": 4, "memory_per_seat": "4GiB", "compute_share": 0.25}},
    {"uuid": "GPU-img-p40", "index": 2, "name": "Tesla P40", "memory": "24GiB",
     "compute_capability": "6.1", "driver_version": "580.95.05"},
    {"uuid": "GPU-img-a40", "index": 3, "name": "NVIDIA A40", "memory": "48GiB",
     "compute_capability": "8.6", "driver_version": "580.95.05"},
]  # fmt: skip


def require_images(*images: str) -> None:
    reason = docker_available()
    for image in images:
        if reason is None:
            r = subprocess.run(["docker", "image", "inspect", image], capture_output=True)
            if r.returncode != 0:
                reason = f"image {image} is missing (images/build-image.sh all builds it)"
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the image tests: {reason}")
        pytest.skip(reason)


def cuda13_image() -> str:
    """A runnable image carrying a CUDA 13 PyTorch's labels (the real one is several GB): the
    plain single-user image, committed with the labels build-image.sh writes for it."""
    from jupyterhub_gpulab.lab import imagelabels

    locks = os.path.join(os.path.dirname(__file__), "..", "images", "locks", "pytorch-cuda.txt")
    with open(locks, encoding="utf-8") as f:
        labels = imagelabels.labels_for("pytorch", "cuda", f.read().splitlines())
    tag = "gpulab/test-cuda13:" + uuid.uuid5(uuid.NAMESPACE_URL, json.dumps(labels)).hex[:12]
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode:
        cid = subprocess.run(
            ["docker", "create", PLAIN], capture_output=True, text=True, check=True
        ).stdout.strip()
        try:
            changes = [a for k, v in labels.items() for a in ("--change", f"LABEL {k}={v}")]
            subprocess.run(
                ["docker", "commit", *changes, cid, tag], capture_output=True, check=True
            )
        finally:
            subprocess.run(["docker", "rm", cid], capture_output=True)
    return tag


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    require_images(PYTORCH, TENSORFLOW, PLAIN)
    node = unique("gpulabimg")
    workdir = tmp_path_factory.mktemp("images") / node
    cuda13 = cuda13_image()
    profiles = [
        {"slug": "pytorch", "display_name": "PyTorch (MIG 1g.10gb)", "image": PYTORCH,
         "slice": {"kind": "mig", "mig_profile": "1g.10gb"}, "mem_limit": "2G", "default": True},
        {"slug": "tensorflow", "display_name": "TensorFlow (T4 seat)", "image": TENSORFLOW,
         "slice": {"kind": "shared"}, "mem_limit": "3G", "shm_size": "256MiB"},
        {"slug": "cuda13-p40", "display_name": "PyTorch CUDA 13 on the P40", "image": cuda13,
         "slice": {"kind": "gpu", "model": "P40"}},
        {"slug": "cuda13-mig", "display_name": "PyTorch CUDA 13 (MIG)", "image": cuda13,
         "slice": {"kind": "mig", "mig_profile": "1g.10gb"}},
        {"slug": "cuda13-gpu", "display_name": "PyTorch CUDA 13 (a whole GPU)", "image": cuda13,
         "slice": {"kind": "gpu"}},
    ]  # fmt: skip
    port = free_port()
    extra = f"""
from jupyterhub_gpulab.hub.hubconfig import configure_service
c.JupyterHub.spawner_class = "gpulab"
c.DockerSpawner.pull_policy = "never"
c.DockerSpawner.prefix = {node!r}
c.DockerSpawner.volumes = {{"gpulab-home-{{username}}": "/home/jovyan"}}
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
c.GPUDockerSpawner.attach_mode = "env"
c.GPULab.node_name = {node!r}
c.GPULab.inventory_source = "declared"
c.GPULab.inventory = {LAB!r}
c.GPULab.profiles = {profiles!r}
c.GPULab.default_policy = {{"max_slices_per_user": 2}}
c.GPULabService.cookie_secret_file = "{workdir}/gpulab_cookie_secret"
c.GPULabService.waitlist_every = 1
configure_service(c, config_file=__file__, url="http://{DOCKER_GATEWAY}:{port}")
"""
    hub = Hub(workdir, extra)
    hub.cuda13 = cuda13
    hub.users = []
    hub.start()
    try:
        yield hub
    finally:
        hub.stop()
        remove_node_containers(node)
        for user in hub.users:
            subprocess.run(["docker", "volume", "rm", f"gpulab-home-{user}"], capture_output=True)


def new_user(hub: Hub) -> str:
    name = "student" + secrets.token_hex(3)
    hub.create_user(name)
    hub.users.append(name)
    return name


def start(hub: Hub, user: str, profile: str) -> str:
    r = hub.spawn(user, {"profile": profile})
    assert r.status_code in (201, 202), r.text
    hub.wait_ready(user, timeout=150)
    return hub.server(user)["state"]["object_name"]


def server_api(hub: Hub, user: str, method: str, path: str, **kw) -> requests.Response:
    """The user's single-user server through the proxy, with the tests' token (access:servers)."""
    kw.setdefault("timeout", 60)
    headers = {"Authorization": f"token {hub.token}", **kw.pop("headers", {})}
    return requests.request(method, f"{hub.url}/user/{user}/{path}", headers=headers, **kw)


async def run_in_kernel(hub: Hub, user: str, code: str, timeout: float = 240) -> str:
    """Start a kernel with the server's REST API, run ``code`` over the kernel's websocket
    (Jupyter messaging v5, JSON), return its stdout; a traceback fails the test."""
    r = server_api(hub, user, "POST", "api/kernels", json={"name": "python3"})
    assert r.status_code == 201, r.text
    kernel = r.json()["id"]
    ws_url = hub.url.replace("http", "ws", 1) + f"/user/{user}/api/kernels/{kernel}/channels"
    conn = await websocket_connect(
        HTTPRequest(ws_url, headers={"Authorization": f"token {hub.token}"})
    )
    msg_id = uuid.uuid4().hex
    conn.write_message(
        json.dumps(
            {
                "header": {"msg_id": msg_id, "username": user, "session": uuid.uuid4().hex,
                           "msg_type": "execute_request", "version": "5.3"},
                "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
                "content": {"code": code, "silent": False, "store_history": False,
                            "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
            }
        )
    )  # fmt: skip
    out: list[str] = []
    try:
        async with asyncio.timeout(timeout):
            while True:
                raw = await conn.read_message()
                assert raw is not None, "the kernel's websocket closed"
                msg = json.loads(raw)
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind = msg["header"]["msg_type"]
                if kind == "stream" and msg["content"]["name"] == "stdout":
                    out.append(msg["content"]["text"])
                elif kind == "error":
                    pytest.fail("kernel error:\n" + "\n".join(msg["content"]["traceback"]))
                elif kind == "status" and msg["content"]["execution_state"] == "idle":
                    return "".join(out)
    finally:
        conn.close()
        server_api(hub, user, "DELETE", f"api/kernels/{kernel}")


def losses_of(stdout: str) -> list[float]:
    line = next(x for x in stdout.splitlines() if x.startswith("LOSSES "))
    return json.loads(line[len("LOSSES ") :])


def assert_decreasing(losses: list[float]) -> None:
    assert len(losses) >= 10, losses
    assert losses[-1] < 0.5 * losses[0], losses
    head, tail = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert tail < head, losses


TORCH_TRAINING = """
import json, torch
torch.manual_seed(0)
x = torch.randn(256, 8)
y = x @ torch.randn(8, 1) + 0.05 * torch.randn(256, 1)
model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
losses = []
for step in range(40):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
print("LOSSES", json.dumps(losses))
"""

TF_TRAINING = """
import json, numpy as np, tensorflow as tf, gpulab_seatcap
tf.random.set_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(256, 8)).astype("float32")
y = x @ rng.normal(size=(8, 1)).astype("float32")
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(32, activation="relu"),
                             tf.keras.layers.Dense(1)])
model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
history = model.fit(x, y, epochs=15, batch_size=32, verbose=0)
print("LOSSES", json.dumps([float(v) for v in history.history["loss"]]))
print("CAP", json.dumps(gpulab_seatcap.applied))
"""


@pytest.fixture(scope="module")
def torch_user(lab):
    user = new_user(lab)
    lab.torch_container = start(lab, user, "pytorch")
    return user


async def test_pytorch_trains_a_model_through_the_kernel_api(lab, torch_user):
    out = await run_in_kernel(lab, torch_user, TORCH_TRAINING)
    assert_decreasing(losses_of(out))


async def test_a_new_terminal_finds_python_and_pip(lab, torch_user):
    r = server_api(lab, torch_user, "POST", "api/terminals")
    assert r.status_code == 200, r.text
    name = r.json()["name"]
    ws_url = lab.url.replace("http", "ws", 1) + f"/user/{torch_user}/terminals/websocket/{name}"
    conn = await websocket_connect(
        HTTPRequest(ws_url, headers={"Authorization": f"token {lab.token}"})
    )
    seen = ""
    try:
        # what a student types first: the shell is a login shell (Debian's /etc/profile resets
        # PATH there), so this also proves /etc/profile.d puts the venv back
        conn.write_message(json.dumps(["stdin", 'echo "SH $0"; command -v python pip; '
                                       "python -c 'import torch; print(\"TORCH\", torch.__version__)'\r"]))  # fmt: skip
        async with asyncio.timeout(90):
            while "TORCH 2." not in seen:
                raw = await conn.read_message()
                assert raw is not None, seen
                msg = json.loads(raw)
                if msg[0] == "stdout":
                    seen += msg[1]
    finally:
        conn.close()
        server_api(lab, torch_user, "DELETE", f"api/terminals/{name}")
    assert "/opt/venv/bin/python" in seen and "/opt/venv/bin/pip" in seen, seen


def test_the_container_gets_shm_driver_capabilities_and_the_service_address(lab, torch_user):
    info = inspect(lab.torch_container)
    assert info["HostConfig"]["ShmSize"] == GiB  # c.GPUDockerSpawner.shm_size's default
    env = env_of(lab.torch_container)
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    assert env["NVIDIA_VISIBLE_DEVICES"].startswith("MIG-img-1g-")
    assert env["GPULAB_API_URL"].endswith("/services/gpulab/api/")
    assert info["Mounts"][0]["Name"] == f"gpulab-home-{torch_user}"


def test_the_status_bar_entry_reads_the_service_with_the_servers_own_token(lab, torch_user):
    r = server_api(lab, torch_user, "GET", "gpulab/me")
    assert r.status_code == 200, r.text
    me = r.json()
    assert me["text"].startswith("GPU: MIG 1g.10gb, 10 GiB, isolated"), me
    assert "GPU-h" in me["text"] and me["slice"]["kind"] == "mig"
    # the browser never sees a token: the server extension asked the service itself
    assert "token" not in json.dumps(me).lower()


async def test_tensorflow_trains_and_its_seat_is_capped_by_the_framework(lab):
    user = new_user(lab)
    container = start(lab, user, "tensorflow")
    env = env_of(container)
    assert env["GPULAB_SEAT_MEMORY_BYTES"] == str(4 * GiB)
    assert env["GPULAB_ISOLATION"] == "framework"
    assert inspect(container)["HostConfig"]["ShmSize"] == 256 * 2**20  # the profile's own
    out = await run_in_kernel(lab, user, TF_TRAINING)
    assert_decreasing(losses_of(out))
    # the hook ran in the kernel at import (no GPU in a CPU build: no logical device to make)
    cap = json.loads(next(x for x in out.splitlines() if x.startswith("CAP "))[4:])
    assert cap == {"tensorflow": []}
    me = server_api(lab, user, "GET", "gpulab/me").json()
    assert "shared seat, 4 GiB for tensors, shared, capped by the framework" in me["text"], me
    lab.stop_server(user)


@pytest.mark.parametrize("image_env", ["PYTORCH", "TENSORFLOW"])
def test_the_seat_cap_hook_applies_the_fraction_in_the_built_image(lab, image_env):
    # no GPU here: a stand-in device count and memory inside the image's real framework
    if image_env == "PYTORCH":
        image, code = (
            PYTORCH,
            (
                "import json, torch, gpulab_seatcap\n"
                "from types import SimpleNamespace\n"
                "calls = []\n"
                "torch.cuda.device_count = lambda: 1\n"
                "torch.cuda.get_device_properties = lambda i: SimpleNamespace(total_memory=24 * 2**30)\n"
                "torch.cuda.set_per_process_memory_fraction = lambda f, i: calls.append([f, i])\n"
                "for fn, _where in torch.cuda._queued_calls: fn()  # what CUDA's first use runs\n"
                "print(json.dumps(calls))\n"
            ),
        )
        expected = [[2 / 24, 0]]
    else:
        image, code = (
            TENSORFLOW,
            (
                "import json, tensorflow as tf, gpulab_seatcap\n"
                "calls = []\n"
                "tf.config.list_physical_devices = lambda kind: ['GPU:0']\n"
                "tf.config.set_logical_device_configuration = lambda g, c: calls.append([g, c[0].memory_limit])\n"
                "gpulab_seatcap.cap_tensorflow(tf, gpulab_seatcap.seat_bytes())\n"
                "print(json.dumps(calls))\n"
            ),
        )
        expected = [["GPU:0", 2048]]
    out = subprocess.run(
        ["docker", "run", "--rm", "-e", f"GPULAB_SEAT_MEMORY_BYTES={2 * GiB}", image,
         "python", "-c", code],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == expected


def test_the_gate_refuses_a_cuda_13_image_on_the_p40_naming_both(lab):
    user = new_user(lab)
    r = lab.spawn(user, {"profile": "cuda13-p40"})
    assert r.status_code >= 400, r.text
    message = r.json()["message"]
    assert lab.cuda13 in message and "CUDA 13" in message, message
    assert "GPU 2 (Tesla P40)" in message and "compute capability 6.1" in message, message
    assert lab.server(user) is None or not lab.server(user).get("ready")
    # the same image on a MIG instance of the A100 (compute capability 8.0) starts
    start(lab, user, "cuda13-mig")
    lab.stop_server(user)
    # and check-config names the profile, the image and the device before anyone tries
    out = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "gpulab"), "check-config", "-f",
         str(lab.config_path)], capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    assert "profile 'cuda13-p40'" in out.stderr and "Tesla P40" in out.stderr, out.stderr
    assert "'cuda13-mig'" not in out.stderr


def test_the_waitlist_and_the_user_page_never_count_a_gpu_the_image_cannot_use(lab):
    """Whole GPUs of this lab: the P40 (compute capability 6.1) and the A40 (8.6). With the A40
    held, a user queued for the CUDA 13 profile is not offered the free P40 (the spawn would
    refuse it) and the user page shows nothing free; once the A40 frees, it is held for them."""
    from service_support import login, user_token

    from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
    from jupyterhub_gpulab.ledger import Ledger

    user = new_user(lab)
    ledger = Ledger(f"sqlite:///{lab.workdir}/gpulab.sqlite")
    whole = SliceRequest(kind=SliceKind.GPU, model="A40")
    held = ledger.claim(whole, user="someone-else", profile="cuda13-gpu", server_name="x")
    try:
        token = user_token(lab, login(lab, user), user)
        me = requests.get(
            f"{lab.url}/services/gpulab/api/me",
            headers={"Authorization": f"token {token}"},
            timeout=30,
        )
        assert me.status_code == 200, me.text
        [row] = [p for p in me.json()["profiles"] if p["slug"] == "cuda13-gpu"]
        assert (row["free"], row["total"]) == (0, 1), row  # the A40 only, and it is held

        ledger.join_waitlist(user, "cuda13-gpu", SliceRequest(kind=SliceKind.GPU))
        deadline = time.monotonic() + 6  # six passes of the service's waitlist
        while time.monotonic() < deadline:
            assert ledger.open_allocations(user) == [], "offered the P40, which CUDA 13 lacks"
            time.sleep(0.5)
        ledger.release(held.allocation.id, "stopped")
        deadline = time.monotonic() + 30
        while not ledger.open_allocations(user):
            assert time.monotonic() < deadline, "the freed A40 was never offered"
            time.sleep(0.5)
        [hold] = ledger.open_allocations(user)
        assert hold.slice_id == "GPU-img-a40" and hold.hold_until is not None
    finally:
        ledger.leave_waitlist(user)
        for a in ledger.open_allocations():
            if a.user in (user, "someone-else"):
                ledger.release(a.id, "test-cleanup")
        ledger.close()


def test_a_file_written_before_a_stop_is_there_after_the_next_start(lab, torch_user):
    text = f"my notebook's data {secrets.token_hex(4)}\n"
    r = server_api(lab, torch_user, "PUT", "api/contents/keep.txt",
                   json={"type": "file", "format": "text", "content": text})  # fmt: skip
    assert r.status_code in (200, 201), r.text
    old = lab.torch_container
    lab.stop_server(torch_user)
    assert subprocess.run(["docker", "inspect", old], capture_output=True).returncode != 0
    start(lab, torch_user, "pytorch")  # a new container (always created afresh)
    r = server_api(lab, torch_user, "GET", "api/contents/keep.txt?content=1&type=file&format=text")
    assert r.status_code == 200, r.text
    assert r.json()["content"] == text

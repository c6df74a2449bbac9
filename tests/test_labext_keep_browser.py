"""Keep and Move to CPU in JupyterLab's status bar, in a real browser: a real hub and the gpulab
service, GPUDockerSpawner running the lab image with this checkout's JupyterLab extension
(built by ``images/jupyterlab-gpulab/build.sh``, installed into a copy of the lab image under a
test tag), the student's home on a volume.

The student's MIG server is never busy (the lab counts unknown utilisation as idle), so the
culler warns it: the status bar shows the warning with Keep and Move to CPU. Keep postpones the
stop; at the next warning the student, with an edited file left unsaved, clicks Move to CPU: the
file is saved, and the server comes back on the CPU profile with that file in its home.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import jupyterhub
import pytest
import requests
from browser_support import ARTIFACTS, click, log_in, save_screenshot, wait_until
from e2e_support import remove_node_containers
from hubtools import DOCKER_GATEWAY, Hub, free_port
from leakcheck import unique
from ledger_support import LAB
from service_support import docker_problem, ledger_for, require_or_skip, wait_for_service

pytestmark = [pytest.mark.docker, pytest.mark.browser]

EXT = Path(__file__).resolve().parent.parent / "images" / "jupyterlab-gpulab"
LAB_IMAGE = os.environ.get(
    "GPULAB_TEST_LAB_IMAGE", f"gpulab/singleuser:{jupyterhub.__version__}-lab"
)
#: a warning 30 s into an idle stretch, the stop at 60 s: time for JupyterLab to load and show it
GPU_IDLE_S = 60
WARN_S = 30


def _ext_image() -> str:
    """The lab image plus this checkout's extension wheel, under a test tag."""
    if shutil.which("npm") is None:
        pytest.skip("npm is missing: the JupyterLab extension cannot be built here")
    if subprocess.run(["docker", "image", "inspect", LAB_IMAGE], capture_output=True).returncode:
        require_or_skip(f"{LAB_IMAGE} is not built (GPULAB_IMAGE_LAB=1 build-singleuser.sh)", "")
    built = subprocess.run(
        [str(EXT / "build.sh")], capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = Path(built.stdout.strip().splitlines()[-1])
    tag = f"gpulab/keep-test:{unique('lab')}"
    cid = subprocess.run(
        ["docker", "create", "--user", "root", LAB_IMAGE, "/opt/venv/bin/pip", "install", "-q",
         "--no-deps", "--no-index", f"/tmp/{wheel.name}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    try:
        subprocess.run(["docker", "cp", str(wheel), f"{cid}:/tmp/{wheel.name}"], check=True)
        ran = subprocess.run(["docker", "start", "-a", cid], capture_output=True, text=True)
        assert ran.returncode == 0, ran.stderr
        subprocess.run(
            ["docker", "commit", "--change", 'CMD ["jupyterhub-singleuser"]',
             "--change", "USER jovyan", cid, tag],
            capture_output=True, check=True,
        )  # fmt: skip
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
    return tag


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    require_or_skip(docker_problem(), "Docker")
    image = _ext_image()
    node = unique("gpulablabkeep")
    workdir = tmp_path_factory.mktemp("labkeep") / node
    profiles = [
        {"slug": "cpu", "display_name": "CPU only", "image": image, "default": True},
        {"slug": "mig-small", "display_name": "PyTorch (1g.5gb MIG slice)", "image": image,
         "slice": {"kind": "mig", "mig_profile": "1g.5gb"}, "gpu_idle_timeout": f"{GPU_IDLE_S}s"},
    ]  # fmt: skip
    port = free_port()
    extra = f"""
from jupyterhub_gpulab.hub.hubconfig import configure_service
c.JupyterHub.spawner_class = "gpulab"
c.DockerSpawner.pull_policy = "never"
c.DockerSpawner.prefix = {node!r}
c.DockerSpawner.volumes = {{"{node}-home-{{username}}": "/home/jovyan"}}
c.Spawner.default_url = "/lab"
c.Spawner.environment = {{"GPULAB_STATUS_REFRESH_S": "5"}}
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
c.GPUDockerSpawner.attach_mode = "env"
c.GPUDockerSpawner.reconcile_interval = 3600
c.GPULab.node_name = {node!r}
c.GPULab.inventory_source = "declared"
c.GPULab.inventory = {LAB!r}
c.GPULab.profiles = {profiles!r}
c.GPULab.group_policies = {{"students": {{"max_slices_per_user": 1, "keeps_per_day": 1}}}}
c.GPULabService.cookie_secret_file = "{workdir}/gpulab_cookie_secret"
c.GPULabService.cull_every = "1s"
c.GPULabService.cull_warn_before = "{WARN_S}s"
c.GPULabService.sample_interval = 1
c.GPULabService.max_sample_gap = "10s"
c.GPULabService.unknown_utilization = "idle"
configure_service(c, config_file=__file__, url="http://{DOCKER_GATEWAY}:{port}")
"""
    hub = Hub(workdir, extra)
    hub.start()
    try:
        wait_for_service(hub)
        hub.create_user("student", ["students"])
        yield hub
    finally:
        hub.stop()
        remove_node_containers(node)
        subprocess.run(["docker", "volume", "rm", f"{node}-home-student"], capture_output=True)
        subprocess.run(["docker", "image", "rm", image], capture_output=True)


def contents(hub, method: str, path: str, **kw) -> requests.Response:
    """The student's server's contents API through the proxy, with the tests' token."""
    return requests.request(
        method, f"{hub.url}/user/student/api/contents/{path}",
        headers={"Authorization": f"token {hub.token}"}, timeout=60, **kw,
    )  # fmt: skip


def status_bar(driver) -> str:
    from selenium.webdriver.common.by import By

    found = driver.find_elements(By.ID, "jupyterlab-gpulab-status")
    return found[0].text if found else ""


def test_the_status_bar_keeps_then_saves_and_moves_to_cpu(hub, browser):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    ledger = ledger_for(hub)
    try:
        r = hub.spawn("student", {"profile": "mig-small"})
        assert r.status_code in (201, 202), r.text + hub.log_tail(80)
        hub.wait_ready("student", timeout=150)
        [held] = ledger.open_allocations("student")
        r = contents(hub, "PUT", "notes.txt",
                     json={"type": "file", "format": "text", "content": "before\n"})  # fmt: skip
        assert r.status_code in (200, 201), r.text

        def warned():
            return [w for w in ledger.warnings("student") if w.rule == "gpu-idle"]

        wait_until(warned, GPU_IDLE_S, "the first GPU-idle warning")
        log_in(browser, hub, "student", "/user/student/lab")
        wait_until(lambda: "⚠ GPU idle" in status_bar(browser), 30, "the warning in the status bar")
        for toast in browser.find_elements(By.CSS_SELECTOR, ".Toastify__close-button"):
            click(browser, toast)  # JupyterLab's own notices (news) sit over the status bar
        buttons = browser.find_elements(By.CSS_SELECTOR, "#jupyterlab-gpulab-status button")
        assert [b.text for b in buttons] == ["Keep", "Move to CPU"]
        save_screenshot(browser, ARTIFACTS / "lab-keep-warning.png")
        click(browser, browser.find_element(By.CSS_SELECTOR, "#jupyterlab-gpulab-status button"))
        wait_until(lambda: "Kept:" in status_bar(browser), 30, "the keep's answer")
        assert list(ledger.latest_keeps([held.id])) == [held.id] and not warned()

        # an edited file, not saved; then the next warning, and Move to CPU
        browser.get(f"{hub.url}/user/student/lab/tree/notes.txt")
        editor = wait_until(
            lambda: browser.find_elements(By.CSS_SELECTOR, ".jp-FileEditor .cm-content"),
            60,
            "the file editor",
        )[0]
        click(browser, editor)
        editor.send_keys(Keys.CONTROL, Keys.END)
        editor.send_keys("typed in JupyterLab")
        wait_until(warned, GPU_IDLE_S, "the second GPU-idle warning")
        saved_before = contents(hub, "GET", "notes.txt").json()["content"]
        assert "typed in JupyterLab" not in saved_before  # it is not saved yet
        # the entry asks every GPULAB_STATUS_REFRESH_S (5 s here)
        wait_until(lambda: "⚠" in status_bar(browser), 20, "the second warning in the status bar")
        move = browser.find_elements(By.CSS_SELECTOR, "#jupyterlab-gpulab-status button")[1]
        click(browser, move)
        wait_until(lambda: "CPU only" in status_bar(browser), 30, "the move's answer")

        def on_cpu():
            s = hub.server("student")
            return s and s.get("ready") and (s.get("user_options") or {}).get("profile") == "cpu"

        wait_until(on_cpu, 150, "the CPU server")
        moved = ledger.get(held.id)
        assert not moved.open and moved.end_reason == "moved-to-cpu"
        text = contents(hub, "GET", "notes.txt").json()["content"]
        assert "typed in JupyterLab" in text and text.startswith("before")  # saved, same home
        assert ledger.open_allocations("student") == []
    finally:
        ledger.close()


def test_keystrokes_in_jupyterlab_reach_the_service_as_the_servers_last_interaction(hub, browser):  # noqa: F811
    """The page notes keystrokes (not the open tab) and, within a minute, its server extension
    reports the latest to the service, which holds it for the student's server."""
    from datetime import datetime, timezone

    from selenium.webdriver.common.by import By
    from service_support import PREFIX, login, user_token

    if not (hub.server("student") or {}).get("ready"):
        r = hub.spawn("student", {"profile": "cpu"})
        assert r.status_code in (201, 202), r.text
        hub.wait_ready("student", timeout=150)
    token = user_token(hub, login(hub, "student"), "student")
    url = f"{hub.url}{PREFIX}api/users/student/server/interaction"

    def held():
        r = requests.get(url, headers={"Authorization": f"token {token}"}, timeout=30)
        assert r.status_code == 200, r.text
        at = r.json()["at"]
        return datetime.fromisoformat(at) if at else None

    log_in(browser, hub, "student", "/user/student/lab")
    wait_until(lambda: status_bar(browser).startswith("GPU"), 60, "JupyterLab's status bar")
    before = datetime.now(timezone.utc)
    browser.find_element(By.TAG_NAME, "body").send_keys("a")  # a keystroke in the page
    typed = wait_until(
        lambda: (at := held()) is not None and at >= before.replace(microsecond=0) and at,
        90,
        "the page's report of the keystroke",
    )
    assert typed <= datetime.now(timezone.utc)

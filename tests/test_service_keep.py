"""Keep and Move to CPU on a real hub: GPUDockerSpawner runs real containers (attach mode "env",
the declared lab of ledger_support), the gpulab service runs as a managed service with its
culler on short timeouts, and a real browser (Debian's chromium) clicks the buttons.

A student's MIG server is never busy (no GPU reports a figure for a MIG instance here, and the
lab counts that as idle, as the demo does), so the culler warns it; the student clicks **Keep**
on their My GPU page and the stop moves one window later; at the next warning their one keep of
the day is spent, and **Move to CPU** restarts the server on the CPU profile. The API's
refusals are asked with the student's own token, or with the login cookie and no ``_xsrf``.
"""

from __future__ import annotations

import time

import pytest
import requests
from browser_support import ARTIFACTS, click, log_in, save_screenshot, wait_until
from clock_support import clear_of_midnight
from leakcheck import unique
from service_support import (
    IMAGE,
    POLICIES,
    PREFIX,
    PROFILES,
    docker_problem,
    login,
    real_servers,
    require_or_skip,
    running_service_hub,
    user_token,
)

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("api_contract", "lab_left_empty")]

#: the MIG profile's GPU-idle window and the warning's lead, seconds: a warning 25 s into an
#: idle stretch, the stop at 40 s, a Keep moving it to 40 s after the click
GPU_IDLE_S = 40
WARN_S = 15
PROFILES_HERE = [
    {**p, "gpu_idle_timeout": f"{GPU_IDLE_S}s"} if p["slug"] == "mig-small" else p for p in PROFILES
]
POLICIES_HERE = {**POLICIES, "students": {**POLICIES["students"], "keeps_per_day": 1}}
NODE = unique("gpulabkeep")
EXTRA = (
    real_servers(NODE, image=IMAGE, http_timeout=60, hold_rows=True)
    + f"""
c.GPULab.profiles = {PROFILES_HERE!r}
c.GPULab.group_policies = {POLICIES_HERE!r}
c.GPULabService.cull_every = "1s"
c.GPULabService.cull_warn_before = "{WARN_S}s"
c.GPULabService.sample_interval = 1
c.GPULabService.max_sample_gap = "10s"
c.GPULabService.unknown_utilization = "idle"
"""
)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    require_or_skip(docker_problem(), "Docker")
    with running_service_hub(tmp_path_factory.mktemp("keep-hub"), extra=EXTRA, node=NODE) as hub:
        yield hub


def gpu_idle_warning(ledger, user: str, timeout: float):
    return wait_until(
        lambda: [w for w in ledger.warnings(user) if w.rule == "gpu-idle"],
        timeout,
        f"a gpu-idle warning for {user}",
    )[0]


def test_keep_and_move_refuse_what_is_not_the_callers_to_choose(hub, ledger):
    hub.spawn_ready("student", {"profile": "mig-small"})
    hub.spawn_ready("instructor", {"profile": "cpu"})
    api = hub.url + PREFIX + "api/users/"
    session = login(hub, "student")
    mine = {"Authorization": f"token {user_token(hub, session, 'student')}"}
    day = clear_of_midnight()  # Keeps count per day: this test must not straddle two
    kept_before = ledger.keeps_used("student", day)

    def post(path, headers=mine, **kw):
        return requests.post(api + path, headers=headers, timeout=60, **kw)

    # someone else's server: 403, nothing moved, even where that server exists
    for path in ("instructor/server/keep", "instructor/server/move-to-cpu"):
        r = post(path)
        assert r.status_code == 403 and "Only 'instructor' may" in r.json()["message"], r.text
    assert hub.server("instructor")["ready"]
    # bad input: 400 with what is wrong
    r = post("student/server/keep", json={"server": "x"})
    assert r.status_code == 400 and "Unknown field 'server'" in r.json()["message"]
    r = post("student/servers/%01/keep")
    assert r.status_code == 400 and "is not a server name" in r.json()["message"]
    # nothing to keep yet: the GPU-idle warning is not out (it comes 25 s into the idle)
    r = post("student/server/keep")
    assert r.status_code == 409 and "no GPU-idle warning" in r.json()["message"], r.text
    # a server that is not running: 409
    r = post("student/servers/never/move-to-cpu")
    assert r.status_code == 409 and "not running" in r.json()["message"]
    # the login cookie without the _xsrf token is no one: 403
    r = session.post(api + "student/server/keep", timeout=60)
    assert r.status_code == 403 and "Not authenticated" in r.json()["message"]
    # a CPU server has nothing to keep or move
    ins = login(hub, "instructor")
    theirs = {"Authorization": f"token {user_token(hub, ins, 'instructor')}"}
    r = post("instructor/server/move-to-cpu", headers=theirs)
    assert r.status_code == 409 and "already runs on CPU" in r.json()["message"]
    r = post("instructor/server/keep", headers=theirs)
    assert r.status_code == 409 and "nothing to keep" in r.json()["message"]
    # none of it changed anything
    assert hub.server("student")["ready"] and hub.server("student")["user_options"] == {
        "profile": "mig-small"
    }
    assert ledger.keeps_used("student", day) == kept_before


def _server_profile(hub, user: str) -> str | None:
    s = hub.server(user)
    return (s.get("user_options") or {}).get("profile") if s and s.get("ready") else None


@pytest.mark.browser
def test_a_student_keeps_their_gpu_then_moves_to_cpu_in_the_browser(hub, ledger, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    clear_of_midnight()  # "1 of 1" and "0 left today" are this day's Keeps
    hub.spawn_ready("student", {"profile": "mig-small"})
    [held] = ledger.open_allocations("student")
    first = gpu_idle_warning(ledger, "student", GPU_IDLE_S + 30)
    log_in(browser, hub, "student", PREFIX + "me", heading="My GPU")
    warning = wait_until(
        lambda: browser.find_elements(By.CSS_SELECTOR, '.cull-warning[data-rule="gpu-idle"]'),
        20,
        "the GPU-idle warning on My GPU",
        refresh=browser.refresh,
    )[0]
    assert "1 of 1" in warning.find_element(By.CSS_SELECTOR, ".keeps-left").text
    save_screenshot(browser, ARTIFACTS / "keep-warning.png")

    # Keep: the warning goes, the stop moves one window later, the keep is counted
    click(browser, warning.find_element(By.CSS_SELECTOR, "button.keep"))
    flash = wait_until(lambda: browser.find_elements(By.ID, "gpulab-flash"), 30, "the keep")
    assert flash[0].text.startswith("Kept:") and "0 left today" in flash[0].text, flash[0].text
    assert not browser.find_elements(By.CSS_SELECTOR, '.cull-warning[data-rule="gpu-idle"]')
    assert list(ledger.latest_keeps([held.id])) == [held.id]
    wait_until(lambda: time.time() > first.due_at.timestamp() + 3, 60, "the first due time")
    assert ledger.get(held.id).open and hub.server("student")["ready"]  # not culled at the due
    assert not [w for w in ledger.warnings("student") if w.rule == "gpu-idle"]

    # the next warning: the day's one keep is spent; Move to CPU
    gpu_idle_warning(ledger, "student", GPU_IDLE_S)
    browser.refresh()
    warning = wait_until(
        lambda: browser.find_elements(By.CSS_SELECTOR, '.cull-warning[data-rule="gpu-idle"]'),
        20,
        "the second warning",
        refresh=browser.refresh,
    )[0]
    assert warning.find_element(By.CSS_SELECTOR, "button.keep").get_attribute("disabled")
    assert "used your 1 keep today" in warning.text and "save your notebooks first" in warning.text
    click(browser, warning.find_element(By.CSS_SELECTOR, "button.move-to-cpu"))
    flash = wait_until(lambda: browser.find_elements(By.ID, "gpulab-flash"), 30, "the move")
    assert "will start again with CPU only on the same home" in flash[0].text, flash[0].text
    wait_until(lambda: _server_profile(hub, "student") == "cpu", 120, "the CPU server")
    moved = ledger.get(held.id)
    assert not moved.open and moved.end_reason == "moved-to-cpu"
    assert ledger.open_allocations("student") == []  # the CPU server holds no slice
    browser.get(hub.url + PREFIX + "me")
    wait_until(
        lambda: "no GPU" in browser.find_element(By.CSS_SELECTOR, "#my-servers").text,
        30,
        "My GPU to show the CPU server",
        refresh=browser.refresh,
    )
    save_screenshot(browser, ARTIFACTS / "keep-moved.png")

    # the admin page counts the student's keep today
    browser.get(hub.url + "/hub/logout")
    log_in(browser, hub, "admin", PREFIX, heading="GPU lab")
    row = browser.find_element(By.CSS_SELECTOR, '#keeps-today tr.keeps-user[data-user="student"]')
    assert row.find_element(By.CSS_SELECTOR, ".keeps-used").text == "1"


def test_keeps_are_refused_on_the_api_once_used_up(hub, ledger):
    """The allowance on the API: the first Keep is granted, the second of the day is a 429 that
    says when it renews."""
    day = clear_of_midnight()  # the Keep taken below must count on this day
    used = ledger.keeps_used("student", day)
    hub.spawn_ready("student", {"profile": "mig-small"})
    gpu_idle_warning(ledger, "student", GPU_IDLE_S + 30)
    session = login(hub, "student")
    auth = {"Authorization": f"token {user_token(hub, session, 'student')}"}
    r = requests.post(hub.url + PREFIX + "api/users/student/server/keep", headers=auth, timeout=60)
    if used == 0:
        assert r.status_code == 200 and r.json()["used"] == 1 and r.json()["allowance"] == 1
        gpu_idle_warning(ledger, "student", GPU_IDLE_S)
        r = requests.post(
            hub.url + PREFIX + "api/users/student/server/keep", headers=auth, timeout=60
        )
    assert r.status_code == 429, r.text
    assert "used your 1 keep for today; it renews at 00:00" in r.json()["message"]
    assert ledger.keeps_used("student", day) == 1

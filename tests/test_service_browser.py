"""The admin page in a real browser (Debian's chromium, driven by Selenium with the system
chromedriver; nothing is downloaded), against a real hub whose GPUDockerSpawner runs real
containers (attach mode "env", the declared lab of ledger_support).

An admin logs in through the hub's login form, opens the gpulab page from the hub, drains a
device and sees it drained, stops a user's running server and sees its slice free. A screenshot
of the admin page is saved to ``test-artifacts/admin-page.png``. The one allocation written to
the ledger directly is the stale one the admin page must flag: a slice held with no server.
"""

from __future__ import annotations

import os
import signal

import pytest
from browser_support import ARTIFACTS, click, log_in, save_screenshot, wait_until
from leakcheck import unique
from service_support import (
    IMAGE,
    PREFIX,
    docker_problem,
    real_servers,
    require_or_skip,
    running_service_hub,
    service_pid,
)

from jupyterhub_gpulab.inventory import SliceKind, SliceRequest

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("lab_left_empty")]

MIG_1G = SliceRequest(kind=SliceKind.MIG, mig_profile="1g.5gb")


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    require_or_skip(docker_problem(), "Docker")
    prefix = unique("gpulabsvc")
    extra = real_servers(prefix, image=IMAGE, http_timeout=60, hold_rows=True)
    # node=prefix: containers the hub could not remove on the way down (ours only)
    with running_service_hub(
        tmp_path_factory.mktemp("browser-hub"), extra=extra, node=prefix
    ) as hub:
        yield hub


@pytest.mark.browser
def test_admin_drains_a_device_and_stops_a_server_in_the_browser(hub, ledger, browser):
    from selenium.webdriver.common.by import By

    # a researcher runs a real server, whose spawner claimed the A40; a student's allocation
    # is stale: no server holds it
    hub.spawn_ready("researcher", {"profile": "a40"})
    [a40] = ledger.open_allocations("researcher")
    assert a40.slice_id == "GPU-a40-0001"
    ledger.claim(MIG_1G, user="student", profile="mig-small", server_name="homework",
                 charge_groups=[("students", 3)])  # fmt: skip
    ledger.record_refusal("student", "mig-small", "quota", "You already hold 1 GPU slice")

    # log in through the hub's own login form, asking for the gpulab page
    log_in(browser, hub, "admin", PREFIX, heading="GPU lab")
    assert browser.find_element(By.CSS_SELECTOR, "h1").text.startswith("GPU lab")
    # it is a hub page: the hub's nav bar, logged in as admin
    assert browser.find_element(By.ID, "login_widget").text.startswith("admin")

    # drain the P40 and see it drained
    row = browser.find_element(By.CSS_SELECTOR, 'tr.device[data-uuid="GPU-p40-0003"]')
    row.find_element(By.NAME, "reason:GPU-p40-0003").send_keys("fan replacement")
    click(browser, row.find_element(By.CSS_SELECTOR, "button.drain"))
    flash = wait_until(
        lambda: browser.find_elements(By.ID, "gpulab-flash"), 30, "the drain message"
    )
    assert "drained" in flash[0].text
    row = browser.find_element(By.CSS_SELECTOR, 'tr.device[data-uuid="GPU-p40-0003"]')
    assert row.get_attribute("data-drained") == "true"
    assert "fan replacement" in row.find_element(By.CSS_SELECTOR, "td.device-state").text

    # the researcher's server shows as running (the service asks the hub every 2 s)
    alloc_row = f'tr.allocation[data-allocation="{a40.id}"]'
    wait_until(
        lambda: "running" in browser.find_element(By.CSS_SELECTOR, alloc_row).text,
        30,
        "the researcher's server to show as running",
        refresh=browser.refresh,
    )
    save_screenshot(browser, ARTIFACTS / "admin-page.png")

    # stop it, and see its slice free
    click(
        browser,
        browser.find_element(By.CSS_SELECTOR, alloc_row).find_element(
            By.CSS_SELECTOR, "button.stop"
        ),
    )
    wait_until(lambda: browser.find_elements(By.ID, "gpulab-flash"), 60, "the stop message")

    def a40_free():
        chip = browser.find_element(By.CSS_SELECTOR, 'span[data-slice="GPU-a40-0001"]')
        return chip.get_attribute("data-state") == "free" and not browser.find_elements(
            By.CSS_SELECTOR, alloc_row
        )

    wait_until(a40_free, 60, "the A40 to be free", refresh=browser.refresh)
    assert hub.server("researcher") is None
    assert not ledger.get(a40.id).open


def test_spawns_keep_working_while_the_service_is_down(hub, ledger):
    """The hub never waits on the service: with it frozen, a user still gets a GPU server."""
    pid = service_pid(hub)
    os.kill(pid, signal.SIGSTOP)
    try:
        hub.spawn_ready("instructor", {"profile": "mig-small"})
        [held] = ledger.open_allocations("instructor")
        hub.stop_server("instructor")
        assert not ledger.get(held.id).open
    finally:
        os.kill(pid, signal.SIGCONT)


@pytest.mark.browser
def test_student_finds_their_gpu_page_from_the_hub_home_page(hub, ledger, browser):
    from selenium.webdriver.common.by import By

    hub.spawn_ready("student", {"profile": "shared-seat"})
    [seat] = ledger.open_allocations("student")
    log_in(browser, hub, "student", "/hub/home")

    # the hub's own Services menu lists the service
    browser.find_element(By.LINK_TEXT, "Services").click()
    browser.find_element(By.CSS_SELECTOR, f'a.dropdown-item[href="{PREFIX}"]').click()
    wait_until(lambda: browser.current_url.endswith(PREFIX + "me"), 30, "the user page")
    card = browser.find_element(By.CSS_SELECTOR, f'div.slice[data-slice="{seat.slice_id}"]')
    assert "Tesla T4" in card.text and "shared seat" in card.text
    assert card.find_element(By.CSS_SELECTOR, ".isolation").text == "soft isolation"
    save_screenshot(browser, ARTIFACTS / "user-page.png")


@pytest.mark.browser
def test_a_student_sees_reserved_seats_then_is_offered_a_freed_slice(hub, ledger, browser):
    """The spawn form shows a course session's reservation as a badge (and keeps the profile
    from a student outside the course); then, queued for the profile, the student is told on the
    hub's home page that a freed slice is held for them."""
    from datetime import datetime, timedelta, timezone

    from selenium.webdriver.common.by import By

    start = datetime.now(timezone.utc) + timedelta(minutes=5)
    ledger.book(
        holder="DL101", groups=["dl101"], profile="mig-small", request=MIG_1G, count=2,
        starts_at=start, ends_at=start + timedelta(hours=2), lead_s=900, grace_s=600,
        ref="browser-dl101",
    )  # fmt: skip
    try:
        log_in(browser, hub, "student", "/hub/spawn")
        badge = browser.find_element(By.CSS_SELECTOR, ".gpulab-reserved")
        assert "2 of 2 reserved for DL101 until" in badge.text
        radio = browser.find_element(By.ID, "profile-mig-small")
        assert not radio.is_enabled()
        save_screenshot(browser, ARTIFACTS / "spawn-form-reserved.png")
    finally:
        ledger.cancel_booking(ref="browser-dl101")

    held = [
        ledger.claim(MIG_1G, user=u, profile="mig-small", server_name="x")
        for u in ("researcher", "instructor")
    ]
    ledger.join_waitlist("student", "mig-small", MIG_1G)
    try:
        ledger.release(held[0].allocation.id, "stopped")
        browser.get(f"{hub.url}/hub/home")
        banner = wait_until(
            lambda: [
                e for e in browser.find_elements(By.CSS_SELECTOR, ".gpulab-warnings li")
                if "held for you" in e.text
            ],
            60,
            "the offer on the hub's home page",
            refresh=browser.refresh,
        )  # fmt: skip
        assert "mig-small" in banner[0].text
        save_screenshot(browser, ARTIFACTS / "home-waitlist-offer.png")
    finally:
        ledger.leave_waitlist("student")


@pytest.mark.browser
def test_a_queued_student_s_open_page_notifies_them_of_the_offer(hub, ledger, browser):
    """On their gpulab page, a queued student who allowed notifications gets a browser
    notification when a slice is held for them, and the page shows the offer (it reloads)."""
    from selenium.webdriver.common.by import By

    browser.execute_cdp_cmd(
        "Browser.grantPermissions", {"origin": hub.url, "permissions": ["notifications"]}
    )
    # record what the page's own script shows (headless chromium displays nothing)
    browser.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument",
        {
            "source": "const Real = window.Notification;"
            "window.Notification = function (title, o) {"
            "  const seen = JSON.parse(sessionStorage.getItem('notes') || '[]');"
            "  seen.push(title + ': ' + (o && o.body)); sessionStorage.setItem('notes', JSON.stringify(seen));"
            "  return new Real(title, o); };"
            "Object.defineProperty(window.Notification, 'permission', {get: () => Real.permission});"
            "window.Notification.requestPermission = (...a) => Real.requestPermission(...a);"
        },
    )
    held = [
        ledger.claim(MIG_1G, user=u, profile="mig-small", server_name="x")
        for u in ("researcher", "instructor")
    ]
    try:
        log_in(browser, hub, "student", f"{PREFIX}me", heading="My GPU")
        join = wait_until(
            lambda: browser.find_elements(
                By.CSS_SELECTOR, "form.join-waitlist[data-profile='mig-small'] button"
            ),
            30,
            "the join button",
        )
        # chromedriver misplaces clicks below the first screen of the hub's page layout (the
        # button is the topmost element at its point): click it as the page's own script would
        browser.execute_script("arguments[0].click()", join[0])
        wait_until(
            lambda: browser.execute_script(
                "const e = document.querySelector('.waitlist-entry');"
                "return e && e.dataset.state === 'waiting';"
            ),
            30,
            "my place in the queue",
        )
        ledger.release(held[0].allocation.id, "stopped")
        notes = wait_until(
            lambda: browser.execute_script("return JSON.parse(sessionStorage.getItem('notes') || '[]')"),
            90,
            "the browser notification",
        )  # fmt: skip
        assert "held for you" in notes[0] and "mig-small" in notes[0]
        wait_until(
            lambda: browser.execute_script(
                "const e = document.querySelector('.waitlist-entry');"
                "return e && e.dataset.state === 'offered';"
            ),
            30,
            "the offer on the reloaded page",
        )
        save_screenshot(browser, ARTIFACTS / "user-page-waitlist-offer.png")
    finally:
        ledger.leave_waitlist("student")
        for h in held:
            ledger.release(h.allocation.id, "test-cleanup")

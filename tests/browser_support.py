"""Driving a real browser in tests: Debian's chromium through Selenium with the system chromedriver
(nothing is downloaded). The ``browser`` fixture (conftest.py) opens one with :func:`chromium`;
the helpers here are how every browser test logs in, waits, clicks and saves screenshots.

Screenshots land in ``test-artifacts/`` at the repository root (:data:`ARTIFACTS`); the docs'
student and instructor guides use them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: where screenshots go: ``<repo>/test-artifacts``
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


def browser_problem() -> str | None:
    """``None`` when a headless chromium can be driven here, else what is missing and how to
    install it."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (os.path.exists(path) and os.access(path, os.X_OK)):
            return f"{path} is missing (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


@contextmanager
def chromium() -> Iterator:
    """A headless chromium (1400 x 1000 px window, 60 s page-load timeout) as a Selenium
    ``WebDriver``, quit afterwards. Call :func:`browser_problem` first."""
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never reach for the network
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000"):  # fmt: skip
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def wait_until(check, timeout: float, what: str, refresh=None):
    """``check()``'s first truthy result, tried every 0.5 s (a stale element counts as not yet);
    ``refresh()`` between tries when given; AssertionError naming ``what`` after ``timeout``
    seconds."""
    from selenium.common.exceptions import StaleElementReferenceException

    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
        except StaleElementReferenceException:  # the page was reloaded under the check
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.5)
        if refresh:
            refresh()


def log_in(browser, hub, name: str, path: str, heading: str | None = None) -> None:
    """Log ``name`` in through the hub's login form, asking for ``path``, and wait until the
    browser shows that page's final document (its ``h1`` holding ``heading``, when given; a
    ``path`` ending in ``spawn`` also matches the user's own ``spawn/<user>``).

    A login goes through redirects (the hub, the service's OAuth dance); the URL can name the
    page while the document is still being replaced, so a test that read an element right after
    the URL check could get a stale element. This reads the document in one script call instead
    and waits until it is complete and at the page."""
    from selenium.webdriver.common.by import By

    browser.get(f"{hub.url}/hub/login?next={path}")
    browser.find_element(By.ID, "username_input").send_keys(name)
    browser.find_element(By.ID, "password_input").send_keys("any password")
    browser.find_element(By.ID, "login_submit").click()

    def at_page():
        where, state, h1 = browser.execute_script(
            "const h = document.querySelector('h1');"
            "return [location.pathname, document.readyState, h ? h.textContent : ''];"
        )
        there = where.startswith(path) if path.endswith("spawn") else where == path
        return there and state == "complete" and (heading is None or heading in h1)

    wait_until(at_page, 30, f"{name}'s {path} after login")


def click(driver, element, timeout: float = 10) -> None:
    """Click ``element`` as a user would: scrolled to the middle of the window first, and again
    while something still covers it (the page settling after a resize or a reload)."""
    from selenium.common.exceptions import ElementClickInterceptedException

    deadline = time.monotonic() + timeout
    while True:
        # instant: Bootstrap's reboot makes scrolling smooth, and a click during the animation
        # lands where the element was (and each retry would restart the animation)
        driver.execute_script(
            "arguments[0].scrollIntoView({block: 'center', behavior: 'instant'});", element
        )
        try:
            element.click()
            return
        except ElementClickInterceptedException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def save_screenshot(driver, path: Path) -> None:
    """A PNG of the whole page at ``path`` (the window grown to the page's height, 800-4000 px,
    then set back to 1400 x 1000)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1400, min(max(height + 120, 800), 4000))
    driver.save_screenshot(str(path))
    driver.set_window_size(1400, 1000)


def start_all_and_wait(driver, timeout: float = 300) -> None:
    """On a course page: click "Start all" and wait (reloading) until the progress summary says
    "ready" and no longer "(updating)"."""
    from selenium.webdriver.common.by import By

    click(driver, driver.find_element(By.ID, "start-all"))
    wait_until(
        lambda: (
            "ready" in driver.find_element(By.ID, "progress-summary").text
            and "(updating)" not in driver.find_element(By.ID, "progress-summary").text
        ),
        timeout,
        "the start-all to finish",
        refresh=driver.refresh,
    )

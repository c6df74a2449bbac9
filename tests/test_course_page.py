"""The course page reads like a course, in a real browser over a real hub, the gpulab service and
real containers: a staff member sees each student's slice as people name it, why a student's
server did not start in the staff's words, each collect's report kept in the assignment table
(not a flash that vanishes), the reservation settings as a sentence, the raw record behind an
"Advanced" fold, and a link to their own course server, whose spawn form offers the course's
profile (the hub's course hook starts that one whatever else is picked).

Two students, so it stays quick: bob's course server starts on a T4 seat; ann's own default
server already holds the one GPU slice her group allows, so her course server is refused."""

from __future__ import annotations

import subprocess

import pytest
import requests
from browser_support import (
    ARTIFACTS,
    click,
    log_in,
    save_screenshot,
    start_all_and_wait,
    wait_until,
)
from course_support import containers_of, running_course
from e2e_support import require_docker
from service_support import POLICIES, PREFIX, login, user_token

pytestmark = [pytest.mark.docker, pytest.mark.browser, pytest.mark.usefixtures("api_contract")]

COURSE = {
    "slug": "dl101",
    "title": "Deep learning 101",
    "roster_group": "dl101",
    "staff_group": "dl101-staff",
    "profiles": ["course-seat"],
}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    require_docker()
    policies = {**POLICIES, "dl101": {"max_slices_per_user": 1}}
    with running_course(
        tmp_path_factory.mktemp("course-page"),
        COURSE,
        ["ann", "bob"],
        ["tina"],
        extra=f"c.GPULab.group_policies = {policies!r}",
    ) as hub:
        token = user_token(hub, login(hub, "tina"), "tina")
        yield hub, token


def test_a_staff_members_course_page_reads_like_a_course(lab, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    hub, token = lab
    # ann's one slice (her group's limit) is held by her own default server
    r = hub.spawn("ann", {"profile": "shared-seat"})
    assert r.status_code in (201, 202), r.text
    b = browser
    try:
        hub.wait_ready("ann", timeout=180)
        log_in(b, hub, "tina", f"{PREFIX}courses/dl101", heading="Deep learning 101")
        # the settings as a sentence; the raw record folded away
        seats = b.find_element(By.ID, "seats-form").text
        assert "minutes before each session" in seats and "return to everyone" in seats
        advanced = b.find_element(By.ID, "advanced")
        assert advanced.get_attribute("open") is None
        assert not b.find_element(By.ID, "record-json").is_displayed()

        start_all_and_wait(b)
        rows = {
            r.get_attribute("data-user"): r for r in b.find_elements(By.CSS_SELECTOR, "tr.student")
        }
        bob_slice = rows["bob"].find_element(By.CSS_SELECTOR, "td.slice").text
        assert "seat" in bob_slice and "of 4" in bob_slice and "Tesla T4" in bob_slice, bob_slice
        assert "GPU-" not in bob_slice  # not the slice's id
        why = rows["ann"].find_element(By.CSS_SELECTOR, ".reason").text
        assert "ann already holds as many GPU slices as their groups allow" in why, why
        assert "Stop one of your servers" not in why
        summary = b.find_element(By.ID, "progress-summary").text
        assert "1 refused: they already hold as many GPU slices" in summary, summary
        save_screenshot(b, ARTIFACTS / "course-page-reads-started.png")

        # bob hands in hw1; the collect's report stays in the assignment table
        form = b.find_element(By.ID, "add-assignment")
        form.find_element(By.NAME, "name").send_keys("hw1")
        click(b, form.find_element(By.CSS_SELECTOR, "button"))
        wait_until(
            lambda: b.find_elements(By.CSS_SELECTOR, "tr.assignment[data-name='hw1']"),
            60,
            "the assignment hw1",
        )
        bob = containers_of(hub.node, "dl101")["bob"]
        subprocess.run(
            ["docker", "exec", bob, "sh", "-c",
             "mkdir -p ~/assignments/hw1 && echo 'answer' > ~/assignments/hw1/answer.py"],
            check=True,
        )  # fmt: skip
        b.refresh()
        b.find_element(By.ID, "collect-assignment").send_keys("hw1")
        click(b, b.find_element(By.ID, "collect"))
        wait_until(lambda: b.find_elements(By.ID, "gpulab-flash"), 60, "the collect message")
        b.get(f"{hub.url}{PREFIX}courses/dl101")  # a later visit: no flash, the report stays
        assert not b.find_elements(By.ID, "gpulab-flash")
        row = b.find_element(By.CSS_SELECTOR, "tr.assignment[data-name='hw1']")
        collected = row.find_element(By.CSS_SELECTOR, "td.collected").text
        assert "by tina: 1 of 2 submitted (bob)" in collected, collected
        assert "ann: missing" in collected, collected
        assert row.find_element(By.CSS_SELECTOR, "td.returned").text == "not yet"
        auth = {"Authorization": f"token {token}"}
        view = requests.get(hub.url + PREFIX + "api/courses/dl101", headers=auth, timeout=60)
        [hw1] = [a for a in view.json()["assignments"] if a["name"] == "hw1"]
        assert hw1["last_collect"]["done"] == ["bob"] and hw1["last_collect"]["who"] == "tina"
        assert view.json()["my_server"] == {"user": "tina", "state": "stopped", "url": None}
        # an admin off the staff has no staff folder in their course server: no link for them
        admin = {"Authorization": f"token {user_token(hub, login(hub, 'admin'), 'admin')}"}
        as_admin = requests.get(hub.url + PREFIX + "api/courses/dl101", headers=admin, timeout=60)
        assert as_admin.status_code == 200 and as_admin.json()["my_server"] is None

        # her own course server holds the collected work: the page links its spawn page
        link = b.find_element(By.ID, "open-collected")
        assert link.text == "Open the collected work"
        assert link.get_attribute("href").endswith("/hub/spawn/tina/dl101")
        save_screenshot(b, ARTIFACTS / "course-page-reads-collected.png")
        click(b, link)
        wait_until(lambda: b.find_elements(By.NAME, "profile"), 60, "tina's spawn form")
        radios = {r.get_attribute("value"): r for r in b.find_elements(By.NAME, "profile")}
        assert list(radios) == ["course-seat"], list(radios)  # the one the hook starts
        assert radios["course-seat"].is_selected()
        assert (
            "your server for the course Deep learning 101"
            in b.find_element(By.CSS_SELECTOR, ".gpulab-notice").text
        )
        save_screenshot(b, ARTIFACTS / "course-page-staff-spawn-form.png")
    finally:
        for user, name in (("ann", ""), ("ann", "dl101"), ("bob", "dl101")):
            if hub.server(user, name) is not None:
                hub.stop_server(user, name)

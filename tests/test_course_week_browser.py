"""The instructor's week, end to end, in a real browser over a real hub, the gpulab service, real
course servers (the lab image's nbgitpuller) and a repository served by ``git daemon`` on the
Docker bridge (issue 25's "Done when").

An admin creates the course on the courses page; its instructor adds the repository, a session
and an assignment, presses Start all (the roster says "pulled at …" per student), a student
writes their work in their own course server, Collect reports "1 of 2 submitted", the
instructor writes feedback in *their* course server (its Jupyter contents API with their own
token: the server's own user, uid 1000, writes it), Return reports "1 of 2 returned" and the
student reads the feedback in their course server. A screenshot of the course page after each
step lands in ``test-artifacts/course-week-*.png``."""

from __future__ import annotations

import subprocess
from datetime import datetime, timedelta

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
from course_support import GitServer, containers_of, course_hub, remove_volumes
from e2e_support import remove_node_containers, require_docker
from service_support import PREFIX, login, user_token, wait_for_service

from jupyterhub_gpulab.lab.names import folder_name

pytestmark = [pytest.mark.docker, pytest.mark.browser, pytest.mark.usefixtures("api_contract")]

SLUG = "wk101"
STUDENTS = ["ann", "bob"]
# course_hub declares one course in the config; the week's course is made on the page
PLACEHOLDER = {"slug": "intro", "title": "Placeholder", "profiles": ["course-lab"]}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    require_docker()
    tmp = tmp_path_factory.mktemp("course-week")
    repo = GitServer(tmp / "git")
    repo.commit({"lesson1.py": "print('week 1')\n"}, "week 1")
    hub = course_hub(tmp, PLACEHOLDER)
    try:
        hub.start()
        wait_for_service(hub)
        for u in STUDENTS:
            hub.create_user(u, [SLUG])
        hub.create_user("tina", [f"{SLUG}-staff"])
        tokens = {u: user_token(hub, login(hub, u), u) for u in ["tina", *STUDENTS]}
        yield hub, repo, tokens
    finally:
        try:
            hub.stop()
        finally:
            remove_node_containers(hub.node)
            remove_volumes(hub.node)
            repo.stop()


def contents(hub, token: str, user: str, method: str, path: str, **kw) -> requests.Response:
    """``user``'s course server's Jupyter contents API at ``path`` (relative to its home)."""
    url = f"{hub.url}/user/{user}/{SLUG}/api/contents/{path}"
    return requests.request(
        method, url, headers={"Authorization": f"token {token}"}, timeout=60, **kw
    )


def put_file(hub, token: str, user: str, path: str, text: str) -> None:
    parts = path.split("/")
    for i in range(1, len(parts)):
        r = contents(hub, token, user, "PUT", "/".join(parts[:i]), json={"type": "directory"})
        assert r.status_code in (200, 201), r.text
    body = {"type": "file", "format": "text", "content": text}
    r = contents(hub, token, user, "PUT", path, json=body)
    assert r.status_code in (200, 201), r.text


def test_the_instructors_week_in_the_browser(lab, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    hub, repo, tokens = lab
    b = browser
    page = f"{hub.url}{PREFIX}courses/{SLUG}"

    def shot(step: str) -> None:
        save_screenshot(b, ARTIFACTS / f"course-week-{step}.png")

    def flash(old=None) -> str:
        """The page's message once the page that shows it has loaded: not ``old`` (the message of
        the page the button was pressed on, which the browser may still show for a moment, then
        drop: its text is read inside the wait, which takes a stale element as "not yet")."""

        def shown():
            found = b.find_elements(By.ID, "gpulab-flash")
            return [found[0].text] if found and found[0] != old else None

        return wait_until(shown, 60, "the message")[0]

    def press(button) -> str:
        """Press ``button`` (it posts a form); the message of the page it leads to."""
        old = b.find_elements(By.ID, "gpulab-flash")
        click(b, button)
        return flash(old[0] if old else None)

    def submit(form: str, fields: dict[str, str], button: str = "button") -> str:
        """Fill the form (a CSS selector) and press its ``button``; the page's message."""
        form = b.find_element(By.CSS_SELECTOR, form)
        for name, value in fields.items():
            field = form.find_element(By.NAME, name)
            # date/time inputs take their value as the form sends it (keys are locale-bound)
            b.execute_script("arguments[0].value = arguments[1];", field, value)
        return press(form.find_element(By.CSS_SELECTOR, button))

    try:
        # Monday: an admin creates the course on the courses page
        log_in(b, hub, "admin", f"{PREFIX}courses", heading="Courses")
        b.find_element(By.ID, "slug").send_keys(SLUG)
        b.find_element(By.ID, "title").send_keys("Week 101")
        b.find_element(By.CSS_SELECTOR, "#profile option[value='course-lab']").click()
        click(b, b.find_element(By.ID, "create-course"))
        wait_until(lambda: "Week 101" in b.find_element(By.TAG_NAME, "h1").text, 60, "the page")
        b.get(f"{hub.url}{PREFIX}courses")
        assert b.find_elements(By.CSS_SELECTOR, f"tr.course[data-course='{SLUG}']")
        b.delete_all_cookies()  # the service's login (the cookies this page gets)
        b.get(f"{hub.url}/hub/logout")  # and the hub's

        # its instructor (staff, not an admin) sets it up: the repository, a session, hw1
        log_in(b, hub, "tina", f"{PREFIX}courses/{SLUG}", heading="Week 101")
        shot("1-created")
        said = submit("#content form:has(#add-repo)", {"repo": repo.url, "dir": SLUG}, "#add-repo")
        assert said == f"Added {repo.url}: pulled at every start, or now with Distribute.", said
        assert repo.url in b.find_element(By.CSS_SELECTOR, "#content li.source").text
        shot("2-repository")
        day = (datetime.now() + timedelta(days=2)).replace(hour=10, minute=0, second=0)
        start, end = (
            day.strftime("%Y-%m-%dT%H:%M"),
            (day + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M"),
        )
        said = submit("#add-date", {"start": start, "end": end}, "#add-session")
        assert said == f"Session added: {start} to {end}.", said
        assert b.find_elements(By.CSS_SELECTOR, "tr.session"), "no session row"
        assert "No session in the next 60 days" not in b.find_element(By.ID, "sessions").text
        shot("3-session")
        said = submit("#add-assignment", {"name": "hw1"})
        assert said == "Assignment hw1 added.", said

        # Start all: every student's course server starts and pulls the repository
        start_all_and_wait(b)
        summary = b.find_element(By.ID, "progress-summary").text
        assert "2 ready" in summary, summary
        cells = {
            r.get_attribute("data-user"): r.find_element(By.CSS_SELECTOR, "td.content").text
            for r in b.find_elements(By.CSS_SELECTOR, "tr.student")
        }
        assert set(cells) == set(STUDENTS), cells
        assert all(c.startswith("pulled at ") for c in cells.values()), cells
        shot("4-started")

        # a student's work, written in their own course server (as the student)
        r = contents(hub, tokens["bob"], "bob", "GET", f"{SLUG}/lesson1.py")
        assert r.status_code == 200 and r.json()["content"] == "print('week 1')\n", r.text
        put_file(hub, tokens["bob"], "bob", "assignments/hw1/answer.py", "answer = 42\n")

        # Collect: the report stays in the assignment table
        b.get(page)
        b.find_element(By.ID, "collect-assignment").send_keys("hw1")
        press(b.find_element(By.ID, "collect"))
        b.get(page)
        row = b.find_element(By.CSS_SELECTOR, "tr.assignment[data-name='hw1']")
        collected = row.find_element(By.CSS_SELECTOR, "td.collected").text
        assert "by tina: 1 of 2 submitted (bob)" in collected, collected
        assert "ann: missing" in collected, collected
        assert row.find_element(By.CSS_SELECTOR, "td.returned").text == "not yet"
        shot("5-collected")

        # feedback, written in the instructor's own course server (its user, uid 1000)
        r = hub.spawn("tina", name=SLUG)
        assert r.status_code in (201, 202), r.text
        hub.wait_ready("tina", SLUG, timeout=180)
        staff = f"{SLUG}-staff"
        r = contents(hub, tokens["tina"], "tina", "GET", f"{staff}/collected/hw1/bob")
        assert r.status_code == 200, r.text
        [stamp] = [e["name"] for e in r.json()["content"]]
        got = contents(
            hub, tokens["tina"], "tina", "GET", f"{staff}/collected/hw1/bob/{stamp}/answer.py"
        )
        assert got.status_code == 200 and got.json()["content"] == "answer = 42\n", got.text
        note = f"{staff}/feedback/hw1/{folder_name('bob')}/notes.txt"
        put_file(hub, tokens["tina"], "tina", note, "well done, bob\n")
        ta = containers_of(hub.node, SLUG)["tina"]
        uid = subprocess.run(["docker", "exec", ta, "stat", "-c", "%u", f"/home/jovyan/{note}"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        assert uid == "1000", uid

        # Return: the report stays too
        b.get(page)
        b.find_element(By.ID, "return-assignment").send_keys("hw1")
        press(b.find_element(By.ID, "return"))
        b.get(page)
        row = b.find_element(By.CSS_SELECTOR, "tr.assignment[data-name='hw1']")
        returned = row.find_element(By.CSS_SELECTOR, "td.returned").text
        assert "by tina: 1 of 2 returned (bob)" in returned, returned
        shot("6-returned")

        # the student reads it in their course server
        r = contents(hub, tokens["bob"], "bob", "GET", "feedback/hw1/notes.txt")
        assert r.status_code == 200, r.text
        assert r.json()["content"] == "well done, bob\n"
    finally:
        for user in ("tina", *STUDENTS):
            if hub.server(user, SLUG) is not None:
                hub.stop_server(user, SLUG)

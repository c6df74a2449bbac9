"""Course content as staff see it, end to end: a real hub with the gpulab service, real course
servers (the lab image's nbgitpuller), real repositories served by ``git daemon``.

In order: Start all, and the roster says per student "pulled at …"; the instructor force-pushes a
new root: Distribute (running servers) and the next start (a stopped one) keep each student's
copy in ``~/ml101_backup_…`` and bring the new version, and the page and the API say "history
rewritten: your copy kept in …"; a repository the service's host reaches but the containers
cannot (``git://127.0.0.1``) is refused when added; a repository that stops answering shows
as failed per student, in one line, on the page and in the API.
"""

from __future__ import annotations

import subprocess

import pytest
from course_support import (
    GitServer,
    containers_of,
    read_home,
    running_course,
    wait_prestart,
    work_of,
)
from e2e_support import require_docker
from html_support import parse_html
from service_support import PREFIX, login, user_token
from service_support import service_api as api

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("api_contract")]

STUDENTS = ["s1", "s2", "s3"]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    require_docker()
    tmp = tmp_path_factory.mktemp("content")
    repo = GitServer(tmp / "git")
    repo.commit({"intro.py": "print('week 1')\n"}, "week 1")
    source = {"repo": repo.url, "branch": "main", "dir": "ml101"}
    course = {"slug": "ml101", "title": "ML 101", "profiles": ["course-lab"], "content": [source]}
    try:
        with running_course(tmp, course, STUDENTS, ["ta1"]) as hub:
            session = login(hub, "ta1")
            yield hub, repo, user_token(hub, session, "ta1"), session, tmp
    finally:
        repo.stop()


def roster(hub, token) -> dict[str, dict | None]:
    view = api(hub, token, "GET", "courses/ml101")
    assert view.status_code == 200, view.text
    return {r["user"]: r["content"] for r in view.json()["roster"]}


def page_cells(session, hub) -> dict[str, tuple[str, str]]:
    """``{student: (content state, the cell's text)}`` of the course page's roster."""
    r = session.get(hub.url + PREFIX + "courses/ml101", timeout=60)
    assert r.status_code == 200, r.text[:300]
    doc = parse_html(r.text)
    out = {}
    for row in doc.find_all("tr", cls="student"):
        cell = row.find("td", cls="content")
        out[row.attrs["data-user"]] = (cell.attrs.get("data-content"), cell.text())
    return out


def test_start_all_and_the_roster_says_when_each_student_got_the_content(lab):
    hub, repo, token, session, _ = lab
    r = api(hub, token, "POST", "courses/ml101/start")
    assert r.status_code == 202, r.text
    p = wait_prestart(hub, token, "ml101")
    assert p["counts"].get("ready") == 3, p
    content = roster(hub, token)
    assert {u: c["state"] for u, c in content.items()} == {u: "pulled" for u in STUDENTS}
    assert all(c["message"].startswith("pulled at ") for c in content.values()), content
    cells = page_cells(session, hub)
    assert {u: s for u, (s, _) in cells.items()} == {u: "pulled" for u in STUDENTS}
    assert cells["s1"][1].startswith("pulled at ")


def test_a_force_push_keeps_each_students_copy_and_brings_the_new_version(lab):
    hub, repo, token, session, _ = lab
    cid = containers_of(hub.node, "ml101")["s1"]
    subprocess.run(
        ["docker", "exec", cid, "sh", "-c", "echo '# my answer' >> /home/jovyan/ml101/intro.py"],
        check=True,
    )
    hub.stop_server("s3", "ml101")
    repo.rewrite({"lesson1.py": "print('the new course')\n"})
    r = api(hub, token, "POST", "courses/ml101/distribute")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["message"] == "Pulled into 2 of 2 running servers.", body
    assert body["report"]["s3"] == "not running"
    line = body["report"]["s1"]
    assert line.startswith("history rewritten: your copy kept in ~/ml101_backup_"), line
    assert "; pulled at " in line
    backup = body["content"]["s1"]["sources"][0]["backup"]
    home = work_of(hub.node, "ml101", "s1")  # course work lives in its course volume
    assert "# my answer" in read_home(home, f"{backup}/intro.py")
    assert read_home(home, "ml101/lesson1.py") == "print('the new course')\n"
    assert read_home(home, "ml101/intro.py") is None
    # the stopped student gets the same at their next start
    r = hub.spawn("s3", name="ml101")
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("s3", "ml101", timeout=180)
    assert (
        read_home(work_of(hub.node, "ml101", "s3"), "ml101/lesson1.py")
        == "print('the new course')\n"
    )
    content = roster(hub, token)
    assert {u: c["state"] for u, c in content.items()} == {u: "kept" for u in STUDENTS}
    cells = page_cells(session, hub)
    assert cells["s3"][1].startswith("history rewritten: your copy kept in ~/ml101_backup_")
    audit = api(hub, token, "GET", "courses/ml101/audit").json()["audit"]
    assert audit[0]["action"] == "distribute"


def test_a_repository_the_containers_cannot_reach_is_refused_when_added(lab):
    hub, repo, token, session, tmp = lab
    local = GitServer(tmp / "local", name="local", host="127.0.0.1")
    try:
        local.commit({"a.py": "1\n"})
        # reachable from the service's host (the old check said yes)…
        ok = subprocess.run(["git", "ls-remote", local.url], capture_output=True)
        assert ok.returncode == 0
        before = api(hub, token, "GET", "courses/ml101").json()["course"]
        record = {"content": before["content"] + [{"repo": local.url, "dir": "local"}]}
        r = api(hub, token, "PUT", "courses/ml101", json=record)
        # …but not from where the pulls run
        assert r.status_code == 400, r.text
        message = r.json()["message"]
        assert "cannot be reached or read from the course's servers" in message, message
        assert "Connection refused" in message and "Traceback" not in message
        assert api(hub, token, "GET", "courses/ml101").json()["course"] == before
    finally:
        local.stop()


def test_a_repository_that_stops_answering_shows_as_failed_per_student(lab):
    hub, repo, token, session, tmp = lab
    extra = GitServer(tmp / "extra", name="extra")
    extra.commit({"data.csv": "x\n"})
    before = api(hub, token, "GET", "courses/ml101").json()["course"]
    record = {"content": before["content"] + [{"repo": extra.url, "dir": "extra"}]}
    r = api(hub, token, "PUT", "courses/ml101", json=record)
    assert r.status_code == 200, r.text
    extra.stop()  # the instructor's server goes away
    r = api(hub, token, "POST", "courses/ml101/distribute")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["message"].startswith("Pulled into 0 of 3 running servers. Failed in 3: s1, s2, s3")
    line = body["report"]["s2"]
    assert line.startswith("failed: ~/extra: cannot read the repository: fatal:"), line
    assert "Connection refused" in line and "\n" not in line and "Traceback" not in line
    content = roster(hub, token)
    assert {u: c["state"] for u, c in content.items()} == {u: "failed" for u in STUDENTS}
    by_dir = {s["dir"]: s["state"] for s in content["s2"]["sources"]}
    assert by_dir == {"ml101": "pulled", "extra": "failed"}
    cells = page_cells(session, hub)
    assert cells["s2"] == ("failed", line)

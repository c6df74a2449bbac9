"""The course content pull (:func:`jupyterhub_gpulab.courses.content.pull_script`) as it runs in
a course server: the lab image's own git and nbgitpuller in a real container, a home folder
mounted as the home, a real repository served by ``git daemon`` on the Docker bridge. No hub:
each pull is one ``docker run`` of the script a start or Distribute runs.

What a student and an instructor would notice: a normal update keeps the student's edit in
place; a force-push (a new root, an amended commit) or a folder that is no clone no longer
fails every start: the student's copy is kept in ``~/<dir>_backup_<time>``, the new version is
in place, and the status says so in one line; an unreachable repository is a one-line failure,
not a traceback.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
from course_support import LAB_IMAGE, GitServer
from e2e_support import require_docker
from hubtools import DOCKER_GATEWAY

from jupyterhub_gpulab.courses.content import STATUS, pull_script
from jupyterhub_gpulab.courses.contentstatus import describe, parse_status
from jupyterhub_gpulab.courses.records import ContentSource

pytestmark = pytest.mark.docker

HOME = "/home/jovyan"
JOVYAN = (1000, 100)


@pytest.fixture
def repo(tmp_path):
    require_docker()
    server = GitServer(tmp_path / "git")
    server.commit({"intro.py": "print('week 1')\n", "README.md": "ML 101\n"}, "week 1")
    yield server
    server.stop()


@pytest.fixture
def home(tmp_path):
    h = tmp_path / "home"
    h.mkdir()
    os.chown(h, *JOVYAN)
    return h


def pull(home: Path, *sources: ContentSource) -> tuple:
    """Run the pull of ``sources`` in a lab container on ``home``; the status it wrote."""
    r = subprocess.run(
        ["docker", "run", "--rm", "--user", "1000:100", "-v", f"{home}:{HOME}", "--entrypoint",
         "sh", LAB_IMAGE, "-c", pull_script(sources, HOME)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return parse_status((home / STATUS).read_text())


def as_student(home: Path, script: str) -> None:
    subprocess.run(
        ["docker", "run", "--rm", "--user", "1000:100", "-v", f"{home}:{HOME}", "--entrypoint",
         "sh", "-w", HOME, LAB_IMAGE, "-c", script],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip


def backups(home: Path, d: str) -> list[Path]:
    return sorted(home.glob(f"{d}_backup_*"))


def test_an_update_merges_in_place_and_keeps_the_students_edit(repo, home):
    src = ContentSource(repo.url, "main", "ml101")
    (first,) = pull(home, src)
    assert (first.state, first.dir, first.backup) == ("pulled", "ml101", "")
    as_student(home, "echo '# my answer' >> ml101/intro.py")
    repo.commit({"week2.py": "print('week 2')\n"}, "week 2")
    (again,) = pull(home, src)
    assert again.state == "pulled" and again.backup == "", again
    assert "# my answer" in (home / "ml101/intro.py").read_text()
    assert (home / "ml101/week2.py").read_text() == "print('week 2')\n"
    assert backups(home, "ml101") == []  # a normal update never moves the folder aside


def test_a_force_pushed_new_root_keeps_the_students_copy_and_brings_the_new_version(repo, home):
    src = ContentSource(repo.url, "main", "ml101")
    pull(home, src)
    as_student(home, "echo '# my answer' >> ml101/intro.py && echo notes > ml101/mine.txt")
    repo.rewrite({"lesson1.py": "print('new course')\n"})
    (s,) = pull(home, src)
    assert s.state == "kept" and s.reason == "history rewritten", s
    (kept,) = backups(home, "ml101")
    assert s.backup == kept.name
    assert "# my answer" in (kept / "intro.py").read_text()
    assert (kept / "mine.txt").read_text() == "notes\n"
    assert (home / "ml101/lesson1.py").read_text() == "print('new course')\n"
    assert not (home / "ml101/intro.py").exists()
    line = describe((s,), lambda t: "NOW")["message"]
    assert line == f"history rewritten: your copy kept in ~/{kept.name}; pulled at NOW"
    # …and the next start is a normal pull again, not one more backup
    repo.commit({"lesson2.py": "print('2')\n"}, "lesson 2")
    (s,) = pull(home, src)
    assert s.state == "pulled" and len(backups(home, "ml101")) == 1
    assert (home / "ml101/lesson2.py").exists()


def test_an_amended_commit_is_a_rewritten_history_too(repo, home):
    src = ContentSource(repo.url, "main", "ml101")
    repo.commit({"week2.py": "print('week 2')\n"}, "week 2")
    pull(home, src)
    as_student(home, "echo '# mine' >> ml101/week2.py")
    repo.amend({"week2.py": "print('week 2, fixed')\n"})
    (s,) = pull(home, src)
    assert (s.state, s.reason) == ("kept", "history rewritten"), s
    assert "# mine" in (home / s.backup / "week2.py").read_text()
    assert (home / "ml101/week2.py").read_text() == "print('week 2, fixed')\n"


def test_a_folder_that_is_no_clone_is_kept_aside(repo, home):
    as_student(home, "mkdir ml101 && echo draft > ml101/draft.txt")
    (s,) = pull(home, ContentSource(repo.url, "main", "ml101"))
    assert (s.state, s.reason) == ("kept", "not a clone of the repository"), s
    assert (home / s.backup / "draft.txt").read_text() == "draft\n"
    assert (home / "ml101/intro.py").exists()


def test_an_unreachable_repository_fails_in_one_line_and_the_others_are_pulled(repo, home):
    # 127.0.0.1 inside the container is the container itself: nothing serves git there
    bad = ContentSource("git://127.0.0.1:9418/course.git", "main", "extra")
    missing = ContentSource(repo.url, "week9", "later")
    statuses = pull(home, bad, ContentSource(repo.url, "main", "ml101"), missing)
    by_dir = {s.dir: s for s in statuses}
    assert by_dir["ml101"].state == "pulled"
    assert by_dir["extra"].state == "failed"
    assert by_dir["extra"].reason.startswith("cannot read the repository: fatal:"), by_dir
    assert "Connection refused" in by_dir["extra"].reason
    assert by_dir["later"].reason == "the repository has no branch week9"
    message = describe(statuses, lambda t: "NOW")["message"]
    assert message.startswith("failed: ~/extra: cannot read the repository: fatal:")
    assert "Traceback" not in message and "\n" not in message
    log = (home / ".gpulab/content.log").read_text()
    assert "gpulab: could not pull git://127.0.0.1:9418/course.git (main) into ~/extra" in log


def test_while_a_pull_runs_the_last_starts_status_is_not_shown(repo, home):
    src = ContentSource(repo.url, "main", "ml101")
    pull(home, src)
    assert (home / STATUS).exists()
    # a repository that accepts the connection and never answers: the pull waits for it
    silent = socket.socket()
    silent.bind((DOCKER_GATEWAY, 0))
    silent.listen()
    port = silent.getsockname()[1]
    hanging = ContentSource(f"git://{DOCKER_GATEWAY}:{port}/x.git", "main", "slow")
    name = f"gpulab-content-test-{port}"
    subprocess.run(
        ["docker", "run", "-d", "--name", name, "--user", "1000:100", "-v", f"{home}:{HOME}",
         "--entrypoint", "sh", LAB_IMAGE, "-c", pull_script((src, hanging), HOME)],
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (home / ".gpulab/content.status.new").exists():
            assert time.monotonic() < deadline, "the pull did not start"
            time.sleep(0.2)
        assert not (home / STATUS).exists()
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
        silent.close()

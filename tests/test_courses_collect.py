"""Collect and return through real Docker volumes written by the lab image's own user (jovyan),
read and written back by gpulab through never-started containers (no shared folder, no uids
assumed)."""

from __future__ import annotations

import subprocess

import docker
import pytest
from course_support import LAB_IMAGE, read_home, remove_volumes
from e2e_support import require_docker
from leakcheck import unique

from jupyterhub_gpulab.courses.collect import VolumeFiles, collect, give_back

pytestmark = pytest.mark.docker


def as_student(volume: str, script: str) -> None:
    subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "-v",
            f"{volume}:/home/jovyan",
            LAB_IMAGE,
            "sh",
            "-c",
            script,
        ],
        check=True,
        capture_output=True,
    )


@pytest.fixture
def homes():
    require_docker()
    prefix = unique("gpulabcol")
    home = prefix + "-home-{username}"
    as_student(
        home.format(username="ann"),
        "mkdir -p ~/assignments/hw1/data && echo 'answer = 42' > ~/assignments/hw1/a.py"
        " && echo 1,2 > ~/assignments/hw1/data/d.csv && ln -s /etc/passwd ~/assignments/hw1/pw"
        # a large home: reading its owner must not stream (or wait on) all of it
        " && head -c 30000000 /dev/zero > ~/dataset.bin",
    )
    as_student(home.format(username="bob"), "mkdir -p ~/assignments/other && echo x > ~/notes.txt")
    as_student(
        home.format(username="cat"),
        # far larger than the bound: reading stops at the bound and the copy ends at once
        "mkdir -p ~/assignments/hw1 && head -c 30000000 /dev/zero > ~/assignments/hw1/big.bin",
    )
    yield prefix, home
    remove_volumes(prefix)


def test_collect_reports_submitted_missing_and_oversized_and_return_gives_feedback(homes):
    prefix, home = homes
    course_vol = prefix + "-course-ml101"
    files = VolumeFiles(docker.from_env(), LAB_IMAGE)
    report = collect(
        files,
        assignment="hw1",
        students=["ann", "bob", "cat", "dan"],
        home_volume=home,
        course_volume=course_vol,
        max_bytes=100_000,
    )
    assert report["ann"]["state"] == "submitted" and report["ann"]["files"] == 2
    assert report["ann"]["skipped"] == ["pw"]  # a link is never followed out of the home
    assert report["bob"] == {"state": "missing", "reason": "no assignments/hw1 folder"}
    assert report["cat"]["state"] == "oversized", report["cat"]
    assert report["dan"] == {"state": "missing", "reason": "no home yet"}
    assert not files.exists(home.format(username="dan"))  # looking made no volume
    folder = report["ann"]["folder"]
    assert read_home(course_vol, f"{folder}/a.py") == "answer = 42\n"
    assert read_home(course_vol, f"{folder}/data/d.csv") == "1,2\n"
    assert read_home(course_vol, f"{folder}/pw") is None
    # feedback for ann, written by staff into the course folder, goes back into her home…
    from jupyterhub_gpulab.courses.collect import Entry

    files.write_tree(course_vol, "feedback/hw1/ann", [Entry("grade.txt", b"A\n", 0)], (0, 0))
    back = give_back(
        files,
        assignment="hw1",
        students=["ann", "bob"],
        home_volume=home,
        course_volume=course_vol,
        max_bytes=100_000,
    )
    assert back == {"ann": {"state": "returned", "files": 1}, "bob": {"state": "no-feedback"}}
    assert read_home(home.format(username="ann"), "feedback/hw1/grade.txt") == "A\n"
    # …owned as her home is, so she may move or delete it
    as_student(home.format(username="ann"), "rm ~/feedback/hw1/grade.txt && rmdir ~/feedback/hw1")


def test_a_bad_assignment_name_is_refused():
    files = VolumeFiles(None, LAB_IMAGE)
    with pytest.raises(ValueError, match="assignment name"):
        collect(
            files,
            assignment="../etc",
            students=["a"],
            home_volume="v-{username}",
            course_volume="c",
            max_bytes=1,
        )

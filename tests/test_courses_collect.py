"""Collect and return through real Docker volumes written by the lab image's own user (jovyan),
read and written back by gpulab through never-started containers: each student's work filed under
their own name, no link followed on the path, and a staff folder staff can write in as uid 1000."""

from __future__ import annotations

import subprocess

import docker
import pytest
from course_support import LAB_IMAGE, read_home, remove_volumes
from e2e_support import require_docker
from leakcheck import unique

from jupyterhub_gpulab.backends.volumes import DockerVolumes
from jupyterhub_gpulab.courses.collect import collect, give_back
from jupyterhub_gpulab.courses.config import GPULabCourses
from jupyterhub_gpulab.courses.storage import Entry
from jupyterhub_gpulab.lab.names import folder_name

pytestmark = pytest.mark.docker


def as_student(volume: str, script: str, *extra: str) -> None:
    subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            *extra,
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
def course():
    """Course ``ml101``'s course-work volumes as the students' servers left them (written as the
    image's user), under a prefix of this test's own; removed after it."""
    require_docker()
    prefix = unique("gpulabcol")
    s = GPULabCourses(
        work_volume=prefix + "-work-{slug}--{username}", course_volume=prefix + "-course-{slug}"
    )
    work = lambda user: s.work_of("ml101", user)  # noqa: E731
    as_student(
        work("ann"),
        "mkdir -p ~/assignments/hw1/data && echo 'answer = 42' > ~/assignments/hw1/a.py"
        " && echo 1,2 > ~/assignments/hw1/data/d.csv && ln -s /etc/passwd ~/assignments/hw1/pw"
        # a large home: reading its owner must not stream (or wait on) all of it
        " && head -c 30000000 /dev/zero > ~/dataset.bin",
    )
    as_student(work("bob"), "mkdir -p ~/assignments/other && echo x > ~/notes.txt")
    as_student(
        work("cat"),
        # far larger than the bound: reading stops at the bound and the copy ends at once
        "mkdir -p ~/assignments/hw1 && head -c 30000000 /dev/zero > ~/assignments/hw1/big.bin",
    )
    for user in ("c2-dan", "c2-2ddan", "first.last", "Zoë"):
        as_student(
            work(user), f"mkdir -p ~/assignments/hw1 && echo '{user}' > ~/assignments/hw1/me"
        )
    # 600 + 400 bytes: exactly 1000 in all, well under the stream's cut-off
    as_student(work("edge"), "mkdir -p ~/assignments/hw1/d && head -c 600 /dev/zero > ~/assignments/hw1/a"
               " && head -c 400 /dev/zero > ~/assignments/hw1/d/b")  # fmt: skip
    # ~/assignments a link to /etc: collecting "ssl" would copy the image's /etc/ssl
    as_student(work("mal"), "ln -s /etc ~/assignments")
    yield s, work
    remove_volumes(prefix)


def run(copy, files, s, work, students, assignment="hw1", max_bytes=100_000, **kw):
    return copy(files, assignment=assignment, students=students, volume_of=work,
                course_volume=s.staff_of("ml101"), max_bytes=max_bytes, **kw)  # fmt: skip


def test_the_bound_is_the_submissions_total_file_size_not_the_streams(course):
    """Between ``collect_max_bytes`` and the stream's cut-off (the bound plus headroom for tar
    headers): the files' total decides, to the byte."""
    s, work = course
    files = DockerVolumes(docker.from_env().api, LAB_IMAGE)
    ok = run(collect, files, s, work, ["edge"], max_bytes=1000, owner=(1000, 1000))
    assert ok["edge"]["state"] == "submitted" and ok["edge"]["bytes"] == 1000, ok
    over = run(collect, files, s, work, ["edge"], max_bytes=999, owner=(1000, 1000))
    assert over["edge"] == {"state": "oversized", "reason": "larger than 999 bytes"}


def test_collect_reports_submitted_missing_and_oversized_and_return_gives_feedback(course):
    s, work = course
    course_vol = s.staff_of("ml101")
    files = DockerVolumes(docker.from_env().api, LAB_IMAGE)
    report = run(collect, files, s, work, ["ann", "bob", "cat", "dan"], owner=(1000, 1000))
    assert report["ann"]["state"] == "submitted" and report["ann"]["files"] == 2
    assert report["ann"]["skipped"] == ["pw"]  # a link is never followed out of the home
    assert report["bob"] == {"state": "missing", "reason": "no assignments/hw1 folder"}
    assert report["cat"]["state"] == "oversized", report["cat"]
    assert report["dan"] == {"state": "missing", "reason": "no course work yet"}
    assert not files.exists(work("dan"))  # looking made no volume
    folder = report["ann"]["folder"]
    assert read_home(course_vol, f"{folder}/a.py") == "answer = 42\n"
    assert read_home(course_vol, f"{folder}/data/d.csv") == "1,2\n"
    assert read_home(course_vol, f"{folder}/pw") is None
    # feedback for ann, written by staff into the course folder, goes back into her work…
    files.write_tree(course_vol, "feedback/hw1/ann", [Entry("grade.txt", b"A\n", 0)], (0, 0))
    back = run(give_back, files, s, work, ["ann", "bob"])
    assert back == {"ann": {"state": "returned", "files": 1}, "bob": {"state": "no-feedback"}}
    assert read_home(work("ann"), "feedback/hw1/grade.txt") == "A\n"
    # …owned as her volume is, so she may move or delete it
    as_student(work("ann"), "rm ~/feedback/hw1/grade.txt && rmdir ~/feedback/hw1")


def test_each_students_work_is_filed_under_their_own_name_and_return_never_crosses(course):
    s, work = course
    course_vol = s.staff_of("ml101")
    files = DockerVolumes(docker.from_env().api, LAB_IMAGE)
    users = ["c2-dan", "c2-2ddan", "first.last", "Zoë"]
    report = run(collect, files, s, work, users, owner=(1000, 1000))
    for user in users:
        assert report[user]["state"] == "submitted", (user, report[user])
        assert read_home(course_vol, report[user]["folder"] + "/me") == user + "\n"
        fb = [Entry("grade.txt", f"for {user}\n".encode(), 0)]
        files.write_tree(course_vol, f"feedback/hw1/{folder_name(user)}", fb, (1000, 1000))
    back = run(give_back, files, s, work, users)
    assert all(back[u]["state"] == "returned" for u in users), back
    for user in users:
        assert read_home(work(user), "feedback/hw1/grade.txt") == f"for {user}\n"


def test_a_link_on_the_path_is_never_followed(course):
    s, work = course
    files = DockerVolumes(docker.from_env().api, LAB_IMAGE)
    report = run(collect, files, s, work, ["mal"], assignment="ssl", owner=(1000, 1000))
    assert report["mal"] == {
        "state": "skipped",
        "reason": "assignments is a link; links are never followed",
    }
    assert read_home(s.staff_of("ml101"), "collected/ssl/mal") is None
    # feedback whose way in is a link (~/feedback -> /tmp) is refused, not written elsewhere
    as_student(work("mal"), "ln -s /tmp ~/feedback")
    fb = [Entry("grade.txt", b"A\n", 0)]
    files.write_tree(s.staff_of("ml101"), "feedback/ssl/mal", fb, (1000, 1000))
    back = run(give_back, files, s, work, ["mal"], assignment="ssl")
    assert back["mal"] == {
        "state": "skipped",
        "reason": "feedback is a link; links are never followed",
    }


def test_staff_write_feedback_as_uid_1000_in_their_server_and_return_delivers_it(course):
    """The staff folder as the instructor's course server mounts it (~/ml101-staff, the image's
    user, uid 1000): Collect writes there as the folder's owner, feedback is written there by
    uid 1000, and Return brings it to the student's course work."""
    s, work = course
    course_vol = s.staff_of("ml101")
    files = DockerVolumes(docker.from_env().api, LAB_IMAGE)
    report = run(collect, files, s, work, ["ann", "first.last"], owner=(1000, 1000))
    staff_dir = "/home/jovyan/ml101-staff"
    script = (
        f"set -e; cd {staff_dir}; cat {report['ann']['folder']}/a.py >/dev/null;"
        f" mkdir -p feedback/hw1/ann feedback/hw1/{folder_name('first.last')};"
        " echo 'well done' > feedback/hw1/ann/notes.txt;"
        f" echo 'see me' > feedback/hw1/{folder_name('first.last')}/notes.txt;"
        f" touch {report['ann']['folder']}/graded"  # staff may mark the collected copy too
    )
    server = subprocess.run(
        ["docker", "run", "-d", "--network", "none", "-u", "1000", "-v",
         f"{course_vol}:{staff_dir}", "--entrypoint", "sleep", LAB_IMAGE, "120"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    try:
        done = subprocess.run(["docker", "exec", "-u", "1000", server, "sh", "-c", script],
                              capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0, done.stderr
    finally:
        subprocess.run(["docker", "rm", "-f", server], capture_output=True)
    back = run(give_back, files, s, work, ["ann", "first.last"])
    assert back == {u: {"state": "returned", "files": 1} for u in ("ann", "first.last")}, back
    assert read_home(work("ann"), "feedback/hw1/notes.txt") == "well done\n"
    assert read_home(work("first.last"), "feedback/hw1/notes.txt") == "see me\n"


def test_the_upgrade_copy_starts_the_course_work_as_a_first_mount_would(course):
    """A personal home holding course work from before the upgrade: at the first start its
    ``assignments`` are copied into a new course-work volume that also holds the image's home
    files (as Docker gives a volume mounted first at the home), owned by the image's user."""
    from jupyterhub_gpulab.courses.collect import carry_over

    s, work = course
    home = work("zed").replace("-work-", "-home-")
    as_student(home, "mkdir -p ~/assignments/hw0 && echo mine > ~/assignments/hw0/old.py")
    files = DockerVolumes(docker.from_env().api, LAB_IMAGE)
    done = carry_over(files, home=home, work=work("zed"), folders=["assignments", "feedback"],
                      max_bytes=100_000, like="/home/jovyan")  # fmt: skip
    assert done == {"assignments": "copied", "feedback": "absent"}
    assert read_home(work("zed"), "assignments/hw0/old.py") == "mine\n"
    assert read_home(work("zed"), ".bashrc") is not None  # the image's home files
    assert files.owner(work("zed")) == files.owner(home) != (0, 0)
    as_student(work("zed"), "touch ~/mine-to-write && rm ~/assignments/hw0/old.py")
    assert read_home(home, "assignments/hw0/old.py") == "mine\n"  # the home keeps it

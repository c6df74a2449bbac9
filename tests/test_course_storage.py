"""Course storage without an engine: one name per user for every volume and folder, collect and
return through folders (:class:`~jupyterhub_gpulab.courses.storage.LocalFolders`), no link
followed anywhere on a path, the size bound, the upgrade copy, and what a course server mounts."""

from __future__ import annotations

import itertools
import os
from types import SimpleNamespace

import pytest
from dockerspawner import DockerSpawner

from jupyterhub_gpulab.courses.collect import carry_over, collect, give_back
from jupyterhub_gpulab.courses.config import GPULabCourses
from jupyterhub_gpulab.courses.hubhook import course_volumes
from jupyterhub_gpulab.courses.model import CourseError
from jupyterhub_gpulab.courses.parse import parse_course
from jupyterhub_gpulab.courses.storage import Entry, LinkOnPath, LocalFolders
from jupyterhub_gpulab.lab.names import (
    MAX_VOLUME,
    escape_part,
    folder_name,
    home_volume,
    work_volume,
)

#: Names campuses have, side by side with the ones that collided.
CAMPUS = ["first.last", "user-name", "user_2Dname", "c2-dan", "c2-2ddan", "Zoë", "ANN", "ann",
          "x" * 80, "é" * 80, "_alice", "a.b-c_d"]  # fmt: skip
HOME = "gpulab-home-{username}"
WORK = GPULabCourses().work_volume


def test_names_are_dockerspawners_escaping_so_existing_homes_keep_their_names():
    for user in CAMPUS:
        assert escape_part(user) == DockerSpawner._escape(user), user
        theirs = "gpulab-home-" + DockerSpawner._escape(user)
        if len(theirs) <= MAX_VOLUME:  # longer: the engine refused it ("file name too long")
            assert home_volume(HOME, user) == theirs
        else:
            assert len(home_volume(HOME, user)) <= MAX_VOLUME
    assert home_volume(HOME, "first.last") == "gpulab-home-first-2elast"


def test_no_two_users_share_a_home_work_volume_or_folder():
    for make in (
        lambda u: home_volume(HOME, u),
        lambda u: work_volume(WORK, "dl101", u),
        folder_name,
    ):
        made = [make(u) for u in CAMPUS]
        assert len(set(made)) == len(CAMPUS), made
    assert work_volume(WORK, "c2", "c2-dan") != work_volume(WORK, "c2", "c2-2ddan")


def test_no_two_course_student_pairs_share_a_work_volume_and_long_names_fit():
    slugs = ["a", "a-b", "a--b", "dl101"]
    users = ["b-c", "c", "2dc", "-", *CAMPUS]
    made = {(s, u): work_volume(WORK, s, u) for s, u in itertools.product(slugs, users)}
    assert len(set(made.values())) == len(made)
    assert all(len(v) <= MAX_VOLUME for v in made.values())
    long = work_volume(WORK, "dl101", "é" * 80)  # 480 characters escaped: cut and hashed
    assert long.startswith("gpulab-coursework-dl101--") and len(long) <= MAX_VOLUME
    assert long != work_volume(WORK, "dl101", "é" * 79 + "e")


@pytest.fixture
def lab(tmp_path):
    """Folders as volumes: each student's course work (one of them also a personal home)."""
    files = LocalFolders(str(tmp_path))
    s = GPULabCourses()
    for user, text in [("c2-dan", "dan's"), ("c2-2ddan", "2ddan's"), ("first.last", "fl"),
                       ("Zoë", "zoë")]:  # fmt: skip
        files.write_tree(s.work_of("c2", user), "assignments/hw1",
                         [Entry("a.py", text.encode(), 1.0)], (1000, 1000))  # fmt: skip
    return files, s, tmp_path


def run_collect(files, s, students, max_bytes=10_000):
    return collect(files, assignment="hw1", students=students, max_bytes=max_bytes,
                   volume_of=lambda u: s.work_of("c2", u), course_volume=s.staff_of("c2"),
                   owner=(1000, 1000))  # fmt: skip


def run_return(files, s, students):
    return give_back(files, assignment="hw1", students=students, max_bytes=10_000,
                     volume_of=lambda u: s.work_of("c2", u), course_volume=s.staff_of("c2"))  # fmt: skip


def test_collect_files_each_students_work_under_their_own_name_and_return_never_crosses(lab):
    files, s, _ = lab
    students = ["c2-dan", "c2-2ddan", "first.last", "Zoë", "nobody"]
    report = run_collect(files, s, students)
    for user, text in [("c2-dan", "dan's"), ("c2-2ddan", "2ddan's"), ("first.last", "fl"),
                       ("Zoë", "zoë")]:  # fmt: skip
        assert report[user]["state"] == "submitted", report[user]
        got, _ = files.read_tree(s.staff_of("c2"), report[user]["folder"], 100)
        assert got == [Entry("a.py", text.encode(), 1.0)]
        assert f"/{folder_name(user)}/" in report[user]["folder"]
    assert report["nobody"] == {"state": "missing", "reason": "no course work yet"}
    staff = s.staff_of("c2")
    for user in ("c2-dan", "c2-2ddan"):
        fb = [Entry("grade.txt", f"for {user}".encode(), 2.0)]
        files.write_tree(staff, f"feedback/hw1/{folder_name(user)}", fb, (1000, 1000))
    back = run_return(files, s, students)
    assert back["c2-dan"] == {"state": "returned", "files": 1}
    assert back["first.last"] == {"state": "no-feedback"}
    for user in ("c2-dan", "c2-2ddan"):
        got, _ = files.read_tree(s.work_of("c2", user), "feedback/hw1", 100)
        assert got == [Entry("grade.txt", f"for {user}".encode(), 2.0)]


def test_the_staff_folder_and_what_collect_writes_belong_to_the_images_user(lab):
    files, s, tmp = lab
    if os.geteuid() != 0:
        pytest.skip("setting owners needs root")
    report = run_collect(files, s, ["c2-dan"])
    staff = tmp / s.staff_of("c2")
    assert os.stat(staff).st_uid == 1000  # staff may mkdir feedback/ in their server
    assert os.stat(staff / report["c2-dan"]["folder"] / "a.py").st_uid == 1000


def test_a_link_anywhere_on_the_path_is_skipped_with_its_reason(lab):
    files, s, tmp = lab
    vol = tmp / s.work_of("c2", "mal")
    (vol / "etc-copy" / "ssl").mkdir(parents=True)
    (vol / "etc-copy" / "ssl" / "secret").write_text("not yours")
    os.symlink(vol / "etc-copy", vol / "assignments")  # ~/assignments -> elsewhere
    report = collect(files, assignment="ssl", students=["mal"], max_bytes=10_000,
                     volume_of=lambda u: s.work_of("c2", u), course_volume=s.staff_of("c2"),
                     owner=(1000, 1000))  # fmt: skip
    assert report["mal"] == {
        "state": "skipped",
        "reason": "assignments is a link; links are never followed",
    }
    assert not (tmp / s.staff_of("c2") / "collected" / "ssl").exists()
    # a link inside the folder is left out and named; a link as the feedback folder is refused
    hw = tmp / s.work_of("c2", "c2-dan") / "assignments" / "hw1"
    os.symlink("/etc/passwd", hw / "pw")
    assert run_collect(files, s, ["c2-dan"])["c2-dan"]["skipped"] == ["pw"]
    fb = f"feedback/hw1/{folder_name('c2-2ddan')}"
    files.write_tree(s.staff_of("c2"), fb, [Entry("g", b"A", 1)], (0, 0))
    os.symlink("/tmp", tmp / s.work_of("c2", "c2-2ddan") / "feedback")
    assert run_return(files, s, ["c2-2ddan"])["c2-2ddan"]["state"] == "skipped"
    with pytest.raises(LinkOnPath):
        files.write_tree(s.work_of("c2", "c2-2ddan"), "feedback/x", [], (0, 0))


def test_the_total_size_bound_counts_every_file_of_a_submission(lab):
    files, s, _ = lab
    vol = s.work_of("c2", "big")
    files.write_tree(vol, "assignments/hw1",
                     [Entry("a", b"x" * 600, 1), Entry("d/b", b"y" * 400, 1)], (0, 0))  # fmt: skip
    assert run_collect(files, s, ["big"], max_bytes=1000)["big"]["state"] == "submitted"
    assert run_collect(files, s, ["big"], max_bytes=999)["big"] == {
        "state": "oversized",
        "reason": "larger than 999 bytes",
    }


def test_a_bad_assignment_name_is_refused_and_nothing_is_made(lab):
    files, s, tmp = lab
    for bad in ("..", "a/b", ""):
        with pytest.raises(ValueError):
            collect(files, assignment=bad, students=["c2-dan"], max_bytes=1,
                    volume_of=str, course_volume="staff", owner=(0, 0))  # fmt: skip
    assert not (tmp / "staff").exists()


def test_the_upgrade_copies_course_folders_from_the_home_and_leaves_the_home(lab):
    files, s, tmp = lab
    home = s.home_of("first.last")
    files.write_tree(home, "assignments/hw0", [Entry("old.py", b"mine", 1)], (1000, 1000))
    files.write_tree(home, "dl101", [Entry("nb.ipynb", b"{}", 1)], (1000, 1000))
    files.write_tree(home, "private", [Entry("diary", b"secret", 1)], (1000, 1000))
    work = s.work_of("dl101", "first.last")
    done = carry_over(files, home=home, work=work, folders=["assignments", "feedback", "dl101"],
                      max_bytes=10_000)  # fmt: skip
    assert done == {"assignments": "copied", "feedback": "absent", "dl101": "copied"}
    assert files.read_tree(work, "assignments/hw0", 100)[0] == [Entry("old.py", b"mine", 1)]
    assert not (tmp / work / "private").exists()  # only the course's folders
    assert (tmp / home / "assignments" / "hw0" / "old.py").read_bytes() == b"mine"  # home kept
    # a work volume that exists is never overwritten
    files.write_tree(home, "assignments/hw0", [Entry("old.py", b"newer", 1)], (1000, 1000))
    assert carry_over(files, home=home, work=work, folders=["assignments"], max_bytes=100) == {}
    assert files.read_tree(work, "assignments/hw0", 100)[0] == [Entry("old.py", b"mine", 1)]


def spawner_of(user="ann", volumes=None):
    return SimpleNamespace(
        user=SimpleNamespace(name=user),
        volumes=volumes if volumes is not None else {HOME: "/home/jovyan", "/data": "/data"},
    )


def test_a_course_server_mounts_the_students_course_work_not_their_home():
    s = GPULabCourses()
    course = parse_course({"slug": "dl101"})
    vols, home = course_volumes(spawner_of("first.last"), course, s, staff=False)
    assert home == HOME
    assert vols == {"/data": "/data", "gpulab-coursework-dl101--first-2elast": "/home/jovyan"}
    staffed, _ = course_volumes(spawner_of("ta1"), course, s, staff=True)
    assert staffed["gpulab-course-dl101"] == "/home/jovyan/dl101-staff"
    assert HOME not in staffed
    opted = parse_course({"slug": "dl101", "mount_home": True})
    vols, _ = course_volumes(spawner_of(), opted, s, staff=False)
    assert vols[HOME] == "/home/jovyan/home"  # an admin's opt-in: the home beside the work


def test_mount_home_is_a_true_or_false_that_staff_cannot_change():
    with pytest.raises(CourseError, match="mount_home"):
        parse_course({"slug": "dl101", "mount_home": "yes"})
    from jupyterhub_gpulab.service.web.courseapi import ADMIN_ONLY

    assert "mount_home" in ADMIN_ONLY


def test_staff_cannot_edit_a_roster_the_identity_provider_owns(tmp_path):
    """The check every roster edit passes (API, page, CSV): under SSO or LTI it refuses before
    anything is asked of the hub or written."""
    import asyncio

    from jupyterhub_gpulab.auth.groupsowner import GroupsOwner
    from jupyterhub_gpulab.courses.manager import CourseManager, RosterLocked
    from jupyterhub_gpulab.courses.store import CourseStore
    from jupyterhub_gpulab.ledger import Ledger

    led = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    try:
        store = CourseStore(led.engine)
        manager = CourseManager(store, GPULabCourses(), None, tz=None, secret=None, ledger=led,
                                groups_owner=GroupsOwner("authenticator"))  # fmt: skip
        course = parse_course({"slug": "dl101"})
        with pytest.raises(RosterLocked, match="Nothing changed"):
            asyncio.run(manager.edit_roster(course, by="ta1", add={"ann"}, remove=set()))
        assert store.audit("dl101") == [] and led.warnings() == []
    finally:
        led.close()


def test_a_roster_notice_stays_a_day_whatever_runs():
    from datetime import datetime, timedelta, timezone

    from jupyterhub_gpulab.fairuse.cullplan import NOTICE_TTL, to_clear
    from jupyterhub_gpulab.ledger.models import CullWarning
    from jupyterhub_gpulab.ledger.notices import kind_of

    now = datetime(2026, 12, 2, tzinfo=timezone.utc)
    fresh = CullWarning("ann", "dl101", "course:roster", "You were added", now, now)
    old = CullWarning("bob", "dl101", "course:roster", "You were added", now, now - NOTICE_TTL)
    running = [SimpleNamespace(key=("ann", "dl101")), SimpleNamespace(key=("bob", "dl101"))]
    later = now + timedelta(seconds=1)
    assert to_clear([fresh, old], {}, running, later) == [("bob", "dl101", "course:roster")]
    assert kind_of("course:roster") == "notice" and kind_of("culled:idle") == "stopped"


@pytest.mark.parametrize("user", ["first.last", "user-name", "user_2Dname", "Zoë", "ANN"])
def test_the_cli_names_what_the_spawner_and_courses_name(capsys, tmp_path, user):
    """``gpulab names`` prints the spawner's own container and volume names for the user: the
    spawner's ``format_volume_name`` and ``object_name``, and the course settings, agree."""
    import json

    from traitlets.config import Config

    from jupyterhub_gpulab.cli import main
    from jupyterhub_gpulab.spawner import GPUDockerSpawner

    cfg = tmp_path / "jupyterhub_config.py"
    cfg.write_text('c.DockerSpawner.prefix = "lab"\n')
    assert main(["names", user, "--course", "dl101", "--json", "-f", str(cfg)]) == 0
    shown = json.loads(capsys.readouterr().out)
    config = Config()
    config.DockerSpawner.prefix = "lab"
    spawner = GPUDockerSpawner(config=config, user=SimpleNamespace(name=user))
    assert shown["container (default server)"] == spawner.object_name
    assert shown["home volume"] == spawner.format_volume_name(HOME, spawner)
    server = SimpleNamespace(name="dl101", state=None, server=None, user_options=None)
    course = GPUDockerSpawner(config=config, user=SimpleNamespace(name=user), orm_spawner=server)
    assert shown["dl101: course server"] == course.object_name
    vols, _ = course_volumes(course, parse_course({"slug": "dl101"}), GPULabCourses(), staff=False)
    assert shown["dl101: course-work volume"] in vols


def test_every_other_outcome_of_collect_and_return_is_reported_per_student(lab):
    files, s, tmp = lab
    (tmp / s.work_of("c2", "empty") / "assignments" / "hw1").mkdir(parents=True)
    (tmp / s.work_of("c2", "other") / "assignments" / "hw2").mkdir(parents=True)
    (tmp / s.work_of("c2", "weird") / "assignments").mkdir(parents=True)
    os.mkfifo(tmp / s.work_of("c2", "weird") / "assignments" / "hw1")  # not a folder
    report = run_collect(files, s, ["empty", "other", "weird", "c2-dan"])
    assert report["empty"] == {"state": "missing", "reason": "assignments/hw1 is empty"}
    assert report["other"] == {"state": "missing", "reason": "no assignments/hw1 folder"}
    assert report["weird"] == {"state": "missing", "reason": "no assignments/hw1 folder"}
    assert report["c2-dan"]["state"] == "submitted"  # the others never stop one who submitted
    staff = s.staff_of("c2")
    big = [Entry("huge", b"x" * 10_001, 1)]
    files.write_tree(staff, f"feedback/hw1/{folder_name('c2-dan')}", big, (0, 0))
    files.write_tree(staff, f"feedback/hw1/{folder_name('gone')}", [Entry("g", b"A", 1)], (0, 0))
    os.symlink("/etc", tmp / staff / "feedback" / "hw1" / folder_name("first.last"))
    back = run_return(files, s, ["c2-dan", "gone", "first.last"])
    assert back["c2-dan"] == {"state": "oversized", "reason": "larger than 10000 bytes"}
    assert back["gone"] == {"state": "failed", "reason": "no course work volume yet"}
    assert back["first.last"]["state"] == "skipped"  # staff's own link is not followed either


def test_one_broken_student_volume_is_a_failure_of_that_student_alone(lab, monkeypatch):
    files, s, _ = lab
    real = files.read_tree

    def broken(volume, path, max_bytes):
        if volume == s.work_of("c2", "c2-dan"):
            raise OSError("input/output error")
        return real(volume, path, max_bytes)

    monkeypatch.setattr(files, "read_tree", broken)
    report = run_collect(files, s, ["c2-dan", "c2-2ddan"])
    assert report["c2-dan"] == {"state": "failed", "reason": "input/output error"}
    assert report["c2-2ddan"]["state"] == "submitted"
    monkeypatch.setattr(files, "read_tree", real)
    files.write_tree(s.staff_of("c2"), f"feedback/hw1/{folder_name('Zoë')}", [Entry("g", b"A", 1)],
                     (0, 0))  # fmt: skip
    monkeypatch.setattr(
        files, "owner", lambda volume, path="": (_ for _ in ()).throw(OSError("no"))
    )
    assert run_return(files, s, ["Zoë"])["Zoë"] == {"state": "failed", "reason": "no"}


def test_the_upgrade_skips_links_and_oversized_folders(lab):
    files, s, tmp = lab
    home = s.home_of("ann")
    files.write_tree(home, "big", [Entry("b", b"x" * 200, 1)], (0, 0))
    os.symlink("/etc", tmp / home / "assignments")
    work = s.work_of("dl101", "ann")
    done = carry_over(files, home=home, work=work, folders=["assignments", "big"], max_bytes=100)
    assert done == {
        "assignments": "skipped: assignments is a link",
        "big": "skipped: larger than 100 bytes",
    }
    assert not files.exists(work)  # nothing copied: the server's first mount makes it


def test_the_docker_storages_tar_holds_the_tree_as_written_and_read_back():
    """The archive :class:`DockerVolumes` puts into a volume, and how it reads one back: the
    folders on the way, the owner, and only regular files and folders."""
    import io
    import tarfile

    from jupyterhub_gpulab.courses.storage import TooLarge
    from jupyterhub_gpulab.courses.storage import tar_of as _tar
    from jupyterhub_gpulab.courses.storage import untar as _untar

    entries = [Entry("d", None, 5.0), Entry("d/a.txt", b"hi", 5.0)]
    data = _tar(["feedback", "hw1"], entries, (1000, 100))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: (m.uid, m.gid, m.isdir()) for m in tar}
    assert members == {
        "feedback": (1000, 100, True),
        "feedback/hw1": (1000, 100, True),
        "feedback/hw1/d": (1000, 100, True),
        "feedback/hw1/d/a.txt": (1000, 100, False),
    }
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, body in (("hw1", None), ("hw1/a", b"12345"), ("hw1/b", b"678")):
            t = tarfile.TarInfo(name)
            if body is None:
                t.type = tarfile.DIRTYPE
                tar.addfile(t)
            else:
                t.size = len(body)
                tar.addfile(t, io.BytesIO(body))
        link = tarfile.TarInfo("hw1/pw")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    got, skipped = _untar(out.getvalue(), "hw1", 8, "assignments/hw1")
    assert [e.path for e in got] == ["a", "b"] and skipped == ["pw"]
    with pytest.raises(TooLarge):
        _untar(out.getvalue(), "hw1", 7, "assignments/hw1")

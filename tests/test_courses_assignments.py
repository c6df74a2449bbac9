"""Collect, Return and the roster notice at the service's level, without an engine or a hub: a
real :class:`~jupyterhub_gpulab.courses.manager.CourseManager` on a real SQLite ledger, whose
backend is a stand-in whose ``storage()`` is folders (:class:`~jupyterhub_gpulab.courses.storage.LocalFolders`),
so the manager's own collect and return code (:mod:`jupyterhub_gpulab.courses.assignments`) runs:

- each student's work is read from their course-work volume, never the personal home beside it,
  and filed in the staff folder under their own escaped name (``c2-dan`` beside ``c2-2ddan``);
- Return writes feedback into the student's course work only; both are audited with the report;
- a student added to or removed from the roster is told (``course:roster`` notice).
"""

from __future__ import annotations

import pytest

from jupyterhub_gpulab.courses.config import GPULabCourses
from jupyterhub_gpulab.courses.manager import ROSTER_NOTICE, CourseManager
from jupyterhub_gpulab.courses.parse import parse_course
from jupyterhub_gpulab.courses.storage import Entry, LocalFolders
from jupyterhub_gpulab.courses.store import CourseStore
from jupyterhub_gpulab.lab.names import folder_name
from jupyterhub_gpulab.ledger import Ledger

STUDENTS = ["c2-dan", "c2-2ddan", "Zoë"]
OWNER = (1000, 1000)


class StandInHub:
    """The hub API calls the roster needs: one group's members, kept here."""

    def __init__(self, group: str, members=()):
        self.group, self.members = group, set(members)

    async def call(self, method: str, path: str, body=None):
        if path.endswith("/users"):
            users = set((body or {}).get("users") or ())
            self.members = self.members | users if method == "POST" else self.members - users
        return 200, {"name": self.group, "users": sorted(self.members)}

    async def refresh_active(self):
        return {}  # nobody runs a server: a removal stops nothing


class FolderBackend:
    """The engine seam, as far as collect and return use it: ``storage()`` is folders."""

    network = "bridge"

    def __init__(self, root):
        self.files = LocalFolders(str(root))
        self.asked: list[tuple[str, str | None]] = []

    def storage(self, image: str, near: str | None = None):
        self.asked.append((image, near))
        return self.files


@pytest.fixture
def lab(tmp_path):
    """Course ``c2`` with its three students' course work and, beside it, each one's personal
    home holding a decoy of the same assignment."""
    led = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    course = parse_course({"slug": "c2", "title": "Course Two"})
    settings = GPULabCourses()
    backend = FolderBackend(tmp_path / "volumes")
    hub = StandInHub(course.roster_group, STUDENTS)
    manager = CourseManager(CourseStore(led.engine), settings, hub, tz=None, secret=None,
                            ledger=led, backend=backend, images={"cpu": "lab:1"})  # fmt: skip
    files = backend.files
    for user in STUDENTS:
        mine = [Entry("a.py", f"{user}'s work".encode(), 1.0)]
        files.write_tree(settings.work_of("c2", user), "assignments/hw1", mine, OWNER)
        decoy = [Entry("a.py", b"from the personal home", 1.0)]
        files.write_tree(settings.home_of(user), "assignments/hw1", decoy, OWNER)
    yield manager, course, files, settings
    led.close()


def audited(manager, action: str) -> list:
    return [e for e in manager.store.audit("c2") if e.action == action]


async def test_collect_reads_each_students_course_work_under_their_own_name(lab):
    manager, course, files, s = lab
    report = await manager.collect(course, "hw1", by="ta1")
    assert sorted(report) == sorted(STUDENTS)
    folders = set()
    for user in STUDENTS:
        entry = report[user]
        assert entry["state"] == "submitted", entry
        assert entry["folder"].startswith(f"collected/hw1/{folder_name(user)}/")
        got, _ = files.read_tree(s.staff_of("c2"), entry["folder"], 1000)
        assert got == [Entry("a.py", f"{user}'s work".encode(), 1.0)]  # not the home's decoy
        folders.add(entry["folder"].split("/")[2])
    assert len(folders) == 3 and folder_name("c2-dan") != folder_name("c2-2ddan")
    assert manager.backend.asked[0][0] == "lab:1"  # the course's image runs the helpers
    [entry] = audited(manager, "collect")
    assert (entry.who, entry.detail) == ("ta1", {"assignment": "hw1", "report": report})


async def test_collect_of_a_student_without_course_work_never_reads_their_home(lab):
    manager, course, files, s = lab
    manager.hub.members.add("eve")
    files.write_tree(s.home_of("eve"), "assignments/hw1", [Entry("a.py", b"home", 1.0)], OWNER)
    report = await manager.collect(course, "hw1", by="ta1")
    assert report["eve"] == {"state": "missing", "reason": "no course work yet"}
    assert not files.exists(s.work_of("c2", "eve"))


async def test_return_brings_feedback_into_the_course_work_only(lab):
    manager, course, files, s = lab
    staff = s.staff_of("c2")
    for user in ("c2-dan", "Zoë"):
        note = [Entry("grade.txt", f"for {user}".encode(), 2.0)]
        files.write_tree(staff, f"feedback/hw1/{folder_name(user)}", note, OWNER)
    report = await manager.give_back(course, "hw1", by="ta1")
    assert report == {"c2-dan": {"state": "returned", "files": 1},
                      "c2-2ddan": {"state": "no-feedback"},
                      "Zoë": {"state": "returned", "files": 1}}  # fmt: skip
    for user in ("c2-dan", "Zoë"):
        got, _ = files.read_tree(s.work_of("c2", user), "feedback/hw1", 1000)
        assert got == [Entry("grade.txt", f"for {user}".encode(), 2.0)]
    for user in STUDENTS:
        with pytest.raises(FileNotFoundError):
            files.read_tree(s.home_of(user), "feedback", 1000)
    with pytest.raises(FileNotFoundError):
        files.read_tree(s.work_of("c2", "c2-2ddan"), "feedback", 1000)
    [entry] = audited(manager, "return")
    assert (entry.who, entry.detail) == ("ta1", {"assignment": "hw1", "report": report})


async def test_a_student_added_or_removed_is_told_by_whom(lab):
    manager, course, _, _ = lab
    await manager.edit_roster(course, by="ta1", add={"ann"}, remove=set())
    [added] = manager.ledger.warnings("ann")
    assert (added.server_name, added.rule) == (course.server_name, ROSTER_NOTICE)
    assert added.message == "You were added to Course Two (c2) by ta1."
    assert "ann" in manager.hub.members
    await manager.edit_roster(course, by="ta2", add=set(), remove={"ann", "Zoë"})
    assert [w.message for w in manager.ledger.warnings("ann")] == [
        "You were removed from Course Two (c2) by ta2."
    ]
    assert [w.message for w in manager.ledger.warnings("Zoë")] == [
        "You were removed from Course Two (c2) by ta2."
    ]
    assert manager.ledger.warnings("c2-dan") == []  # only those added or removed
    assert [e.detail for e in audited(manager, "roster")][0] == {"added": [],
                                                                 "removed": ["Zoë", "ann"]}  # fmt: skip

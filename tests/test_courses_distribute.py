"""Distribute and the content read act on course servers only (engine-free): a server counts as
the course's when the courses' pre-spawn hook started it so, which it marks with the course
label on the server's object. A roster member's named server merely called like the course
(started before the course existed, or by a version without the label) mounts the personal
home: Distribute's pull would write into it, so it is left alone and reported."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from jupyterhub_gpulab.backends.base import Server
from jupyterhub_gpulab.courses.config import GPULabCourses
from jupyterhub_gpulab.courses.distribute import NOT_COURSE, split_course_servers
from jupyterhub_gpulab.courses.manager import CourseManager
from jupyterhub_gpulab.courses.parse import parse_course
from jupyterhub_gpulab.courses.store import CourseStore
from jupyterhub_gpulab.ledger import Ledger
from jupyterhub_gpulab.spawner import container as ct
from jupyterhub_gpulab.spawner.backendbase import EngineBackend

COURSE = parse_course({"slug": "dl101", "content": [{"repo": "https://git.example.edu/n.git",
                                                     "dir": "dl101"}]})  # fmt: skip
STATUS = b"pulled\tdl101\t2026-12-02T16:40:00Z\t\t\n"


def server(user: str, course: str | None) -> Server:
    labels = ct.labels(allocation_id=None, user=user, server_name="dl101", profile="cpu",
                       slice_id=None, node="", lab="lab-1", course=course)  # fmt: skip
    return Server(f"id-{user}", user, "", labels)


def test_only_a_server_labelled_with_this_course_is_its_course_server():
    ours, old, other = server("ann", "dl101"), server("bob", None), server("cy", "dl102")
    assert split_course_servers([ours, old, other], COURSE) == ([ours], [old, other])
    assert split_course_servers([Server("x", "dan")], COURSE) == ([], [Server("x", "dan")])


def test_the_course_label_is_set_only_for_a_course_server():
    assert server("ann", "dl101").labels[ct.LABEL_COURSE] == "dl101"
    assert ct.LABEL_COURSE not in server("ann", None).labels
    rt = SimpleNamespace(identity=SimpleNamespace(uuid="lab-1", name="lab"))
    spawner = SimpleNamespace(runtime=lambda: rt, allocation_id=None, profile_slug="cpu",
                              user=SimpleNamespace(name="ann"), name="dl101",
                              course_slug="dl101")  # fmt: skip
    assert EngineBackend._lab_labels(spawner, None, "")[ct.LABEL_COURSE] == "dl101"
    spawner.course_slug = None
    assert ct.LABEL_COURSE not in EngineBackend._lab_labels(spawner, None, "")


class StandInBackend:
    """Running servers as listed by server name; each exec and file read recorded."""

    network = "bridge"

    def __init__(self, servers):
        self.listed, self.ran, self.read = servers, [], []

    def servers(self, server_name=None, lab_id=None):
        return [s for s in self.listed if s.labels.get(ct.LABEL_SERVER) == server_name]

    def exec_run(self, s, cmd, user=""):
        self.ran.append(s.user)
        return 0, b""

    def get_file(self, s, path, max_bytes):
        self.read.append(s.user)
        return STATUS


class Roster:
    async def call(self, method, path, body=None):
        return 200, {"users": ["ann", "bob", "cy"]}


@pytest.fixture
def manager(tmp_path):
    led = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    backend = StandInBackend([server("ann", "dl101"), server("bob", None)])
    yield CourseManager(CourseStore(led.engine), GPULabCourses(), Roster(), tz=None,
                        secret=None, ledger=led, backend=backend)  # fmt: skip
    led.close()


async def test_distribute_pulls_into_course_servers_and_reports_the_others(manager):
    done = await manager.distribute(COURSE, by="ta1")
    assert manager.backend.ran == ["ann"]  # bob's server mounts his personal home
    assert "bob" not in manager.backend.read
    assert done["report"]["bob"] == NOT_COURSE
    assert done["report"]["cy"] == "not running"
    assert "bob" not in done["content"]
    assert done["message"].startswith("Pulled into 1 of 1 running servers.")
    assert "Not a course server, left alone in 1: bob" in done["message"]
    [audit] = manager.store.audit("dl101")
    assert audit.detail["report"]["bob"] == NOT_COURSE


async def test_the_content_read_skips_a_server_that_is_not_the_courses(manager, caplog):
    with caplog.at_level(logging.INFO, "gpulab.courses"):
        statuses = await manager.content_of(COURSE, ["ann", "bob"])
    assert manager.backend.read == ["ann"]
    assert statuses["bob"] is None and statuses["ann"] is not None
    assert "bob's server 'dl101' is not a course server" in caplog.text


async def test_the_hook_marks_a_course_start_and_only_that(tmp_path):
    """The hub's hook decides a start is a course server's; a later plain start of the same
    spawner (another name) loses the mark."""
    from jupyterhub_gpulab.courses.hubhook import make_pre_spawn_hook
    from jupyterhub_gpulab.ledger.ledger import close_shared_ledgers

    url = f"sqlite:///{tmp_path / 'l.sqlite'}"
    led = Ledger(url)
    CourseStore(led.engine).declare([COURSE])
    hook = make_pre_spawn_hook(url, GPULabCourses())
    user = SimpleNamespace(name="ann", groups=[SimpleNamespace(name=COURSE.roster_group)],
                           admin=False)  # fmt: skip
    spawner = SimpleNamespace(name="dl101", user=user, user_options={}, volumes={}, cmd=None,
                              log=logging.getLogger("t"), _log_name="ann/dl101")  # fmt: skip
    try:
        await hook(spawner)
        assert spawner.course_slug == "dl101"
        spawner.name = "scratch"  # a named server that is no course's
        await hook(spawner)
        assert spawner.course_slug is None
    finally:
        close_shared_ledgers()
        led.close()

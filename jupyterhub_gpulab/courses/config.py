"""``c.GPULabCourses``: the courses declared in ``jupyterhub_config.py`` and how course servers,
pre-start and collect behave. Read by the hub (:mod:`.hubhook`, :func:`configure_courses`) and by
the service. Example::

    c.GPULabCourses.courses = [{"slug": "ml101", "title": "ML 101", "profiles": ["cpu"],
        "content": [{"repo": "https://git.example.edu/ml101/notebooks.git"}],
        "sessions": {"weekly": [{"days": ["mon"], "start": "10:00", "end": "12:00",
                                 "from": "2026-09-07", "until": "2026-12-18"}]}}]
"""

from __future__ import annotations

from traitlets import Dict, Float, Integer, List, Unicode
from traitlets.config import Configurable

from ..lab.names import home_volume, staff_volume, work_volume
from .model import Course
from .parse import parse_courses, split_courses


class GPULabCourses(Configurable):
    courses = List(
        Dict(),
        config=True,
        help="""Courses declared in the config (see :mod:`jupyterhub_gpulab.courses.model` for
        the keys). Stored in the ledger at every service start; admins add more from the
        service's pages. ``c.GPULabCourses.courses = [{"slug": "ml101", "profiles": ["cpu"]}]``
        """,
    )

    home_volume = Unicode(
        "gpulab-home-{username}",
        config=True,
        help="""Docker volume holding each user's personal home (``{username}``: the user name
        escaped as DockerSpawner escapes it, :func:`~jupyterhub_gpulab.lab.names.home_volume`),
        mounted at ``home_path`` in their own servers. Same as ``c.DockerSpawner.volumes``' key.
        A course server does not mount it (``work_volume`` is its home) unless an admin sets the
        course's ``mount_home``; collect and return never touch it.
        ``c.GPULabCourses.home_volume = "gpulab-home-{username}"``""",
    )

    work_volume = Unicode(
        "gpulab-coursework-{slug}--{username}",
        config=True,
        help="""Docker volume of one student's work in one course, mounted at ``home_path`` in
        their course server (``{slug}`` and ``{username}`` escaped,
        :func:`~jupyterhub_gpulab.lab.names.work_volume`): course content is pulled into it,
        assignments collected from it, feedback returned to it. At its first start, the course
        folders of the personal home (``assignments``, ``feedback``, the content folders) are
        copied into it; the home keeps them. Keep ``--`` between the two fields (it is what
        keeps two (course, student) pairs apart).
        ``c.GPULabCourses.work_volume = "gpulab-coursework-{slug}--{username}"``""",
    )

    staff_owner = List(
        Integer(),
        [1000, 1000],
        minlen=2,
        maxlen=2,
        config=True,
        help="""``[uid, gid]`` of the user the images run notebooks as: the staff folder's root is
        theirs when gpulab creates it (or finds it owned by root), and what collect writes
        there is the root's owner's, so staff can write feedback in their course server.
        ``c.GPULabCourses.staff_owner = [1000, 100]`` (docker-stacks images)""",
    )

    home_path = Unicode(
        "/home/jovyan",
        config=True,
        help="""Where the home volume is mounted in a user's container.
        ``c.GPULabCourses.home_path = "/home/jovyan"``""",
    )

    course_volume = Unicode(
        "gpulab-course-{slug}",
        config=True,
        help="""Docker volume of a course's staff folder (``{slug}``: the course): collected
        assignments land in ``collected/<assignment>/<student>/<time>/``, feedback to return is
        read from ``feedback/<assignment>/<student>/``. Mounted in staff members' course servers
        at ``~/<slug>-staff``; students never see it.
        ``c.GPULabCourses.course_volume = "gpulab-course-{slug}"``""",
    )

    helper_image = Unicode(
        "",
        config=True,
        help="""Image of the short-lived, never-started containers through which the service
        copies files in and out of volumes (Docker's archive API; nothing runs in them).
        Default: the image of the course's first profile (when a course server starts: the
        image of the profile it starts with, which the engine has at hand).
        ``c.GPULabCourses.helper_image = "gpulab/singleuser:6.1.1"``""",
    )

    prestart_batch = Integer(
        0,
        config=True,
        help="""Servers pre-start asks the hub to start at once. 0: the hub's
        ``c.JupyterHub.concurrent_spawn_limit`` (read from the same config; 100 if unset).
        ``c.GPULabCourses.prestart_batch = 20``""",
    )

    prestart_retries = Integer(
        3,
        config=True,
        help="""Retries of a server whose pre-start failed (back-off doubling from
        ``prestart_backoff`` seconds). ``c.GPULabCourses.prestart_retries = 3``""",
    )

    prestart_backoff = Float(
        5.0,
        config=True,
        help="""Seconds before the first retry of a failed pre-start; doubles each time.
        ``c.GPULabCourses.prestart_backoff = 5``""",
    )

    ready_timeout = Float(
        300.0,
        config=True,
        help="""Seconds pre-start waits for one server to become ready.
        ``c.GPULabCourses.ready_timeout = 300``""",
    )

    check_interval = Float(
        30.0,
        config=True,
        help="""Seconds between the service's looks for sessions due for pre-start.
        ``c.GPULabCourses.check_interval = 30``""",
    )

    reserve_horizon_days = Integer(
        120,
        config=True,
        help="""How far ahead (days) a course's sessions are booked when it sets ``reserve``:
        conflicts within it are refused when the course is saved; sessions entering it later
        are booked by the service's periodic pass. ``c.GPULabCourses.reserve_horizon_days = 120``
        """,
    )

    reserve_sync_every = Float(
        600.0,
        config=True,
        help="""Seconds between the service's passes that book the sessions entering the horizon
        (and retry sessions that did not fit). ``c.GPULabCourses.reserve_sync_every = 600``""",
    )

    shared_folder_root = Unicode(
        "/srv/gpulab/courses",
        config=True,
        help="""Host folder under which every course's ``shared_folder`` must lie (resolved:
        no ``..``, no symbolic link out of it); the folder is bind-mounted read-only into each
        roster member's course server, so only admins set it. Empty: no shared folders.
        ``c.GPULabCourses.shared_folder_root = "/srv/gpulab/courses"``""",
    )

    def declared(self, profiles: set[str] | None = None) -> list[Course]:
        """The declared courses, validated (raises :class:`~.model.CourseError`), their shared
        folders under ``shared_folder_root``."""
        return parse_courses(self.courses, profiles=profiles, shared_root=self.shared_folder_root)

    def declared_each(
        self, profiles: set[str] | None = None
    ) -> tuple[list[Course], dict[str, list[str]]]:
        """The valid declared courses and the problems of the others, by slug
        (:func:`~.parse.split_courses`): what the service stores, and what it marks as needing
        attention while the rest of the lab runs."""
        return split_courses(self.courses, profiles=profiles, shared_root=self.shared_folder_root)

    def home_of(self, username: str) -> str:
        """The personal home volume of ``username`` (:func:`~..lab.names.home_volume`)."""
        return home_volume(self.home_volume, username)

    def work_of(self, slug: str, username: str) -> str:
        """``username``'s course-work volume in course ``slug`` (:func:`~..lab.names.work_volume`)."""
        return work_volume(self.work_volume, slug, username)

    def staff_of(self, slug: str) -> str:
        """Course ``slug``'s staff folder volume (:func:`~..lab.names.staff_volume`)."""
        return staff_volume(self.course_volume, slug)

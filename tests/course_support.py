"""Helpers for the course tests: a git repository served by ``git daemon`` on the Docker bridge
address (containers reach it, nothing beyond this machine does), a hub with the gpulab service,
GPUDockerSpawner, a home volume per user and a course, and a look into a user's home volume."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import jupyterhub
import requests
from hubtools import DOCKER_GATEWAY, Hub, free_port
from leakcheck import unique
from service_support import PREFIX, PROFILES, service_config

LAB_IMAGE = os.environ.get(
    "GPULAB_TEST_LAB_IMAGE", f"gpulab/singleuser:{jupyterhub.__version__}-lab"
)
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Instructor",
    "GIT_AUTHOR_EMAIL": "instructor@example.edu",
    "GIT_COMMITTER_NAME": "Instructor",
    "GIT_COMMITTER_EMAIL": "instructor@example.edu",
    "HOME": "/tmp",
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
}


def git(*args, cwd: Path) -> str:
    r = subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


class GitServer:
    """A bare repository ``course.git`` under ``root``, served read-only by ``git daemon`` on
    the Docker bridge address (or ``host``: ``127.0.0.1`` serves this machine only, not its
    containers); ``commit(files)`` pushes a new commit as an instructor would."""

    def __init__(self, root: Path, name: str = "course", host: str = DOCKER_GATEWAY):
        self.root = Path(root)
        self.bare = self.root / "srv" / f"{name}.git"
        self.work = self.root / "work"
        self.bare.mkdir(parents=True)
        git("init", "--bare", "-b", "main", str(self.bare), cwd=self.root)
        git("clone", str(self.bare), str(self.work), cwd=self.root)
        git("checkout", "-b", "main", cwd=self.work)
        self.port = free_port()
        self.url = f"git://{host}:{self.port}/{name}.git"
        self.proc = subprocess.Popen(
            [
                "git",
                "daemon",
                "--reuseaddr",
                "--export-all",
                f"--base-path={self.root / 'srv'}",
                f"--listen={host}",
                f"--port={self.port}",
                str(self.root / "srv"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def commit(self, files: dict[str, str], message: str = "update") -> None:
        for path, text in files.items():
            p = self.work / path
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        git("add", "-A", cwd=self.work)
        git("commit", "-m", message, cwd=self.work)
        git("push", "origin", "HEAD:main", cwd=self.work)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            r = subprocess.run(["git", "ls-remote", self.url], capture_output=True, text=True)
            if r.returncode == 0 and r.stdout:
                return
            time.sleep(0.2)
        raise TimeoutError(f"git daemon does not serve {self.url}")

    def rewrite(self, files: dict[str, str], message: str = "a new start") -> None:
        """Force-push a new root commit holding only ``files``, as an instructor who starts
        the repository over would (``git checkout --orphan``, ``git push --force``)."""
        git("checkout", "-q", "--orphan", f"root{time.monotonic_ns()}", cwd=self.work)
        git("rm", "-rfq", ".", cwd=self.work)
        self._force(files, "-m", message)

    def amend(self, files: dict[str, str]) -> None:
        """Replace the last commit (``git commit --amend``) and force-push it."""
        self._force(files, "--amend", "-m", "amended")

    def _force(self, files: dict[str, str], *commit: str) -> None:
        for path, text in files.items():
            (self.work / path).write_text(text)
        git("add", "-A", cwd=self.work)
        git("commit", "-q", *commit, cwd=self.work)
        git("push", "-q", "--force", "origin", "HEAD:main", cwd=self.work)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


#: the course profiles of a course hub: JupyterLab with nbgitpuller, on CPU or a T4 seat
COURSE_PROFILES = [
    {"slug": "course-lab", "display_name": "Course (JupyterLab)", "image": LAB_IMAGE},
    {
        "slug": "course-seat",
        "display_name": "Course (JupyterLab, T4 seat)",
        "image": LAB_IMAGE,
        "slice": {"kind": "shared"},
    },
]


def course_lines(node: str, course: dict, *, shared_root: str = "") -> str:
    """The courses' part of a course hub's config (after ``configure_service``, either
    backend's): home volumes ``<node>-home-{username}`` mounted in personal servers, course-work
    volumes ``<node>-work-{slug}--{username}`` (:func:`work_of`), staff folders
    ``<node>-course-{slug}``, ``course`` declared, the service looking every 2 s."""
    return f"""
c.DockerSpawner.volumes = {{"{node}-home-{{username}}": "/home/jovyan"}}
c.GPULabCourses.home_volume = "{node}-home-{{username}}"
c.GPULabCourses.course_volume = "{node}-course-{{slug}}"
c.GPULabCourses.work_volume = "{node}-work-{{slug}}--{{username}}"
c.GPULabCourses.courses = [{course!r}]
c.GPULabCourses.prestart_backoff = 1
c.GPULabCourses.check_interval = 2
{f"c.GPULabCourses.shared_folder_root = {shared_root!r}" if shared_root else ""}
from jupyterhub_gpulab.courses.hubhook import configure_courses
configure_courses(c)
"""


def course_hub(tmp_path: Path, course: dict, *, extra: str = "", shared_root: str = "") -> Hub:
    """A hub (not started) with the service, GPUDockerSpawner, per-user home volumes named
    ``<node>-home-{username}``, course-work volumes ``<node>-work-{slug}--{username}``
    (:func:`work_of`) and ``course`` declared (:func:`course_lines`); ``shared_root``: the
    course's ``c.GPULabCourses.shared_folder_root`` (default: the product's)."""
    node = unique("gpulabcrs")
    port = free_port()
    profiles = PROFILES + COURSE_PROFILES
    workdir = tmp_path / node
    workdir.mkdir(parents=True)
    cfg = (
        service_config(port, workdir, extra="")
        + f"""
c.JupyterHub.spawner_class = "gpulab"
c.DockerSpawner.pull_policy = "never"
c.DockerSpawner.image = {LAB_IMAGE!r}
c.DockerSpawner.prefix = {node!r}
c.Spawner.poll_interval = 2
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 90
c.GPUDockerSpawner.attach_mode = "env"
c.GPULab.node_name = {node!r}
c.GPULab.profiles = {profiles!r}
"""
        + course_lines(node, course, shared_root=shared_root)
        + extra
    )
    hub = Hub(workdir, cfg)
    hub.service_port = port
    hub.node = node
    return hub


def course_api(hub, token: str, method: str, path: str, **kw):
    """A request to the gpulab service's JSON API (``api/<path>``) with ``token``."""
    return requests.request(
        method,
        hub.url + PREFIX + "api/" + path,
        headers={"Authorization": f"token {token}"},
        **{"timeout": 60, **kw},
    )


@contextmanager
def running_course(tmp_path: Path, course: dict, roster: list[str], staff: list[str], **kw):
    """:func:`course_hub` started, with ``roster`` in the course's roster group and ``staff`` in
    its staff group (both ``<slug>``/``<slug>-staff`` unless the record names them); its
    containers and volumes removed afterwards. ``kw``: :func:`course_hub`'s."""
    from e2e_support import remove_node_containers
    from service_support import wait_for_service

    slug = course["slug"]
    hub = course_hub(tmp_path, course, **kw)
    try:
        hub.start()
        wait_for_service(hub)
        for u in roster:
            hub.create_user(u, [course.get("roster_group", slug)])
        for u in staff:
            hub.create_user(u, [course.get("staff_group", f"{slug}-staff")])
        yield hub
    finally:
        hub.stop()
        remove_node_containers(hub.node)
        remove_volumes(hub.node)


def wait_prestart(hub: Hub, token: str, slug: str, timeout: float = 400) -> dict:
    """The course ``slug``'s pre-start progress (``api/courses/<slug>/progress``) once it has
    finished, polled every 2 s; TimeoutError with the hub's log after ``timeout`` seconds."""
    from service_support import service_api

    deadline = time.monotonic() + timeout
    p = None
    while time.monotonic() < deadline:
        r = service_api(hub, token, "GET", f"courses/{slug}/progress")
        assert r.status_code == 200, r.text
        p = r.json()["progress"]
        if p and p["finished_at"]:
            return p
        time.sleep(2)
    raise TimeoutError(f"pre-start did not finish: {p}\n{hub.log_tail()}")


def containers_of(node: str, server: str) -> dict[str, str]:
    """``{user: container id}`` of running containers of course server ``server``."""
    r = subprocess.run(
        [
            "docker",
            "ps",
            "--filter",
            f"name={node}",
            "--filter",
            f"label=org.jupyter.gpulab.server={server}",
            "--format",
            '{{.ID}} {{.Label "org.jupyter.gpulab.user"}}',
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return {u: cid for cid, u in (line.split() for line in r.stdout.splitlines() if line.strip())}


def work_of(node: str, slug: str, user: str) -> str:
    """``user``'s course-work volume of course ``slug`` on a :func:`course_hub` of ``node``."""
    from jupyterhub_gpulab.courses.config import GPULabCourses

    return GPULabCourses(work_volume=f"{node}-work-{{slug}}--{{username}}").work_of(slug, user)


def read_home(volume: str, path: str, image: str = LAB_IMAGE) -> str | None:
    """The text of ``path`` (relative to the home) in home volume ``volume``, ``None`` if absent."""
    r = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "-v",
            f"{volume}:/h:ro",
            "--entrypoint",
            "cat",
            image,
            f"/h/{path}",
        ],
        capture_output=True,
        text=True,
    )
    return r.stdout if r.returncode == 0 else None


def remove_volumes(prefix: str) -> None:
    r = subprocess.run(
        ["docker", "volume", "ls", "-q", "--filter", f"name={prefix}"],
        capture_output=True,
        text=True,
    )
    names = [n for n in r.stdout.split() if n.startswith(prefix)]
    if names:
        subprocess.run(["docker", "volume", "rm", "-f", *names], capture_output=True)


def have_git_daemon() -> bool:
    return shutil.which("git") is not None

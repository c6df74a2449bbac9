"""Courses in the hub process: one call in ``jupyterhub_config.py``, ``configure_courses(c)``.

What it adds (after ``configure_service``)::

    c.Spawner.pre_spawn_hook   a course server (a named server whose name is a course slug) is
                               for the course's roster, staff and JupyterHub admins (anyone
                               else: HTTP 403); it is refused once the course's GPU-hour budget is
                               spent (429, :mod:`.budget`); it starts with the course profile
                               unless the request named another of the course's, pulls the
                               course repositories into its home first
                               (:func:`.content.start_command`); its home is the student's
                               course-work volume, not the personal home (mounted at ~/home
                               only where an admin set ``mount_home``; at the first start the
                               home's course folders are copied in), it mounts the course's
                               ``shared_folder`` read-only at ~/<slug>-shared, and a staff
                               member's also mounts the course folder at ~/<slug>-staff;
                               its object is labelled with the course
                               (``org.jupyter.gpulab.course``), the one mark Distribute and
                               the content read trust (:mod:`.distribute`)
    c.JupyterHub.load_roles    per course known at hub start (declared, or stored by an admin):
                               gpulab-course-<slug>-staff for the staff group: the roster's
                               names and activity and the gpulab service, no hub rights over any
                               server (staff start and stop course servers through the service)
                               gpulab-course-<slug>-prestart for the service
                               gpulab-prestart-<slug>: the token pre-start uses, which may only
                               start and stop servers of the roster group
    c.JupyterHub.services      gpulab-prestart-<slug> (a token holder, no process)

The pre-start token of each course is derived from the service's cookie secret (HMAC), so the
hub and the service agree on it without another file. A course an admin creates in the service
gets its roles at the next hub start; until then the service acts for its staff with its own
token, after checking the staff and roster groups itself.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import logging
import time

log = logging.getLogger("gpulab.courses")

PRESTART_SERVICE = "gpulab-prestart-{slug}"
#: What the gpulab service's own token needs besides SERVICE_SCOPES for courses: rosters (the
#: hub's groups) and starting course servers. Not ``access:servers``: nothing of the courses uses
#: a user's server through the proxy (distribute and collect go through Docker), and that scope
#: would let the service use every user's server.
COURSE_SERVICE_SCOPES = ["admin:groups", "servers"]


def staff_scopes(roster: str, service: str = "gpulab") -> list[str]:
    """What a course's staff may do in the hub: read the roster's names and activity, and use
    the gpulab service, where they start and stop the course's servers (Start all, Stop all).

    No ``servers`` or ``access:servers``: a scope filter cannot name one server for a whole
    group, so ``servers!group=<roster>`` would let staff stop (or open) any server of anyone
    they add to the roster, a researcher's own included. The service acts with the course's
    pre-start token, on ``<user>/<course slug>`` only."""
    f = f"!group={roster}"
    return [
        f"read:users:name{f}",
        f"read:users:activity{f}",
        f"access:services!service={service}",
    ]


def prestart_scopes(roster: str) -> list[str]:
    """The pre-start token: start, stop and read the roster's servers, and list the roster (one
    look at every starting server); nothing else."""
    f = f"!group={roster}"
    return [f"servers{f}", f"read:users:name{f}", f"list:users{f}"]


def prestart_token(secret: bytes, slug: str) -> str:
    """The pre-start service token of course ``slug`` (hex), derived from ``secret``."""
    return hmac.new(secret, f"gpulab-prestart:{slug}".encode(), hashlib.sha256).hexdigest()


class _CourseCache:
    """The ledger's courses as the hook sees them (:class:`~.store.StoredCourse`), re-read at
    most every ``ttl`` seconds, and at once for a name it does not hold: a course created a
    moment ago (pre-start begins within the service's 2-s look) must not start as a plain
    server on the personal home because the last read predates it."""

    def __init__(self, db_url: str, ttl: float = 5.0):
        self.db_url, self.ttl = db_url, ttl
        self._at = 0.0
        self._courses: dict = {}

    def slugs(self) -> frozenset[str]:
        """Every stored course's slug (re-read at most every ``ttl`` seconds)."""
        if time.monotonic() - self._at > self.ttl:
            self._read()
        return frozenset(self._courses)

    def get(self, slug: str):
        if slug not in self._courses or time.monotonic() - self._at > self.ttl:
            self._read()
        return self._courses.get(slug)

    def _read(self) -> None:
        from ..ledger import shared_ledger
        from .store import CourseStore

        store = CourseStore(shared_ledger(self.db_url).engine)
        self._courses = {s.course.slug: s for s in store.all()}
        self._at = time.monotonic()


_CACHES: dict[str, _CourseCache] = {}


def _cache_for(db_url: str) -> _CourseCache:
    """The process's one :class:`_CourseCache` of ``db_url`` (the hook's and the limit's)."""
    return _CACHES.setdefault(db_url, _CourseCache(db_url))


def make_server_limit(db_url: str, base):
    """JupyterHub's ``named_server_limit_per_user`` with course servers outside it: ``base`` (the
    admin's limit: an int, or JupyterHub's callable of the handler) counts a user's personal
    named servers only. A course server (named as a stored course's slug) is never refused for
    the limit, and the user's course servers do not use it up: a student whose three stopped
    personal servers fill a limit of 3 still gets the course's server from Start all.

    JupyterHub counts every named server record, stopped ones included, when a new one would be
    made; the handler's path names the user and the server (``/users/<user>/servers/<name>``)."""
    cache = _cache_for(db_url)

    async def limit(handler) -> int:
        from ..ledger import aio

        n = base(handler) if callable(base) else base
        if inspect.isawaitable(n):
            n = await n
        args = [a for a in getattr(handler, "path_args", ()) or () if a is not None]
        if not n or len(args) < 2:
            return n
        if await aio.call(cache.get, args[-1]) is not None:
            return 0  # a course's server: the course decides who has one
        slugs = await aio.call(cache.slugs)
        user = handler.find_user(args[0])
        named = set(user.orm_spawners) - {""} if user is not None else set()
        return n + len(named & slugs)

    return limit


def _budget_refusal(spawner, stored) -> str | None:
    """The course's GPU-hour budget refusal for a start now (blocking: reads the ledger)."""
    from .. import clock
    from .budget import refusal, used_gpu_hours, window_start

    course = stored.course
    rt = spawner.runtime() if hasattr(spawner, "runtime") else None
    profile = rt.lab.profile(course.profile) if rt is not None else None
    if course.gpu_hours is None or rt is None or profile is None or not profile.wants_gpu:
        return None
    now = clock.utcnow()
    start = window_start(rt.lab.term, stored.created_at, now)
    used = used_gpu_hours(course, rt.ledger.allocations_between(start, now), start, now)
    return refusal(course, used)


def course_volumes(spawner, course, settings, *, staff: bool) -> tuple[dict, str | None]:
    """``(volumes, home)``: ``spawner.volumes`` for ``course``'s server: the volume mounted at
    ``settings.home_path`` (the personal home, ``home``: its template) replaced by the student's
    course-work volume, the home mounted at ``~/home`` only when an admin set the course's
    ``mount_home``, and a staff member's staff folder at ``~/<slug>-staff``."""
    home_path = settings.home_path
    volumes, home = {}, None
    for key, bind in dict(spawner.volumes).items():
        where = bind.get("bind") if isinstance(bind, dict) else bind
        if where == home_path:
            home = key
        else:
            volumes[key] = bind
    volumes[settings.work_of(course.slug, spawner.user.name)] = home_path
    if course.mount_home and home is not None:
        volumes[home] = f"{home_path}/home"
    if staff:
        volumes[settings.staff_of(course.slug)] = f"{home_path}/{course.slug}-staff"
    return volumes, home


def _copy_image(spawner, course, settings) -> str:
    """The image of the never-started containers that copy files for this start:
    ``helper_image``, else the image of the profile this course server starts with (the lab's
    profile of that slug; the course's first when the start names none), else the spawner's.

    Not ``spawner.image`` first: before the profile applies it is DockerSpawner's default."""
    if settings.helper_image:
        return settings.helper_image
    rt = spawner.runtime() if hasattr(spawner, "runtime") else None
    slug = (getattr(spawner, "user_options", None) or {}).get("profile") or course.profile
    profile = rt.lab.profile(slug) if rt is not None and isinstance(slug, str) else None
    return profile.image if profile is not None and profile.image else spawner.image


def _prepare_storage(spawner, course, settings, home: str | None, *, staff: bool) -> dict:
    """Before a course server starts, through the lab's backend (``spawner.lab_backend()``): a
    staff member's staff folder exists, owned by the images' user (``staff_owner``), so they
    can write feedback in it; and, the upgrade path at a student's first start, the course
    folders of the personal home are copied into the new course-work volume
    (:func:`.collect.carry_over`; returns what it did). Blocking.

    On a Swarm with the local volume driver, also the node the server must run on
    (:mod:`.coursenode`): ``spawner.course_node`` is set to the node holding its course volumes
    (the new ones are made there, or beside the personal home), ``None`` when none exists yet."""
    if not hasattr(spawner, "lab_backend"):
        return {}
    kind = getattr(spawner, "object_type", "")
    if kind not in ("container", "service"):
        return {}
    from .collect import COURSE_FOLDERS, carry_over
    from .coursenode import course_node

    image = _copy_image(spawner, course, settings)
    backend = spawner.lab_backend()
    home_volume = spawner.format_volume_name(home, spawner) if home is not None else None
    work = settings.work_of(course.slug, spawner.user.name)
    folder = settings.staff_of(course.slug) if staff else None
    pinned = kind == "service" and not getattr(spawner, "volume_driver", "")
    near = None
    if pinned:
        near = course_node(backend.storage(image), work=work, staff_folder=folder, home=home_volume)
    files = backend.storage(image, near=near)
    if folder and (near is not None or not pinned):
        # (pinned, nowhere yet: the server's mount makes it where Swarm places it)
        files.prepare(folder, tuple(settings.staff_owner))
    done = {}
    if home_volume is not None:
        folders = [*COURSE_FOLDERS, *(src.dir for src in course.content if src.dir)]
        done = carry_over(
            files,
            home=home_volume,
            work=work,
            folders=folders,
            max_bytes=course.collect_max_bytes,
            like=settings.home_path,
        )
    if pinned:
        spawner.course_node = near or course_node(files, work=work, staff_folder=folder, home=None)
    return done


def make_pre_spawn_hook(db_url: str, settings, before=None):
    """The hub's ``pre_spawn_hook`` for course servers; ``settings``: the
    :class:`~.config.GPULabCourses` (home path, volumes; its ``shared_folder_root`` is checked
    again before a course's ``shared_folder`` is mounted: a record stored before the root was set
    is not mounted when outside it); ``before``: a hook already configured, run first."""
    cache = _cache_for(db_url)
    home_path, shared_root = settings.home_path, settings.shared_folder_root

    async def hook(spawner):
        if hasattr(spawner, "course_node"):
            spawner.course_node = None  # set again below for a course server (a Swarm's)
        spawner.course_slug = None  # set below once this start is a course server's
        if before is not None:
            r = before(spawner)
            if hasattr(r, "__await__"):
                await r
        if not spawner.name:
            return
        from ..errors import SpawnRefused
        from ..ledger import aio

        stored = await aio.call(cache.get, spawner.name)
        if stored is None:
            return
        course = stored.course
        groups = {g.name for g in spawner.user.groups}
        staff = course.staff_group in groups
        if not (staff or course.roster_group in groups or spawner.user.admin):
            raise SpawnRefused(
                f"The server {course.server_name!r} is course {course.title}'s, for its roster "
                f"(group {course.roster_group}) and staff. Pick another server name, or ask the "
                "course's staff to add you.",
                reason="not-in-course",
            )
        refused = await aio.call(_budget_refusal, spawner, stored)
        if refused:
            raise SpawnRefused(refused, reason="quota")
        from .content import start_command
        from .model import shared_folder_problem

        wanted = (spawner.user_options or {}).get("profile")
        if course.profiles and wanted not in course.profiles:
            spawner.user_options = {"profile": course.profile}
        spawner.cmd = start_command(course, home_path)
        volumes, home = course_volumes(spawner, course, settings, staff=staff)
        carried = await aio.call(_prepare_storage, spawner, course, settings, home, staff=staff)
        if carried:
            spawner.log.info(
                "Course %s: from %s's home: %s", course.slug, spawner.user.name, carried
            )
        problem = (
            shared_folder_problem(course.shared_folder, shared_root)
            if course.shared_folder and shared_root is not None
            else None
        )
        if problem:
            spawner.log.error("Course %s: shared folder not mounted: %s", course.slug, problem)
        elif course.shared_folder:
            volumes[course.shared_folder] = {
                "bind": f"{home_path}/{course.slug}-shared",
                "mode": "ro",
            }
        spawner.volumes = volumes
        spawner.course_slug = course.slug  # labelled: Distribute acts on course servers only
        spawner.log.info(
            "%s is course %s's server: profile %s, %d content source(s)",
            spawner._log_name,
            course.slug,
            spawner.user_options.get("profile"),
            len(course.content),
        )

    return hook


def configure_courses(c, *, service: str = "gpulab") -> None:
    """Add the course hook, roles and pre-start services to JupyterHub config ``c`` (module
    docstring). Call it after ``configure_service`` and after ``c.GPULabCourses.courses``.
    Deprecated in ``jupyterhub_config.py``: ``jupyterhub_gpulab.configure`` adds the same at the
    hub's start (``hub/wiring.py``), with no ledger or secret read at config load."""
    from ..hub.hubconfig import config_value
    from ..lab.config import GPULab
    from .config import GPULabCourses

    settings = GPULabCourses(config=c)
    gpulab = GPULab(config=c)
    spawner = c.Spawner if "pre_spawn_hook" in c.Spawner else None
    before = spawner.pre_spawn_hook if spawner is not None else None
    c.Spawner.pre_spawn_hook = make_pre_spawn_hook(gpulab.db_url, settings, before)
    if "named_server_limit_per_user" in c.JupyterHub and c.JupyterHub.named_server_limit_per_user:
        base = c.JupyterHub.named_server_limit_per_user
        c.JupyterHub.named_server_limit_per_user = make_server_limit(gpulab.db_url, base)
    courses = {co.slug: co for co in _stored(gpulab.db_url)}
    # the valid ones: a broken course is the service's to report, never a reason to stop the hub
    courses.update({co.slug: co for co in settings.declared_each()[0]})
    secret = _service_secret(c)
    roles = list(config_value(c.JupyterHub, "load_roles", []))
    services = list(config_value(c.JupyterHub, "services", []))
    for co in courses.values():
        roles.append(
            {
                "name": f"gpulab-course-{co.slug}-staff",
                "description": f"Staff of course {co.slug}: the roster's names, the gpulab service",
                "scopes": staff_scopes(co.roster_group, service),
                "groups": [co.staff_group],
            }
        )
        if secret is None:
            continue
        name = PRESTART_SERVICE.format(slug=co.slug)
        services.append({"name": name, "api_token": prestart_token(secret, co.slug)})
        roles.append(
            {
                "name": f"gpulab-course-{co.slug}-prestart",
                "description": f"Pre-start of course {co.slug}: the roster's servers only",
                "scopes": prestart_scopes(co.roster_group),
                "services": [name],
            }
        )
    for i, role in enumerate(roles):
        if role.get("name") == "gpulab-service":
            # keep course groups in step with rosters; start and stop course servers
            extra = [s for s in COURSE_SERVICE_SCOPES if s not in role.get("scopes", [])]
            roles[i] = {**role, "scopes": list(role.get("scopes", [])) + extra}
    c.JupyterHub.load_roles = roles
    c.JupyterHub.services = services


def _stored(db_url: str) -> list:
    """Courses admins stored in the ledger (none when it does not exist yet)."""
    try:
        from ..ledger import Ledger
        from .store import CourseStore

        led = Ledger(db_url)
        try:
            return [s.course for s in CourseStore(led.engine).all()]
        finally:
            led.close()
    except Exception as e:  # a missing or older ledger: the hub creates or refuses it later
        log.info("No stored courses read at config time: %s", e)
        return []


def _service_secret(c) -> bytes | None:
    """The gpulab service's cookie secret (created if missing, as the service would)."""
    try:
        from ..hubapi.secret import read_cookie_secret, secret_file

        return read_cookie_secret(secret_file(c))
    except Exception as e:
        log.warning("No pre-start tokens: the service's cookie secret cannot be read (%s)", e)
        return None

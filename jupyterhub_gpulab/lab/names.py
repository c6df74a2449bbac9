"""Every name derived from a user name: containers, volumes, folders. The one home of that rule,
used by the spawner (containers; ``{username}`` in ``c.DockerSpawner.volumes`` through
``format_volume_name``), courses (home, course-work and staff volumes; collected folders), homes
and the ``gpulab`` command. Pure functions, importable by every process.

The escaping is DockerSpawner's default (``DockerSpawner._escape``: lowercase letters and digits
kept, every other character, ``-`` included, written as ``-xx`` per UTF-8 byte, lowercase hex), so
the home volumes the hub named before this module existed keep their names: ``first.last`` is
``first-2elast``, ``Zoë`` is ``-5ao-c3-ab``, ``c2-dan`` is ``c2-2ddan``, ``c2-2ddan`` is ``c2-2d2ddan``.

Containers: ``container_name(prefix, user, server)`` is ``{prefix}-{user}`` or
``{prefix}-{user}--{server}`` with both parts escaped by :func:`escape_part`. Escaped
parts never contain ``--`` and never end in ``-``, so a name that fits splits back into exactly one
(user, server) pair: the separator is the first ``--`` after ``{prefix}-``. (A part that starts
with an escaped character puts a ``-`` next to the one before it: ``_alice`` on server ``lab`` is
``jupyter--5falice--lab``: counting ``--`` does not tell a cut name from one that fits.)

A longer name is cut and given ``--h--`` and 12 hex digits of a SHA-256 over the full name. No
name that fits contains ``--h--`` (an escaped part would have to hold ``--`` or start with ``-h``,
and every ``-`` in one starts ``-XX``), so a cut name never equals a name that fits, whatever a
user picks as their name; two long names share one only on a 48-bit hash collision.

Volumes: :func:`volume_name` fills a template's ``{username}`` (and ``{slug}``, ``{servername}``)
with escaped parts; a result over :data:`MAX_VOLUME` (a file name's limit: Docker keeps a volume in
a folder of its name) is cut the same way. Homes that Docker could create are never cut.
"""

from __future__ import annotations

import hashlib
import re

MAX_LENGTH = 63  # a DNS label, and Docker's hostname limit
#: The longest volume name: the engine keeps a local volume in a folder of that name.
MAX_VOLUME = 255
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_PREFIX = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def escape_part(text: str) -> str:
    """Injective, DNS-safe escaping: ``"Alice.B"`` → ``"-41lice-2e-42"``; ``""`` → ``""``."""
    out = []
    for ch in text:
        if ch in _SAFE:
            out.append(ch)
        else:
            out.extend(f"-{b:02x}" for b in ch.encode("utf-8"))
    return "".join(out)


def check_prefix(prefix: str) -> str:
    """Return ``prefix`` if it can start a DNS label (``jupyter``, ``gpulab-lab1``), else raise
    ``ValueError`` saying the accepted form."""
    if not _PREFIX.match(prefix) or len(prefix) > 24:
        raise ValueError(
            f"container prefix {prefix!r} must be 1-24 lowercase letters, digits and single '-', "
            "starting with a letter, e.g. 'jupyter'"
        )
    return prefix


def container_name(prefix: str, user: str, server_name: str = "") -> str:
    """The container name for ``user``'s server ``server_name`` (``""``: the default server)."""
    full = f"{prefix}-{escape_part(user)}"
    if server_name:
        full += f"--{escape_part(server_name)}"
    return _fit(full, MAX_LENGTH)


def _fit(full: str, most: int) -> str:
    """``full`` when it has at most ``most`` characters, else cut and hashed (module docstring)."""
    if len(full) <= most:
        return full
    # over the escaped form, which is injective; "user\0server" was not (NUL may be in either)
    digest = hashlib.sha256(full.encode()).hexdigest()[:12]
    tail = f"--h--{digest}"
    head = full[: most - len(tail)].rstrip("-")
    return head + tail


def volume_name(
    template: str,
    username: str,
    *,
    slug: str | None = None,
    servername: str | None = None,
    fields: dict[str, str] | None = None,
) -> str:
    """``template`` (``"gpulab-home-{username}"``) with ``{username}`` (also ``{safe_username}``),
    ``{slug}`` and ``{servername}`` (when given) escaped by :func:`escape_part`; ``{raw_username}`` is the name
    as it is; ``fields``: more, used as given (DockerSpawner's ``{imagename}``, ``{prefix}``). A
    volume name over :data:`MAX_VOLUME` characters is cut (module docstring); a host path (a
    template starting with ``/``) never is. Raises ``KeyError`` for a field nobody gives."""
    user = escape_part(username)
    values = dict(fields or {})
    values.update(username=user, safe_username=user, raw_username=username)
    for key, value in (("slug", slug), ("servername", servername)):
        if value is not None:
            values[key] = escape_part(value)
    name = template.format(**values)
    return name if template.startswith("/") else _fit(name, MAX_VOLUME)


def home_volume(template: str, username: str) -> str:
    """The personal home volume of ``username`` (``c.GPULabCourses.home_volume``, the key of
    ``c.DockerSpawner.volumes``): ``home_volume("gpulab-home-{username}", "first.last")`` is
    ``"gpulab-home-first-2elast"``, as DockerSpawner named it."""
    return volume_name(template, username)


def work_volume(template: str, slug: str, username: str) -> str:
    """The course-work volume of ``username`` in course ``slug`` (``c.GPULabCourses.work_volume``,
    default ``gpulab-coursework-{slug}--{username}``): their course server's home. Slug and user are
    both escaped (neither then holds ``--``), so the first ``--`` splits the two: no two
    (course, student) pairs share a volume, ``("a-b", "c")`` and ``("a", "b-c")`` included."""
    return volume_name(template, username, slug=slug)


def staff_volume(template: str, slug: str) -> str:
    """The staff folder volume of course ``slug`` (``c.GPULabCourses.course_volume``, default
    ``gpulab-course-{slug}``): the slug as it is (a slug is already a safe name), so the staff
    folders made before this module keep their names."""
    return template.format(slug=slug)


def folder_name(username: str) -> str:
    """The folder of ``username`` under a staff folder (``collected/<assignment>/<folder>/``,
    ``feedback/<assignment>/<folder>/``): the escaped name, so ``first.last`` is
    ``first-2elast``; one per user, never ``.``, ``..`` or a path."""
    return escape_part(username)

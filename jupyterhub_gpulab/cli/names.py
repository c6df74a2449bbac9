"""``gpulab names USER [--course SLUG …]``: every name the lab derives from a user name, as the
spawner, courses and homes use them (:mod:`.lab.names`), for an admin looking for a user's
container or volumes (a backup, a removal, the upgrade copy of course work)::

    $ gpulab names first.last --course dl101
    container (default server)   jupyter-first-2elast
    home volume                  gpulab-home-first-2elast
    dl101: course server         jupyter-first-2elast--dl101
    dl101: course-work volume    gpulab-coursework-dl101--first-2elast
    dl101: staff folder volume   gpulab-course-dl101 (collected/<assignment>/first-2elast/)

:mod:`.cli` registers it and hands the configuration in (no import of :mod:`.cli` here).
"""

from __future__ import annotations

import json

from traitlets.config import Config


def names_of(config: Config, user: str, courses: list[str]) -> dict[str, str]:
    """``{what: name}`` for ``user`` (and each course slug of ``courses``) under ``config``:
    the container prefix is ``c.DockerSpawner.prefix`` (default ``jupyter``), the volumes
    ``c.GPULabCourses``' templates."""
    from ..courses.config import GPULabCourses
    from ..lab.names import container_name, folder_name

    settings = GPULabCourses(config=config)
    prefix = config.DockerSpawner.get("prefix", "jupyter")
    out = {
        "container (default server)": container_name(prefix, user),
        "home volume": settings.home_of(user),
    }
    for slug in courses:
        out[f"{slug}: course server"] = container_name(prefix, user, slug)
        out[f"{slug}: course-work volume"] = settings.work_of(slug, user)
        out[f"{slug}: staff folder volume"] = (
            f"{settings.staff_of(slug)} (collected/<assignment>/{folder_name(user)}/)"
        )
    return out


def add_names_command(add, load_config) -> None:
    """Register ``names`` with the ``gpulab`` parser's ``add`` (:func:`~jupyterhub_gpulab.cli.build_parser`);
    ``load_config(path)`` reads the configuration."""

    def cmd_names(args) -> int:
        found = names_of(load_config(args.config), args.user, args.course or [])
        if args.json:
            print(json.dumps(found, indent=2))
        else:
            width = max(len(k) for k in found)
            for what, name in found.items():
                print(f"{what:<{width}}  {name}")
        return 0

    p = add(
        "names",
        cmd_names,
        "print the container and volume names the lab gives a user (and their course work)",
        True,
    )
    p.add_argument("user", help="a hub user name, as it is (first.last, Zoë)")
    p.add_argument("--course", action="append", metavar="SLUG", help="a course slug (repeatable)")

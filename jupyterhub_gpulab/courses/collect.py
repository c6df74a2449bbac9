"""Collect, return and carry over: copy ``assignments/<name>`` out of each student's course-work
volume into the course's staff folder, feedback back, through a :class:`~.storage.Storage`
(Docker volumes in the lab, folders in tests). The personal home is never read or written here.

Who is who: every volume and folder name comes from :mod:`jupyterhub_gpulab.lab.names`
(``volume_of(user)``; the staff folder's ``<student>`` is :func:`~..lab.names.folder_name`), so
``c2-dan`` and ``c2-2ddan`` never share one. What is read is bounded (``max_bytes`` of file content
per student), only regular files and folders are copied (links, devices and the like are skipped
and reported), and a path with a link anywhere on it (``~/assignments`` a link to ``/etc``) is not
read at all: the student's entry says ``skipped`` and why. Written files take the owner of the
volume they land in: collected work is the staff folder's owner's (the image's user, so staff may
write feedback beside it in their course server), feedback the student's.

    report = collect(DockerVolumes(client, image), assignment="hw1", students=[...],
                     volume_of=lambda u: work_volume(template, "dl101", u),
                     course_volume="gpulab-course-dl101", max_bytes=..., owner=(1000, 1000))
    report["ann"] -> {"state": "submitted", "bytes": 1834, "files": 3, "modified": "2026-…"}
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timezone

from .. import clock
from ..lab.names import folder_name
from .records import NAME
from .storage import Entry, LinkOnPath, Storage, TooLarge

__all__ = ["ASSIGNMENT", "COURSE_FOLDERS", "Entry", "carry_over", "collect", "give_back"]

#: Assignment names: one folder name (the course record's rule).
ASSIGNMENT = NAME
#: The folders of a personal home that belong to a course's work (:func:`carry_over`).
COURSE_FOLDERS = ("assignments", "feedback")


def _stamp(now: datetime) -> str:
    return now.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def _check(assignment: str) -> None:
    if not ASSIGNMENT.match(assignment) or assignment in (".", ".."):
        raise ValueError(f"{assignment!r} is not an assignment name (one folder name)")


def _link(where: LinkOnPath) -> dict:
    return {"state": "skipped", "reason": f"{where} is a link; links are never followed"}


def collect(
    files: Storage,
    *,
    assignment: str,
    students: Iterable[str],
    volume_of: Callable[[str], str],
    course_volume: str,
    max_bytes: int,
    owner: tuple[int, int],
) -> dict[str, dict]:
    """Copy each student's ``assignments/<assignment>`` (in ``volume_of(student)``) into
    ``course_volume``'s ``collected/<assignment>/<folder>/<time>/``, owned as that volume's
    root is (made ``owner``'s, the image's uid and gid, when created). One report entry per
    student: ``state`` submitted, missing, skipped (a link on the path), oversized or failed,
    with a ``reason``. Raises ``ValueError`` for a bad assignment name. Blocking."""
    _check(assignment)
    stamp = _stamp(clock.utcnow())
    report: dict[str, dict] = {}
    files.prepare(course_volume, owner)
    staff = files.owner(course_volume)
    for user in sorted(set(students)):
        vol = volume_of(user)
        try:
            if not files.exists(vol):
                report[user] = {"state": "missing", "reason": "no course work yet"}
                continue
            entries, skipped = files.read_tree(vol, f"assignments/{assignment}", max_bytes)
            fs = [e for e in entries if e.data is not None]
            if not fs:
                report[user] = {"state": "missing", "reason": f"assignments/{assignment} is empty"}
                continue
            dest = f"collected/{assignment}/{folder_name(user)}/{stamp}"
            files.write_tree(course_volume, dest, entries, staff)
        except FileNotFoundError:
            report[user] = {"state": "missing", "reason": f"no assignments/{assignment} folder"}
            continue
        except LinkOnPath as e:
            report[user] = _link(e)
            continue
        except TooLarge:
            report[user] = {"state": "oversized", "reason": f"larger than {max_bytes} bytes"}
            continue
        except Exception as e:  # one student's failure never stops the others
            report[user] = {"state": "failed", "reason": str(e)[:200]}
            continue
        report[user] = {
            "state": "submitted",
            "bytes": sum(len(e.data) for e in fs),
            "files": len(fs),
            "modified": datetime.fromtimestamp(max(e.mtime for e in fs), timezone.utc).isoformat(),
            "folder": dest,
            "skipped": skipped,
        }
    return report


def give_back(
    files: Storage,
    *,
    assignment: str,
    students: Iterable[str],
    volume_of: Callable[[str], str],
    course_volume: str,
    max_bytes: int,
) -> dict[str, dict]:
    """Copy ``course_volume``'s ``feedback/<assignment>/<folder>/`` into each student's
    ``feedback/<assignment>/`` of ``volume_of(student)``, owned as that volume's root is.
    ``state``: returned (with ``files``), no-feedback, skipped (a link on either path),
    oversized or failed. Raises ``ValueError`` for a bad assignment name. Blocking."""
    _check(assignment)
    report: dict[str, dict] = {}
    for user in sorted(set(students)):
        vol = volume_of(user)
        try:
            src = f"feedback/{assignment}/{folder_name(user)}"
            entries, _ = files.read_tree(course_volume, src, max_bytes)
        except FileNotFoundError:
            report[user] = {"state": "no-feedback"}
            continue
        except LinkOnPath as e:
            report[user] = _link(e)
            continue
        except TooLarge:
            report[user] = {"state": "oversized", "reason": f"larger than {max_bytes} bytes"}
            continue
        try:
            if not files.exists(vol):
                report[user] = {"state": "failed", "reason": "no course work volume yet"}
                continue
            files.write_tree(vol, f"feedback/{assignment}", entries, files.owner(vol))
        except LinkOnPath as e:
            report[user] = _link(e)
            continue
        except Exception as e:
            report[user] = {"state": "failed", "reason": str(e)[:200]}
            continue
        report[user] = {"state": "returned", "files": sum(1 for e in entries if e.data is not None)}
    return report


def carry_over(
    files: Storage,
    *,
    home: str,
    work: str,
    folders: Iterable[str],
    max_bytes: int,
    like: str | None = None,
) -> dict[str, str]:
    """The upgrade path: before a course server's first start on its new course-work volume
    ``work``, copy the course's ``folders`` (``assignments``, ``feedback``, the content
    folders) of the personal home ``home`` into it, owned as ``home``'s root is. The home is
    only read (nothing is moved or deleted); a ``work`` that exists is left as it is, and none
    is made when there is nothing to copy (the server's first mount makes it). ``like``: the
    image's home folder a new ``work`` starts with (:meth:`~.storage.Storage.prepare`).
    Returns ``{folder: "copied" | "absent" | "skipped: <why>"}`` (empty when ``work`` existed
    or ``home`` does not). Blocking."""
    if files.exists(work) or not files.exists(home):
        return {}
    done: dict[str, str] = {}
    found: dict[str, list[Entry]] = {}
    for folder in dict.fromkeys(folders):
        try:
            found[folder] = files.read_tree(home, folder, max_bytes)[0]
            done[folder] = "copied"
        except FileNotFoundError:
            done[folder] = "absent"
        except LinkOnPath as e:
            done[folder] = f"skipped: {e} is a link"
        except TooLarge:
            done[folder] = f"skipped: larger than {max_bytes} bytes"
    if found:
        owner = files.owner(home)
        files.prepare(work, owner, like)
        for folder, entries in found.items():
            files.write_tree(work, folder, entries, owner)
    return done

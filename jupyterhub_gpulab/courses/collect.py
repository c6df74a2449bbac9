"""Collect and return: copy ``assignments/<name>`` out of each student's home volume into the
course folder (a Docker volume), and feedback back, through Docker's archive API.

No shared exchange directory and no assumption about uids: each copy goes through a container
that is created with the volume mounted and **never started** (nothing runs in it; Docker reads
and writes the volume for the archive calls), then removed. What is read is bounded (a student's
stream is cut at ``max_bytes``), only regular files and folders are copied (links, devices and
anything else are skipped and reported, so nothing outside the home is ever followed), and files
written back take the owner of the folder they land in.

    files = VolumeFiles(docker.from_env(), image="gpulab/singleuser:6.1.1")
    report = collect(files, course, assignment="hw1", students=[...], home_volume=..., course_volume=...)
    report["ann"] -> {"state": "submitted", "bytes": 1834, "files": 3, "modified": "2026-…"}
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone

import docker
from docker.errors import NotFound

from .. import clock
from .records import NAME

__all__ = ["VolumeFiles", "collect", "give_back", "ASSIGNMENT"]

#: Assignment names: one folder name (the course record's rule).
ASSIGNMENT = NAME
#: Where a volume is mounted in the helper container.
MOUNT = "/v"


class TooLarge(Exception):
    pass


@dataclass(frozen=True)
class Entry:
    path: str  # relative, "/"-separated
    data: bytes | None  # None: a folder
    mtime: float


class VolumeFiles:
    """Read and write trees in Docker volumes through never-started helper containers."""

    def __init__(self, client: docker.DockerClient, image: str):
        self.client, self.image = client, image

    def exists(self, volume: str) -> bool:
        try:
            self.client.volumes.get(volume)
            return True
        except NotFound:
            return False

    @contextmanager
    def _mounted(self, volume: str, *, read_only: bool):
        c = self.client.containers.create(
            self.image,
            command=["true"],
            entrypoint=[],
            network_disabled=True,
            labels={"org.jupyter.gpulab.helper": "courses"},
            volumes={volume: {"bind": MOUNT, "mode": "ro" if read_only else "rw"}},
        )
        try:
            yield c
        finally:
            c.remove(force=True)

    @contextmanager
    def _archive(self, container, path: str):
        """The tar stream of ``path`` in ``container`` (an open HTTP response), closed on exit.

        docker-py's ``get_archive`` returns a generator whose connection stays open when the
        reader stops early; the engine then blocks writing the rest of the archive and holds
        the container, so removing it hangs until the client's timeout (60 s). Closing the
        response drops the connection and ends the engine's copy at once."""
        api = self.client.api
        res = api.get(
            f"{api.base_url}/v{api.api_version}/containers/{container.id}/archive",
            params={"path": path},
            stream=True,
        )
        try:
            if res.status_code == 404:
                raise FileNotFoundError(path)
            api._raise_for_status(res)
            yield res
        finally:
            res.close()

    def read_tree(self, volume: str, path: str, max_bytes: int) -> tuple[list[Entry], list[str]]:
        """The regular files and folders under ``path`` (relative to the volume's root), and
        the names skipped (links and the like). Raises ``FileNotFoundError`` when ``path`` is
        absent, :class:`TooLarge` past ``max_bytes`` of file content (reading stops there)."""
        with self._mounted(volume, read_only=True) as c, self._archive(c, f"{MOUNT}/{path}") as res:
            buf = bytearray()
            limit = max_bytes + 64 * 1024 + max_bytes // 8  # tar headers and padding
            for chunk in res.iter_content(64 * 1024):
                buf += chunk
                if len(buf) > limit:
                    raise TooLarge(path)
        entries, skipped, total = [], [], 0
        base = path.rstrip("/").rsplit("/", 1)[-1]
        with tarfile.open(fileobj=io.BytesIO(bytes(buf))) as tar:
            for m in tar:
                rel = m.name[len(base) :].lstrip("/") if m.name.startswith(base) else m.name
                if m.isdir():
                    if rel:
                        entries.append(Entry(rel, None, m.mtime))
                elif m.isfile():
                    total += m.size
                    if total > max_bytes:
                        raise TooLarge(path)
                    entries.append(Entry(rel, tar.extractfile(m).read(), m.mtime))
                else:
                    skipped.append(rel or base)
        return entries, skipped

    def owner(self, volume: str, path: str = "") -> tuple[int, int]:
        """``(uid, gid)`` of ``path`` in ``volume`` (its root by default)."""
        where = f"{MOUNT}/{path}".rstrip("/") + "/"
        with self._mounted(volume, read_only=True) as c, self._archive(c, where) as res:
            head = bytearray()
            for chunk in res.iter_content(512):
                head += chunk
                if len(head) >= 512:
                    break
        info = tarfile.TarInfo.frombuf(bytes(head[:512]), "utf-8", "surrogateescape")
        return info.uid, info.gid

    def write_tree(
        self, volume: str, dest: str, entries: Iterable[Entry], owner: tuple[int, int]
    ) -> None:
        """Write ``entries`` under ``dest`` (relative; its folders are made) in ``volume``,
        owned by ``owner``."""
        out = io.BytesIO()
        uid, gid = owner
        with tarfile.open(fileobj=out, mode="w") as tar:
            parts = [p for p in dest.split("/") if p]
            for i in range(1, len(parts) + 1):
                d = tarfile.TarInfo("/".join(parts[:i]))
                d.type, d.mode, d.uid, d.gid = tarfile.DIRTYPE, 0o755, uid, gid
                d.mtime = clock.utcnow().timestamp()
                tar.addfile(d)
            for e in entries:
                t = tarfile.TarInfo(f"{dest.rstrip('/')}/{e.path}")
                t.uid, t.gid, t.mtime = uid, gid, e.mtime
                if e.data is None:
                    t.type, t.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(t)
                else:
                    t.mode, t.size = 0o644, len(e.data)
                    tar.addfile(t, io.BytesIO(e.data))
        with self._mounted(volume, read_only=False) as c:
            c.put_archive(MOUNT, out.getvalue())


def _stamp(now: datetime) -> str:
    return now.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def collect(
    files: VolumeFiles,
    *,
    assignment: str,
    students: Iterable[str],
    home_volume: str,
    course_volume: str,
    max_bytes: int,
) -> dict[str, dict]:
    """Copy each student's ``assignments/<assignment>`` into the course volume's
    ``collected/<assignment>/<student>/<time>/``; one report entry per student (``state``:
    submitted, missing, oversized, failed). Blocking (docker-py)."""
    if not ASSIGNMENT.match(assignment):
        raise ValueError(f"{assignment!r} is not an assignment name (one folder name)")
    stamp = _stamp(clock.utcnow())
    report: dict[str, dict] = {}
    for user in sorted(set(students)):
        vol = home_volume.format(username=user)
        try:
            if not files.exists(vol):
                report[user] = {"state": "missing", "reason": "no home yet"}
                continue
            entries, skipped = files.read_tree(vol, f"assignments/{assignment}", max_bytes)
        except FileNotFoundError:
            report[user] = {"state": "missing", "reason": f"no assignments/{assignment} folder"}
            continue
        except TooLarge:
            report[user] = {"state": "oversized", "reason": f"larger than {max_bytes} bytes"}
            continue
        except Exception as e:  # one student's failure never stops the others
            report[user] = {"state": "failed", "reason": str(e)[:200]}
            continue
        fs = [e for e in entries if e.data is not None]
        if not fs:
            report[user] = {"state": "missing", "reason": f"assignments/{assignment} is empty"}
            continue
        dest = f"collected/{assignment}/{user}/{stamp}"
        files.write_tree(course_volume, dest, entries, (0, 0))
        latest = max(e.mtime for e in fs)
        report[user] = {
            "state": "submitted",
            "bytes": sum(len(e.data) for e in fs),
            "files": len(fs),
            "modified": datetime.fromtimestamp(latest, timezone.utc).isoformat(),
            "folder": dest,
            "skipped": skipped,
        }
    return report


def give_back(
    files: VolumeFiles,
    *,
    assignment: str,
    students: Iterable[str],
    home_volume: str,
    course_volume: str,
    max_bytes: int,
) -> dict[str, dict]:
    """Copy the course volume's ``feedback/<assignment>/<student>/`` into each student's
    ``feedback/<assignment>/``, owned as their home is. Blocking (docker-py)."""
    if not ASSIGNMENT.match(assignment):
        raise ValueError(f"{assignment!r} is not an assignment name (one folder name)")
    report: dict[str, dict] = {}
    for user in sorted(set(students)):
        vol = home_volume.format(username=user)
        try:
            entries, _ = files.read_tree(course_volume, f"feedback/{assignment}/{user}", max_bytes)
        except FileNotFoundError:
            report[user] = {"state": "no-feedback"}
            continue
        except TooLarge:
            report[user] = {"state": "oversized", "reason": f"larger than {max_bytes} bytes"}
            continue
        if not files.exists(vol):
            report[user] = {"state": "failed", "reason": "no home volume"}
            continue
        try:
            files.write_tree(vol, f"feedback/{assignment}", entries, files.owner(vol))
        except Exception as e:
            report[user] = {"state": "failed", "reason": str(e)[:200]}
            continue
        report[user] = {"state": "returned", "files": sum(1 for e in entries if e.data is not None)}
    return report

"""Course storage: the trees collect and return read and write, behind one small interface.

:class:`Storage` is what :mod:`.collect` needs of a place that holds volumes: ``exists``,
``read_tree`` (bounded, never following a link anywhere on the path), ``write_tree`` (into a
folder whose path holds no link), ``owner`` and ``prepare`` (create a volume owned by the
image's user). Two implementations:

- the engine's named volumes, from the lab's backend
  (:meth:`jupyterhub_gpulab.backends.Backend.storage`: :class:`~..backends.volumes.DockerVolumes`
  on one engine, :class:`~..backends.volumes.NodeVolumes` over a Swarm's nodes), which read and
  write them with the tar helpers here (:func:`tar_of`, :func:`untar`);
- :class:`LocalFolders`: one folder per volume under a root (tests, and hosts whose homes are
  folders).

A "volume" is a name (``gpulab-coursework-dl101--ann``); a path is relative, ``/``-separated,
without ``..``. Every method may raise :class:`LinkOnPath` (a component of the path is a link:
nothing read or written) and :class:`TooLarge` (``read_tree`` past its bound).
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from .. import clock

__all__ = [
    "Entry",
    "LinkOnPath",
    "LocalFolders",
    "Storage",
    "TooLarge",
    "parts_of",
    "tar_of",
    "untar",
]


class TooLarge(Exception):
    """A tree holds more than the bound given to ``read_tree``."""


class LinkOnPath(Exception):
    """A component of the path is a symbolic link (``str(e)``: which); nothing was copied."""


@dataclass(frozen=True)
class Entry:
    path: str  # relative, "/"-separated
    data: bytes | None  # None: a folder
    mtime: float


def parts_of(path: str) -> list[str]:
    parts = [p for p in path.split("/") if p and p != "."]
    if ".." in parts:
        raise ValueError(f"{path!r}: '..' is not allowed")
    return parts


class Storage(Protocol):
    def exists(self, volume: str) -> bool:
        """Whether ``volume`` exists (looking creates nothing)."""

    def read_tree(self, volume: str, path: str, max_bytes: int) -> tuple[list[Entry], list[str]]:
        """The regular files and folders under ``path``, and the relative names skipped
        (links, devices). Raises ``FileNotFoundError`` (``path`` absent), :class:`LinkOnPath`
        (a component of ``path`` is a link), :class:`TooLarge` (over ``max_bytes`` of file
        content; reading stops there)."""

    def write_tree(
        self, volume: str, dest: str, entries: Iterable[Entry], owner: tuple[int, int]
    ) -> None:
        """Write ``entries`` under ``dest`` (its folders made), owned by ``owner`` (uid, gid).
        Raises :class:`LinkOnPath` when a component of ``dest`` that exists is a link."""

    def owner(self, volume: str, path: str = "") -> tuple[int, int]:
        """``(uid, gid)`` of ``path`` (the volume's root by default)."""

    def prepare(self, volume: str, owner: tuple[int, int], like: str | None = None) -> None:
        """Create ``volume`` if missing, its root owned by ``owner``; a root left owned by
        root (an engine made it for a mount) is given to ``owner`` too. ``like``: a folder of
        the image (``/home/jovyan``) whose files a new volume starts with, as when a server
        mounts it there first (Docker's copy of the image's content into an empty volume)."""


def untar(data: bytes, base: str, max_bytes: int, path: str) -> tuple[list[Entry], list[str]]:
    """Entries of a tar of folder ``base`` (names relative to it) and the names skipped."""
    entries, skipped, total = [], [], 0
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
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


def tar_of(parts: list[str], entries: Iterable[Entry], owner: tuple[int, int]) -> bytes:
    """A tar of ``entries`` under folder ``parts`` (each folder on the way included)."""
    out = io.BytesIO()
    uid, gid = owner
    with tarfile.open(fileobj=out, mode="w") as tar:
        for i in range(1, len(parts) + 1):
            d = tarfile.TarInfo("/".join(parts[:i]))
            d.type, d.mode, d.uid, d.gid = tarfile.DIRTYPE, 0o755, uid, gid
            d.mtime = clock.utcnow().timestamp()
            tar.addfile(d)
        for e in entries:
            t = tarfile.TarInfo("/".join([*parts, *parts_of(e.path)]))
            t.uid, t.gid, t.mtime = uid, gid, e.mtime
            if e.data is None:
                t.type, t.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(t)
            else:
                t.mode, t.size = 0o644, len(e.data)
                tar.addfile(t, io.BytesIO(e.data))
    return out.getvalue()


class LocalFolders:
    """:class:`Storage` over folders: volume ``v`` is ``<root>/v``. Owners are set only where
    the process may (as root); links are never followed (each component is ``lstat``-ed)."""

    def __init__(self, root: str):
        self.root = root

    def _vol(self, volume: str) -> str:
        if not volume or "/" in volume or volume in (".", ".."):
            raise ValueError(f"{volume!r} is not a volume name")
        return os.path.join(self.root, volume)

    def exists(self, volume: str) -> bool:
        return os.path.isdir(self._vol(volume))

    def _walk_to(self, volume: str, path: str, *, missing_ok: bool) -> str:
        """The full path of ``path`` in ``volume``, each existing component checked."""
        parts = parts_of(path)
        here = self._vol(volume)
        for i, part in enumerate(parts):
            here = os.path.join(here, part)
            try:
                st = os.lstat(here)
            except FileNotFoundError:
                if missing_ok:
                    return os.path.join(self._vol(volume), *parts)
                raise FileNotFoundError(path) from None
            if stat.S_ISLNK(st.st_mode):
                raise LinkOnPath("/".join(parts[: i + 1]))
        return here

    def read_tree(self, volume: str, path: str, max_bytes: int) -> tuple[list[Entry], list[str]]:
        top = self._walk_to(volume, path, missing_ok=False)
        if not stat.S_ISDIR(os.lstat(top).st_mode):
            raise FileNotFoundError(path)
        entries, skipped, total = [], [], 0
        for folder, dirs, files in os.walk(top, followlinks=False):
            rel_dir = os.path.relpath(folder, top)
            for name in sorted(dirs + files):
                full = os.path.join(folder, name)
                rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                st = os.lstat(full)
                if stat.S_ISDIR(st.st_mode):
                    entries.append(Entry(rel, None, st.st_mtime))
                elif stat.S_ISREG(st.st_mode):
                    total += st.st_size
                    if total > max_bytes:
                        raise TooLarge(path)
                    fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW)
                    with os.fdopen(fd, "rb") as f:
                        entries.append(Entry(rel, f.read(max_bytes + 1), st.st_mtime))
                else:
                    skipped.append(rel)
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
        return entries, skipped

    def write_tree(
        self, volume: str, dest: str, entries: Iterable[Entry], owner: tuple[int, int]
    ) -> None:
        top = self._walk_to(volume, dest, missing_ok=True)
        os.makedirs(top, exist_ok=True)
        self._chown(top, owner)
        for e in entries:
            target = self._walk_to(volume, f"{dest}/{e.path}", missing_ok=True)
            if e.data is None:
                os.makedirs(target, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "wb") as f:
                    f.write(e.data)
                os.utime(target, (e.mtime, e.mtime))
            self._chown(target, owner)

    def owner(self, volume: str, path: str = "") -> tuple[int, int]:
        st = os.lstat(self._walk_to(volume, path, missing_ok=False))
        return st.st_uid, st.st_gid

    def prepare(self, volume: str, owner: tuple[int, int], like: str | None = None) -> None:
        os.makedirs(self._vol(volume), exist_ok=True)  # ``like``: no image here
        if self.owner(volume) == (0, 0):
            self._chown(self._vol(volume), owner)

    @staticmethod
    def _chown(path: str, owner: tuple[int, int]) -> None:
        if os.geteuid() == 0:
            os.lchown(path, *owner)

"""Course storage: the trees collect and return read and write, behind one small interface.

:class:`Storage` is what :mod:`.collect` needs of a place that holds volumes: ``exists``,
``read_tree`` (bounded, never following a link anywhere on the path), ``write_tree`` (into a
folder whose path holds no link), ``owner`` and ``prepare`` (create a volume owned by the
image's user). Two implementations:

- :class:`DockerVolumes`: named volumes of one Docker engine, read and written through
  never-started helper containers (Docker's archive API; nothing runs in them). A Swarm backend
  provides the same for each node's engine (one :class:`DockerVolumes` per node client).
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
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from .. import clock

__all__ = ["DockerVolumes", "Entry", "LinkOnPath", "LocalFolders", "Storage", "TooLarge"]

#: Where a volume is mounted in the helper container.
MOUNT = "/v"
#: Go's ``os.ModeSymlink``, as Docker's path stat header reports a file's mode.
_GO_SYMLINK = 1 << 27


class TooLarge(Exception):
    """A tree holds more than the bound given to ``read_tree``."""


class LinkOnPath(Exception):
    """A component of the path is a symbolic link (``str(e)``: which); nothing was copied."""


@dataclass(frozen=True)
class Entry:
    path: str  # relative, "/"-separated
    data: bytes | None  # None: a folder
    mtime: float


def _parts(path: str) -> list[str]:
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


class DockerVolumes:
    """:class:`Storage` over one Docker engine's named volumes (``client``: a docker-py
    ``DockerClient``; ``image``: any local image with ``true``, the helper's)."""

    def __init__(self, client, image: str):
        self.client, self.image = client, image

    def exists(self, volume: str) -> bool:
        from docker.errors import NotFound

        try:
            self.client.volumes.get(volume)
            return True
        except NotFound:
            return False

    @contextmanager
    def _mounted(self, volume: str, *, read_only: bool, at: str = MOUNT):
        c = self.client.containers.create(
            self.image,
            command=["true"],
            entrypoint=[],
            network_disabled=True,
            labels={"org.jupyter.gpulab.helper": "courses"},
            volumes={volume: {"bind": at, "mode": "ro" if read_only else "rw"}},
        )
        try:
            yield c
        finally:
            c.remove(force=True)

    def _url(self, container) -> str:
        api = self.client.api
        return f"{api.base_url}/v{api.api_version}/containers/{container.id}/archive"

    @contextmanager
    def _archive(self, container, path: str):
        """The tar stream of ``path`` in ``container`` (an open HTTP response), closed on exit.

        docker-py's ``get_archive`` returns a generator whose connection stays open when the
        reader stops early; the engine then blocks writing the rest of the archive and holds
        the container, so removing it hangs until the client's timeout (60 s). Closing the
        response drops the connection and ends the engine's copy at once."""
        api = self.client.api
        res = api.get(self._url(container), params={"path": path}, stream=True)
        try:
            if res.status_code == 404:
                raise FileNotFoundError(path)
            api._raise_for_status(res)
            yield res
        finally:
            res.close()

    def _is_link(self, container, path: str) -> bool | None:
        """Whether ``path`` itself is a link (``None``: absent). Docker resolves every
        component but the last, so callers check each component from the root down."""
        import json
        from base64 import b64decode

        res = self.client.api.head(self._url(container), params={"path": path})
        if res.status_code == 404:
            return None
        self.client.api._raise_for_status(res)
        info = json.loads(b64decode(res.headers["X-Docker-Container-Path-Stat"]))
        return bool(info.get("linkTarget")) or bool(int(info.get("mode", 0)) & _GO_SYMLINK)

    def _no_link(self, container, path: str, *, missing_ok: bool) -> None:
        parts = _parts(path)
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            link = self._is_link(container, f"{MOUNT}/{sub}")
            if link:
                raise LinkOnPath(sub)
            if link is None:
                if missing_ok:
                    return
                raise FileNotFoundError(path)

    def read_tree(self, volume: str, path: str, max_bytes: int) -> tuple[list[Entry], list[str]]:
        with self._mounted(volume, read_only=True) as c:
            self._no_link(c, path, missing_ok=False)
            with self._archive(c, f"{MOUNT}/{'/'.join(_parts(path))}") as res:
                buf = bytearray()
                limit = max_bytes + 64 * 1024 + max_bytes // 8  # tar headers and padding
                for chunk in res.iter_content(64 * 1024):
                    buf += chunk
                    if len(buf) > limit:
                        raise TooLarge(path)
            self._no_link(c, path, missing_ok=False)  # not swapped for a link while read
        return _untar(bytes(buf), _parts(path)[-1], max_bytes, path)

    def owner(self, volume: str, path: str = "") -> tuple[int, int]:
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
        data = _tar(_parts(dest), entries, owner)
        with self._mounted(volume, read_only=False) as c:
            self._no_link(c, dest, missing_ok=True)
            c.put_archive(MOUNT, data)

    def prepare(self, volume: str, owner: tuple[int, int], like: str | None = None) -> None:
        if self.exists(volume):
            if self.owner(volume) != (0, 0):
                return
        elif like:
            with self._mounted(volume, read_only=False, at=like):
                pass  # created with the image's files of ``like``, and their owner
            if self.owner(volume) != (0, 0):
                return
        else:
            self.client.volumes.create(volume)
        # the mount point as a tar entry at "/": extracting it gives the volume's root its owner
        root = tarfile.TarInfo(MOUNT.strip("/"))
        root.type, root.mode, (root.uid, root.gid) = tarfile.DIRTYPE, 0o755, owner
        root.mtime = clock.utcnow().timestamp()
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w") as tar:
            tar.addfile(root)
        with self._mounted(volume, read_only=False) as c:
            c.put_archive("/", out.getvalue())


def _untar(data: bytes, base: str, max_bytes: int, path: str) -> tuple[list[Entry], list[str]]:
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


def _tar(parts: list[str], entries: Iterable[Entry], owner: tuple[int, int]) -> bytes:
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
            t = tarfile.TarInfo("/".join([*parts, *_parts(e.path)]))
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
        parts = _parts(path)
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

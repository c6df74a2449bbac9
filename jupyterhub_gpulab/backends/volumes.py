""":class:`~jupyterhub_gpulab.courses.storage.Storage` over one Docker engine's named volumes, read
and written through never-started helper containers (Docker's archive API; nothing runs in them),
and :class:`NodeVolumes`, the same over a Swarm's node engines (each volume on the node that
holds it). Blocking (docker-py)."""

from __future__ import annotations

import io
import json
import logging
import tarfile
from base64 import b64decode
from collections.abc import Iterable, Mapping
from contextlib import contextmanager

from docker.errors import NotFound

from .. import clock
from ..courses.storage import Entry, LinkOnPath, TooLarge, parts_of, tar_of, untar

__all__ = ["DockerVolumes", "NodeVolumes", "archive"]

log = logging.getLogger(__name__)

#: Where a volume is mounted in the helper container.
MOUNT = "/v"
#: Go's ``os.ModeSymlink``, as Docker's path stat header reports a file's mode.
_GO_SYMLINK = 1 << 27


def _url(api, container_id: str) -> str:
    return f"{api.base_url}/v{api.api_version}/containers/{container_id}/archive"


@contextmanager
def archive(api, container_id: str, path: str):
    """The tar stream of ``path`` in container ``container_id`` (docker-py ``APIClient``
    ``api``): an open HTTP response, closed on exit; ``FileNotFoundError`` when absent.

    docker-py's ``get_archive`` returns a generator whose connection stays open when the reader
    stops early; the engine then blocks writing the rest of the archive and holds the container,
    so removing it hangs until the client's timeout (60 s). Closing the response drops the
    connection and ends the engine's copy at once."""
    res = api.get(_url(api, container_id), params={"path": path}, stream=True)
    try:
        if res.status_code == 404:
            raise FileNotFoundError(path)
        api._raise_for_status(res)
        yield res
    finally:
        res.close()


class DockerVolumes:
    """:class:`~jupyterhub_gpulab.courses.storage.Storage` over one Docker engine's named volumes
    (``api``: a docker-py ``APIClient``; ``image``: any local image with ``true``, the
    helper's)."""

    def __init__(self, api, image: str):
        self.api, self.image = api, image

    def exists(self, volume: str) -> bool:
        try:
            self.api.inspect_volume(volume)
            return True
        except NotFound:
            return False

    @contextmanager
    def _mounted(self, volume: str, *, read_only: bool, at: str = MOUNT):
        api = self.api
        c = api.create_container(
            self.image,
            command=["true"],
            entrypoint=[],
            network_disabled=True,
            labels={"org.jupyter.gpulab.helper": "courses"},
            volumes=[at],
            host_config=api.create_host_config(
                binds={volume: {"bind": at, "mode": "ro" if read_only else "rw"}}
            ),
        )["Id"]
        try:
            yield c
        finally:
            api.remove_container(c, force=True)

    def _is_link(self, container: str, path: str) -> bool | None:
        """Whether ``path`` itself is a link (``None``: absent). Docker resolves every
        component but the last, so callers check each component from the root down."""
        res = self.api.head(_url(self.api, container), params={"path": path})
        if res.status_code == 404:
            return None
        self.api._raise_for_status(res)
        info = json.loads(b64decode(res.headers["X-Docker-Container-Path-Stat"]))
        return bool(info.get("linkTarget")) or bool(int(info.get("mode", 0)) & _GO_SYMLINK)

    def _no_link(self, container: str, path: str, *, missing_ok: bool) -> None:
        parts = parts_of(path)
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
            with archive(self.api, c, f"{MOUNT}/{'/'.join(parts_of(path))}") as res:
                buf = bytearray()
                limit = max_bytes + 64 * 1024 + max_bytes // 8  # tar headers and padding
                for chunk in res.iter_content(64 * 1024):
                    buf += chunk
                    if len(buf) > limit:
                        raise TooLarge(path)
            self._no_link(c, path, missing_ok=False)  # not swapped for a link while read
        return untar(bytes(buf), parts_of(path)[-1], max_bytes, path)

    def owner(self, volume: str, path: str = "") -> tuple[int, int]:
        where = f"{MOUNT}/{path}".rstrip("/") + "/"
        with self._mounted(volume, read_only=True) as c, archive(self.api, c, where) as res:
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
        data = tar_of(parts_of(dest), entries, owner)
        with self._mounted(volume, read_only=False) as c:
            self._no_link(c, dest, missing_ok=True)
            self.api.put_archive(c, MOUNT, data)

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
            self.api.create_volume(volume)
        # the mount point as a tar entry at "/": extracting it gives the volume's root its owner
        root = tarfile.TarInfo(MOUNT.strip("/"))
        root.type, root.mode, (root.uid, root.gid) = tarfile.DIRTYPE, 0o755, owner
        root.mtime = clock.utcnow().timestamp()
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w") as tar:
            tar.addfile(root)
        with self._mounted(volume, read_only=False) as c:
            self.api.put_archive(c, "/", out.getvalue())


class NodeVolumes:
    """:class:`~jupyterhub_gpulab.courses.storage.Storage` over a Swarm's nodes: each volume is
    read and written on the engine of the node that holds it (``nodes``: ``{node name:
    DockerVolumes}``, asked in that order; the first that holds it wins). A volume no node holds
    yet is made on ``near`` (the node a server runs on), else on the first node.

    With the ``local`` volume driver a volume lives on one node (where a server mounted it
    first); a multi-host driver (``c.GPUSwarmSpawner.volume_driver``) makes every node see the
    same volume, and then the first node answers for all."""

    def __init__(self, nodes: Mapping[str, DockerVolumes], near: str | None = None):
        if not nodes:
            raise ValueError(
                "a Swarm backend without node engines (c.GPUSwarmSpawner.node_engines)"
            )
        self.nodes = dict(nodes)
        self.near = near if near in self.nodes else None
        self._where: dict[str, str] = {}

    def node_of(self, volume: str) -> str | None:
        """The node that holds ``volume`` (``None``: none does)."""
        if volume in self._where:
            return self._where[volume]
        order = ([self.near] if self.near else []) + [n for n in self.nodes if n != self.near]
        for name in order:
            try:
                if self.nodes[name].exists(volume):
                    self._where[volume] = name
                    return name
            except Exception as e:  # a node that does not answer holds nothing we can reach
                log.info("Volume %s not looked for on node %s: %s", volume, name, e)
        return None

    def _on(self, volume: str) -> DockerVolumes:
        return self.nodes[self.node_of(volume) or self.near or next(iter(self.nodes))]

    def exists(self, volume: str) -> bool:
        return self.node_of(volume) is not None

    def read_tree(self, volume: str, path: str, max_bytes: int):
        if not self.exists(volume):
            raise FileNotFoundError(path)
        return self._on(volume).read_tree(volume, path, max_bytes)

    def write_tree(self, volume, dest, entries, owner) -> None:
        self._on(volume).write_tree(volume, dest, entries, owner)

    def owner(self, volume: str, path: str = "") -> tuple[int, int]:
        return self._on(volume).owner(volume, path)

    def prepare(self, volume: str, owner: tuple[int, int], like: str | None = None) -> None:
        target = self._on(volume)
        target.prepare(volume, owner, like)
        self._where.setdefault(volume, next(n for n, v in self.nodes.items() if v is target))

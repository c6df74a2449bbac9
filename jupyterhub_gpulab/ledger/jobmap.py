"""dcgm-exporter's HPC job-mapping files, kept in step with the ledger on every claim and release.

dcgm-exporter run with ``--hpc-job-mapping-dir DIR`` (or ``DCGM_HPC_JOB_MAPPING_DIR``) reads,
at every scrape, each regular file of ``DIR`` whose name is a GPU index (``0``) or a GPU index and
a GPU instance id (``2.1``: MIG, the instance id NVML and dcgm-exporter's ``gpu_instance_id``
label show), each line one job id, and copies each of that GPU's (MIG instance's) metrics once per
job with the label ``hpc_job="<job id>"`` (``internal/pkg/transformation/hpc.go``). Other names
are ignored.

gpulab writes, for each slice of this node:

- a whole GPU or a shared seat: the file named by the device's index, one line per holder
  (a shared GPU lists every seat's holder);
- a MIG instance: ``<device index>.<GPU instance id>``, its holder; the instance id comes from
  NVML (``gpu_instance_ids``); a MIG slice NVML does not know (a declared inventory on a host
  without the GPU) gets no file, logged once.

A job id is ``<user>`` for a user's default server and ``<user>/<server name>`` for a named one
(JupyterHub user names hold no ``/``). A file with no holder left is removed, so the GPU's metrics
carry no ``hpc_job`` label. Each write is atomic (a temporary ``.gpulab-*`` file, whose name
dcgm-exporter ignores, renamed over the old), under an ``flock`` on ``DIR/.gpulab.lock`` taken
*after* the ledger committed: two processes (the hub claims, the service releases) each rewrite
from the committed state, so the last writer's view is current.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import sqlalchemy as sa

from .schema import allocations, slices

log = logging.getLogger(__name__)

#: Names dcgm-exporter reads (``validGPUFile`` in its ``hpc.go``).
MAPPING_NAME = re.compile(r"^\d+(\.\d+)?$")
LOCK_NAME = ".gpulab.lock"


def job_id(user: str, server_name: str = "") -> str:
    """``"ann"`` (default server) or ``"ann/gpu"``; line breaks escaped (one job per line)."""
    text = f"{user}/{server_name}" if server_name else user
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def file_name(kind: str, device_index: int, gpu_instance_id: int | None) -> str | None:
    """The mapping file a slice's holder is listed in (module docstring), ``None`` for a MIG
    slice whose GPU instance id is unknown."""
    if kind == "mig":
        return None if gpu_instance_id is None else f"{device_index}.{gpu_instance_id}"
    return str(device_index)


class JobMap:
    """The mapping files of ``node``'s slices in ``directory`` (created, mode 0755, if missing).

    ``gpu_instance_ids`` maps MIG device UUIDs to GPU instance ids (called with the MIG UUIDs not
    yet known; default: none known). A ledger listener (:mod:`.events`): register it with
    ``ledger.listeners.append(jobmap)`` and call :meth:`sync` once at start.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        ledger,
        node: str,
        gpu_instance_ids: Callable[[Iterable[str]], dict[str, int]] | None = None,
    ):
        self.directory = Path(directory)
        self.ledger = ledger
        self.node = node
        self._resolve = gpu_instance_ids or (lambda uuids: {})
        self._gi: dict[str, int] = {}
        self._unknown: set[str] = set()

    # -- ledger listener --------------------------------------------------------------------------

    def claimed(self, claim, seconds: float) -> None:
        self.refresh(device_uuid=claim.slice.device_uuid)

    def released(self, allocation_id: int, slice_id: str, reason: str) -> None:
        self.refresh(slice_id=slice_id)

    # -- files ------------------------------------------------------------------------------------

    def sync(self) -> dict[str, list[str]]:
        """Rewrite every file of this node's slices from the ledger; returns what was written
        (``{file name: [job ids]}``, empty lists for files removed)."""
        return self.refresh()

    def refresh(self, *, device_uuid: str | None = None, slice_id: str | None = None):
        """Rewrite the files of one device (by its UUID, or one of its slices' id), or of every
        device of the node; returns ``{file name: [job ids]}`` as :meth:`sync`."""
        self.directory.mkdir(mode=0o755, parents=True, exist_ok=True)
        with self._locked():
            rows = self._holders(device_uuid, slice_id)
            wanted = self._contents(rows)
            for name, jobs in wanted.items():
                self._write(name, jobs)
        return wanted

    def _holders(self, device_uuid: str | None, slice_id: str | None) -> list:
        q = (
            sa.select(
                slices.c.kind,
                slices.c.device_index,
                slices.c.visible_id,
                slices.c.id,
                allocations.c.user,
                allocations.c.server_name,
            )
            .select_from(slices.outerjoin(allocations, allocations.c.id == slices.c.held_by))
            .where(slices.c.node == self.node)
            .order_by(slices.c.device_index, slices.c.id)
        )
        if slice_id is not None:
            device_uuid = sa.select(slices.c.device_uuid).where(slices.c.id == slice_id)
            q = q.where(slices.c.device_uuid.in_(device_uuid.scalar_subquery()))
        elif device_uuid is not None:
            q = q.where(slices.c.device_uuid == device_uuid)
        with self.ledger._read() as conn:
            return list(conn.execute(q))

    def _contents(self, rows) -> dict[str, list[str]]:
        migs = {r.visible_id for r in rows if r.kind == "mig"}
        missing = migs - set(self._gi) - self._unknown
        if missing:
            self._gi.update(self._resolve(sorted(missing)))
            for uuid in sorted(missing - set(self._gi)):
                self._unknown.add(uuid)
                log.warning(
                    "gpulab: no GPU instance id for MIG device %s (NVML does not know it): its "
                    "holders are left out of dcgm-exporter's job-mapping files",
                    uuid,
                )
        wanted: dict[str, list[str]] = {}
        for r in rows:
            name = file_name(r.kind, r.device_index, self._gi.get(r.visible_id))
            if name is None:
                continue
            jobs = wanted.setdefault(name, [])
            if r.user is not None:
                jobs.append(job_id(r.user, r.server_name or ""))
        return wanted

    @contextlib.contextmanager
    def _locked(self):
        fd = os.open(self.directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _write(self, name: str, jobs: list[str]) -> None:
        path = self.directory / name
        if not jobs:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return
        text = "".join(j + "\n" for j in jobs)
        try:
            if path.read_text() == text:
                return
        except OSError:
            pass
        fd, tmp = tempfile.mkstemp(prefix=".gpulab-", dir=self.directory)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

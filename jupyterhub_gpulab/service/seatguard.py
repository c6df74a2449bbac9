"""The seat guard: after every sample, ends what holds a shared seat over its GPU memory cap.

The decision is :func:`jupyterhub_gpulab.fairuse.seatguard.judge` (pure); this module only reads
its inputs and carries out its verdicts:

- **inputs**: the monitor's latest read of each seated device's processes
  (:attr:`~.monitor.UtilizationMonitor.process_reads`: host pids from NVML's running-process
  lists, each pid's container from ``/proc/<pid>/cgroup``), kept here for ``grace`` plus a few
  minutes; the ledger's open allocations on this host's seats (cap, container, user, server).
- **warn**: a warning under the rule ``seat-memory`` in the ledger (the culler's channel: the
  hub's home page, the user's gpulab page and the JupyterLab status bar show it); cleared once
  the seat is back under its cap or its server is gone.
- **kill** (``c.GPULab.seat_overuse_action = "kill-process"``): for each chosen host pid, its
  container is checked again (a pid reused by another process is never ended), its pid inside
  the container read from ``/proc/<pid>/status`` (``NSpid``, innermost last), and ``kill -KILL
  <pid>`` run in the container through the engine seam (:meth:`~..backends.Backend.exec_run`,
  as the process's own uid, since a server's container holds no capability that lets its root
  signal another user's process; with the shell's ``kill``: images need not ship ``/bin/kill``; a process that is its
  container's pid 1, which no signal from inside ends, stops the server instead); the student gets an ``ended:seat-memory`` notice that says which process and why.
- **stop** (``"stop-server"``): the server is stopped through the hub API; its allocations end
  ``culled:seat-memory`` and the student gets a notice, as the culler's stops do.

Every action is logged with its reason; a failure on one seat is logged and the pass goes on.
With ``c.GPULabService.cull_dry_run`` the guard only logs what it would do (``[dry-run]``).
Seats of node agents' reports are not checked here (their agent reads them: soft for now).
"""

from __future__ import annotations

import logging
import re
from collections import deque
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from .. import clock
from ..backends import Backend, EngineError, Server, backend_for
from ..fairuse.seatguard import RULE, DeviceRead, HeldSeat, Verdict, judge, same_container
from ..hubapi.client import HubClient, HubError
from ..inventory.model import SliceKind
from ..ledger import aio
from ..ledger.notices import ENDED_PREFIX, NOTICE_PREFIX
from .monitor import container_of_pid
from .state import LabState

__all__ = ["KILL", "SeatGuard", "container_pid", "process_uid"]

log = logging.getLogger("gpulab.seatguard")

#: how long reads are kept beyond the grace (seconds)
KEEP_S = 300.0
#: the shell's own ``kill`` (images need not ship procps' ``/bin/kill``; every one has ``sh``)
KILL = ["sh", "-c", 'kill -KILL "$1"', "kill"]
_NSPID = re.compile(r"^NSpid:\s*(.+)$", re.MULTILINE)
_UID = re.compile(r"^Uid:\s*(\d+)", re.MULTILINE)


def _status(pid: int, proc_root: str | Path) -> str:
    try:
        return (Path(proc_root) / str(int(pid)) / "status").read_text()
    except (OSError, ValueError):
        return ""


def container_pid(pid: int, proc_root: str | Path = "/proc") -> int | None:
    """Host process ``pid`` as its own (innermost) pid namespace numbers it, from ``NSpid`` in
    ``<proc_root>/<pid>/status`` (Linux 4.1+); ``None`` for a process that is gone."""
    found = _NSPID.search(_status(pid, proc_root))
    return int(found.group(1).split()[-1]) if found else None


def process_uid(pid: int, proc_root: str | Path = "/proc") -> int | None:
    """The real uid of host process ``pid`` (``Uid:`` in its ``status``); ``None`` if gone."""
    found = _UID.search(_status(pid, proc_root))
    return int(found.group(1)) if found else None


class SeatGuard:
    """One per service; :meth:`run` after every sample (module docstring). ``grace_s`` and
    ``action`` are ``c.GPULab.seat_overuse_grace`` / ``seat_overuse_action``; ``backend``: a
    callable returning the engine seam (default: the lab's, :func:`~..backends.backend_for`)."""

    def __init__(
        self,
        state: LabState,
        hub: HubClient,
        *,
        grace_s: float,
        action: str,
        proc_root: str | Path = "/proc",
        backend: Callable[[], Backend] | None = None,
        dry_run: bool = False,
    ):
        self.state, self.hub = state, hub
        self.grace_s, self.action = grace_s, action
        self.proc_root = proc_root
        #: ``c.GPULabService.cull_dry_run``: log what would be done, change nothing
        self.dry_run = dry_run
        self._backend_factory = backend or (lambda: backend_for(state.gpulab.config))
        self._backend: Backend | None = None
        self._reads: dict[str, deque[DeviceRead]] = {}
        #: slice id → when the guard last acted on it: older reads no longer count for it
        self._acted: dict[str, object] = {}
        #: the verdicts of the latest pass (tests and the log read them)
        self.last: list[Verdict] = []

    def observe(self) -> None:
        """Take the monitor's latest reads into the history (once each); forget old ones."""
        reads = dict(self.state.monitor.process_reads)
        now = clock.utcnow()
        oldest = now - timedelta(seconds=self.grace_s + KEEP_S)
        for device, read in reads.items():
            kept = self._reads.setdefault(device, deque(maxlen=1000))
            if not kept or kept[-1] is not read:  # a new read (two may share a time)
                kept.append(read)
            while kept and kept[0].at < oldest:
                kept.popleft()
        for gone in set(self._reads) - set(reads):
            del self._reads[gone]

    def held_seats(self) -> list[HeldSeat]:
        """This host's held seats with a container (reads the ledger: blocking)."""
        seats = {s.id: s for s in self.state.inventory.slices if s.kind is SliceKind.SHARED}
        if not seats:
            return []
        return [
            HeldSeat(
                a.slice_id,
                seats[a.slice_id].device_uuid,
                seats[a.slice_id].memory_bytes,
                a.container_id,
                a.user,
                a.server_name,
            )
            for a in self.state.ledger.open_allocations()
            if a.slice_id in seats and a.container_id
        ]

    def _judge(self):
        self.observe()
        now = clock.utcnow()
        seats = self.held_seats()
        verdicts = []
        for seat in seats:
            reads = self._reads.get(seat.device_uuid, ())
            after = self._acted.get(seat.slice_id)
            if after is not None:
                reads = [r for r in reads if r.at > after]
            verdicts.append(judge(seat, reads, now, grace_s=self.grace_s, action=self.action))
        held = {s.slice_id for s in seats}
        self._acted = {k: t for k, t in self._acted.items() if k in held}
        warned = {(w.user, w.server_name) for w in self.state.ledger.warnings() if w.rule == RULE}
        return now, verdicts, warned

    async def run(self) -> list[Verdict]:
        """One pass: judge every held seat and carry out the verdicts (module docstring)."""
        now, verdicts, warned = await aio.call(self._judge)
        for v in verdicts:
            key = (v.seat.user, v.seat.server_name)
            if self.dry_run and v.action in ("warn", "kill", "stop"):
                log.info("seat guard [dry-run]: would %s %s/%r: %s", v.action, *key, v.reason)
                continue
            try:
                if v.action == "warn":
                    if key in warned:  # written once, when the seat first went over
                        continue
                    due = now + timedelta(seconds=max(0.0, self.grace_s - v.over_s))
                    await aio.call(self.state.ledger.set_warning, *key, RULE, v.message, due)
                elif v.action == "kill":
                    await self._kill(v, now)
                elif v.action == "stop":
                    await self._stop(v)
                elif key in warned:
                    await aio.call(self.state.ledger.clear_warnings, *key, RULE)
            except (EngineError, HubError, OSError) as e:
                log.warning("seat guard: cannot %s %s/%r: %s", v.action, *key, e)
        self.last = verdicts
        return verdicts

    # -- actions ------------------------------------------------------------------------------

    def _backend_now(self) -> Backend:
        if self._backend is None:
            self._backend = self._backend_factory()
        return self._backend

    async def _kill(self, v: Verdict, now) -> None:
        seat = v.seat
        ended = []
        for pid in v.pids:
            # the pid may have ended, or been reused, since the read: look again
            if not same_container(container_of_pid(pid, self.proc_root), seat.container):
                continue
            inner = container_pid(pid, self.proc_root)
            if inner is None:
                continue
            if inner == 1:  # its container's init: no signal from inside ends it
                log.warning(
                    "seat guard: %s/%r: the process over the seat is the container's "
                    "pid 1; stopping the server instead",
                    seat.user,
                    seat.server_name,
                )
                await self._stop(v)
                return
            server = Server(seat.container, seat.user)
            cmd = KILL + [str(inner)]
            # as the process's own user: a server's container drops every capability, so even
            # its root may not signal another user's process (EPERM)
            uid = str(process_uid(pid, self.proc_root) or 0)
            code, out = await aio.call(lambda: self._backend_now().exec_run(server, cmd, user=uid))  # noqa: B023
            if code != 0:
                log.warning(
                    "seat guard: kill of pid %d (host %d) in %s/%r failed (%d): %s",
                    inner, pid, seat.user, seat.server_name, code, out[:200],
                )  # fmt: skip
                continue
            ended.append(pid)
        if not ended:
            return
        log.warning(
            "seat guard: ended host pid(s) %s of %s/%r on %s: %s",
            ended, seat.user, seat.server_name, seat.slice_id, v.reason,
        )  # fmt: skip

        def record():
            ledger = self.state.ledger
            ledger.clear_warnings(seat.user, seat.server_name, RULE)
            ledger.set_warning(seat.user, seat.server_name, ENDED_PREFIX + RULE, v.message, now)

        await aio.call(record)
        self._acted[seat.slice_id] = now  # the next read starts a new streak

    async def _stop(self, v: Verdict) -> None:
        seat = v.seat
        if (seat.user, seat.server_name) in self.hub.stopper.stopping:
            return
        reason = NOTICE_PREFIX + RULE
        held = [
            a.id
            for a in await aio.call(self.state.ledger.open_allocations, seat.user)
            if a.server_name == seat.server_name
        ]

        async def close():
            def work():
                ledger = self.state.ledger
                for aid in held:
                    if not ledger.amend_end_reason(aid, reason):
                        a = ledger.get(aid)
                        if a is not None and a.open:
                            ledger.release(aid, reason)
                ledger.clear_warnings(seat.user, seat.server_name, RULE)
                ledger.set_warning(seat.user, seat.server_name, reason, v.message, clock.utcnow())

            await aio.call(work)
            log.warning(
                "seat guard: stopped %s/%r (%s): %s", seat.user, seat.server_name, seat.slice_id,
                v.reason,
            )  # fmt: skip

        def not_stopped():
            log.warning(
                "seat guard: %s/%r did not stop; will try again", seat.user, seat.server_name
            )

        await self.hub.stopper.stop(seat.user, seat.server_name, close, if_not_stopped=not_stopped)

"""Seat caps the host enforces: whether a shared seat's GPU memory, as the host sees it, has been
over the seat's cap for longer than the grace, and what to do about it (pure: no I/O).

Input: reads of one device's processes over time (:class:`DeviceRead`, taken by the service's
monitor from ``nvmlDeviceGetComputeRunningProcesses`` / ``…GraphicsRunningProcesses`` /
``…MPSComputeRunningProcesses``: host pids, ``usedGpuMemory`` in bytes, each pid's container from
``/proc/<pid>/cgroup``), the held seats (:class:`HeldSeat`: cap in bytes, container id), the grace
(seconds) and the admin's action. Output: one :class:`Verdict` per held seat.

The rules, each tested on its own (``tests/test_seatguard.py``):

1. **Only the seat's own container counts.** A seat's use is the sum of ``usedGpuMemory`` of the
   processes whose container is the seat's (ids compared by prefix: the ledger may hold a
   12-hex id); processes of other containers, or of none, are never counted against it.
2. **Soft where the host cannot see.** A device whose process lists NVML does not support
   (``NVML_ERROR_NOT_SUPPORTED``: vGPU guests) gives ``readable=False``: its seats are *soft*
   (only the framework cap holds) and nothing is ever done to them.
3. **Never act on an unknown.** A process whose memory NVML does not report (pynvml's
   ``usedGpuMemory = None``) adds nothing to the sum and is never chosen to be ended; a read in
   which the seat's known figures are not over the cap breaks the streak.
4. **The grace.** The seat is over its cap from the oldest read of the unbroken run of over-cap
   reads that ends with the newest one. Over for at most ``grace_s``: ``warn``; for longer:
   ``kill`` (the largest known processes, until the rest fit the cap) or ``stop`` (the server),
   as ``action`` says.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property

from ..lab.config import SEAT_ACTIONS as ACTIONS
from ..units import format_bytes

__all__ = [
    "ACTIONS",
    "RULE",
    "DeviceRead",
    "HeldSeat",
    "HostProcess",
    "Verdict",
    "device_reads",
    "judge",
    "judge_all",
    "same_container",
    "seat_memory",
]

#: The rule a seat's overuse warning is kept under in the ledger's warnings; the end reason of a
#: server stopped for it is ``culled:seat-memory``, the notice of a process ended ``ended:…``.
RULE = "seat-memory"


def same_container(a: str | None, b: str | None) -> bool:
    """Docker ids are compared by prefix: the ledger may hold a short (12-hex) id."""
    return bool(a) and bool(b) and (a.startswith(b) or b.startswith(a))


@dataclass(frozen=True)
class HostProcess:
    """A process on a device as the host sees it: host ``pid``, ``container`` (64-hex Docker id,
    ``None`` outside Docker or gone), ``memory_bytes`` (``None``: NVML does not report it)."""

    pid: int
    container: str | None
    memory_bytes: int | None


@dataclass(frozen=True)
class DeviceRead:
    """One read of a device's processes at ``at`` (aware UTC). ``readable=False``: NVML cannot
    list its processes (``NOT_SUPPORTED``), so ``processes`` is empty and means nothing."""

    at: datetime
    readable: bool
    processes: tuple[HostProcess, ...] = ()

    @cached_property
    def _by_prefix(self) -> dict[str, list[HostProcess]]:
        """Processes by the first 12 hex digits of their container (Docker's short id): a seat
        looks up its own instead of scanning the device's (a 24-seat GPU, read every pass)."""
        found: dict[str, list[HostProcess]] = {}
        for p in self.processes:
            if p.container:
                found.setdefault(p.container[:12], []).append(p)
        return found

    def of(self, container: str) -> list[HostProcess]:
        """The processes of ``container`` (a full or short id, compared by prefix)."""
        near = self._by_prefix.get(container[:12], ()) if container else ()
        return [p for p in near if same_container(p.container, container)]


def device_reads(processes: Mapping[str, Mapping], at: datetime) -> dict[str, DeviceRead]:
    """A node agent's ``processes`` (its report's field, already valid against the service's
    ``NodeReport`` schema: ``{GPU uuid: {"readable", "processes": [{"pid", "container",
    "memory_used_bytes"}]}}``) as the reads the service makes of its own host, taken ``at`` (aware
    UTC), so one decision (:func:`judge`) covers seats on the hub's host and on nodes."""
    return {
        uuid: DeviceRead(
            at,
            bool(read["readable"]),
            tuple(
                HostProcess(int(p["pid"]), p["container"], p["memory_used_bytes"])
                for p in read["processes"]
            )
            if read["readable"]
            else (),
        )
        for uuid, read in processes.items()
    }


@dataclass(frozen=True)
class HeldSeat:
    """A seat held by ``user``'s server ``server_name``, running in ``container``, capped at
    ``cap_bytes`` on device ``device_uuid``."""

    slice_id: str
    device_uuid: str
    cap_bytes: int
    container: str
    user: str
    server_name: str = ""


@dataclass(frozen=True)
class Verdict:
    """What to do with one seat now. ``action``: ``ok`` (within its cap), ``soft`` (the host
    cannot see its processes' memory), ``warn``, ``kill`` (end ``pids``), ``stop`` (stop the
    server). ``used_bytes``: the seat's known use in the newest read (``None`` where soft or not
    read); ``unknown_pids``: its processes whose memory NVML does not report; ``over_s``: seconds
    over the cap (0 when not over). ``message`` is for the user; ``reason`` for the ledger."""

    seat: HeldSeat
    action: str
    used_bytes: int | None = None
    over_s: float = 0.0
    pids: tuple[int, ...] = ()
    unknown_pids: tuple[int, ...] = ()
    message: str = ""
    reason: str = ""
    due_at: datetime | None = field(default=None)


def seat_memory(read: DeviceRead, container: str) -> tuple[int, list[HostProcess], list[int]]:
    """``(known bytes, processes with a known figure, pids with no figure)`` of ``container``'s
    processes in ``read`` (rule 1; rule 3's unknowns apart)."""
    mine = read.of(container)
    known = [p for p in mine if p.memory_bytes is not None]
    return sum(p.memory_bytes or 0 for p in known), known, [p.pid for p in mine if p not in known]


def _to_end(known: list[HostProcess], cap: int) -> tuple[int, ...]:
    """The largest processes first, until what is left fits ``cap``."""
    left, chosen = sum(p.memory_bytes or 0 for p in known), []
    for p in sorted(known, key=lambda p: (-(p.memory_bytes or 0), p.pid)):
        if left <= cap:
            break
        chosen.append(p.pid)
        left -= p.memory_bytes or 0
    return tuple(chosen)


def judge(
    seat: HeldSeat,
    reads: Sequence[DeviceRead],
    now: datetime,
    *,
    grace_s: float,
    action: str = "kill-process",
) -> Verdict:
    """The verdict on ``seat`` from its device's ``reads`` (oldest first) at ``now`` (module
    docstring). Raises ``ValueError`` for an ``action`` not in :data:`ACTIONS`."""
    if action not in ACTIONS:
        raise ValueError(f"seat_overuse_action must be one of {', '.join(ACTIONS)}, not {action!r}")
    if not reads or not reads[-1].readable:
        return Verdict(seat, "soft" if reads else "ok")
    used, known, unknown = seat_memory(reads[-1], seat.container)
    since = None
    for read in reversed(reads):
        if not read.readable or seat_memory(read, seat.container)[0] <= seat.cap_bytes:
            break
        since = read.at
    base = Verdict(seat, "ok", used_bytes=used, unknown_pids=tuple(unknown))
    if since is None:
        return base
    over_s = max(0.0, (now - since).total_seconds())
    figures = f"{format_bytes(used)} of its {format_bytes(seat.cap_bytes)} cap"
    if over_s <= grace_s:
        left = grace_s - over_s
        what = (
            "its largest GPU process will be ended"
            if action == "kill-process"
            else ("your server will be stopped")
        )
        return Verdict(
            seat, "warn", used, over_s, unknown_pids=tuple(unknown),
            message=(
                f"Your GPU seat uses {figures}, as the host sees it. Free GPU memory within "
                f"{left:.0f} s or {what}."
            ),
            reason=f"over its cap for {over_s:.0f} s",
        )  # fmt: skip
    reason = f"{figures} for {over_s:.0f} s (grace {grace_s:.0f} s)"
    if action == "stop-server":
        return Verdict(
            seat, "stop", used, over_s, unknown_pids=tuple(unknown),
            message=f"Your server was stopped: its GPU seat used {reason}.",
            reason=reason,
        )  # fmt: skip
    pids = _to_end(known, seat.cap_bytes)
    return Verdict(
        seat, "kill", used, over_s, pids, tuple(unknown),
        message=(
            f"GPU process{'es' if len(pids) > 1 else ''} {', '.join(map(str, pids))} "
            f"ended: your GPU seat used {reason}."
        ),
        reason=reason,
    )  # fmt: skip


def judge_all(
    seats: Iterable[HeldSeat],
    reads: Mapping[str, Sequence[DeviceRead]],
    now: datetime,
    *,
    grace_s: float,
    action: str = "kill-process",
) -> list[Verdict]:
    """:func:`judge` for every seat, each with its device's reads (``{GPU uuid: reads}``)."""
    return [
        judge(s, reads.get(s.device_uuid, ()), now, grace_s=grace_s, action=action) for s in seats
    ]

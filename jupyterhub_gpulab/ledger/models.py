"""Plain records the ledger returns and the refusals it raises (no SQLAlchemy objects leak out)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..clock import as_utc
from ..inventory.model import Slice, SliceKind


@dataclass(frozen=True)
class Allocation:
    """One ledger row: slice ``slice_id`` held by ``user``'s server ``server_name`` since
    ``started_at``; closed when ``ended_at`` is set, with ``end_reason`` (``stopped``, ``failed``,
    ``culled:<rule>``, ``reconciled:<why>``, ``admin`` …)."""

    id: int
    slice_id: str
    user: str
    server_name: str
    profile: str
    node: str
    charge_group: str | None
    share: float
    container_id: str | None
    container_name: str | None
    started_at: datetime
    ended_at: datetime | None
    end_reason: str | None
    #: the booking (reservation) this allocation is one of the reserved slices of
    booking_id: int | None = None
    #: set while this is a waitlist hold (a slice kept for a queued user, no server yet)
    hold_until: datetime | None = None

    @property
    def open(self) -> bool:
        return self.ended_at is None

    @classmethod
    def from_row(cls, row) -> Allocation:
        m = row._mapping
        return cls(
            id=m["id"],
            slice_id=m["slice_id"],
            user=m["user"],
            server_name=m["server_name"],
            profile=m["profile"],
            node=m["node"],
            charge_group=m["charge_group"],
            share=m["share"],
            container_id=m["container_id"],
            container_name=m["container_name"],
            started_at=as_utc(m["started_at"]),
            ended_at=as_utc(m["ended_at"]),
            end_reason=m["end_reason"],
            booking_id=m["booking_id"],
            hold_until=as_utc(m["hold_until"]),
        )


def slice_from_row(row) -> Slice:
    m = row._mapping
    return Slice(
        id=m["id"],
        kind=SliceKind(m["kind"]),
        device_uuid=m["device_uuid"],
        device_index=m["device_index"],
        device_name=m["device_name"],
        memory_bytes=m["memory_bytes"],
        visible_id=m["visible_id"],
        share=m["share"],
        node=m["node"],
        mig_profile=m["mig_profile"],
        seat=m["seat"],
        seats=m["seats"],
        rank=m["rank"],
        compute_capability=_cc(m.get("cc_key")),
        driver_version=_driver(m.get("driver_key")),
    )


def _cc(key: int | None) -> tuple[int, int] | None:
    """:func:`~..inventory.model.cc_key` undone: ``75`` → ``(7, 5)``."""
    return None if key is None else divmod(int(key), 10)


def _driver(key: int | None) -> tuple[int, ...] | None:
    """:func:`~..inventory.model.driver_key` undone: ``580065006`` → ``(580, 65, 6)``."""
    if key is None:
        return None
    key = int(key)
    return (key // 1_000_000, key // 1_000 % 1_000, key % 1_000)


@dataclass(frozen=True)
class CullWarning:
    """A server that will be stopped at ``due_at`` by ``rule`` unless its condition clears."""

    user: str
    server_name: str
    rule: str
    message: str
    due_at: datetime
    created_at: datetime

    @classmethod
    def from_row(cls, row) -> CullWarning:
        m = row._mapping
        return cls(
            user=m["user"],
            server_name=m["server_name"],
            rule=m["rule"],
            message=m["message"],
            due_at=as_utc(m["due_at"]),
            created_at=as_utc(m["created_at"]),
        )


@dataclass(frozen=True)
class Claim:
    """What :meth:`Ledger.claim` hands back: the open allocation and the slice it holds, and
    ``spare``: how many other free slices of the request the claim saw beside it (a lower bound:
    its candidate rows after the one it took, at most ``CANDIDATES - 1``; 0 when it took a
    held offer). The spawner reads it to skip the refusal read while slices are plenty
    (:mod:`jupyterhub_gpulab.spawner.claimoutlook`)."""

    allocation: Allocation
    slice: Slice
    spare: int = 0


@dataclass(frozen=True)
class SyncReport:
    """What :meth:`Ledger.sync_inventory` changed. ``vanished_held`` lists open allocations whose
    slice is no longer in the inventory (a MIG layout changed, a GPU fell off the bus)."""

    added: tuple[str, ...]
    updated: tuple[str, ...]
    vanished: tuple[str, ...]
    vanished_held: tuple[Allocation, ...]
    #: ``(device uuid, former node)`` of devices the ledger knew under another node name and
    #: moved to this one (``c.GPULab.node_name`` was renamed), with their slices and open
    #: allocations.
    moved: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class LabIdentity:
    """Which lab a ledger belongs to: ``uuid`` (36 characters, made once per ledger, on every
    container label) and the optional ``name`` people call it (``c.GPULab.lab_name``)."""

    uuid: str
    name: str | None = None

    def describe(self) -> str:
        """``"lab 'staging' (3f2c…)"`` or ``"lab 3f2c…"``: how logs and pages name it."""
        short = self.uuid[:8]
        return f"lab {self.name!r} ({short})" if self.name else f"lab {short}"


@dataclass(frozen=True)
class ForeignContainer:
    """A running container that is not this lab's but holds GPUs of this lab's inventory.

    ``lab_uuid``/``lab_name``: the other lab, from its labels (``None``: not a gpulab
    container); ``devices``: this lab's device or MIG ids it holds (``"all"`` expanded to every
    device); ``attached_by``: how (``"device request"``, ``"NVIDIA_VISIBLE_DEVICES"``);
    ``seen_at``: when the hub last looked (``None`` before it is recorded)."""

    container_id: str
    container_name: str
    lab_uuid: str | None
    lab_name: str | None
    user: str | None
    devices: tuple[str, ...]
    attached_by: str
    seen_at: datetime | None = None

    def lab_label(self) -> str | None:
        """Whose it is: ``"lab 'prod' (1a2b3c4d)"``, ``"a gpulab hub from before lab ids"``, or
        ``None`` for a container gpulab did not start."""
        if self.lab_uuid:
            return LabIdentity(self.lab_uuid, self.lab_name).describe()
        return "a gpulab hub from before lab ids" if self.user is not None else None

    def describe(self) -> str:
        """One line for logs and ``gpulab check-config``."""
        who = self.lab_label() or "not started by gpulab"
        user = f", user {self.user!r}" if self.user else ""
        return (
            f"container {self.container_name} ({self.container_id[:12]}; {who}{user}) holds "
            f"{', '.join(self.devices)} by {self.attached_by}"
        )


class LedgerRefusal(Exception):
    """A claim the ledger cannot grant. ``reason`` is a stable machine word; ``message`` is
    written for the user (what happened and what to do). ``refusal``: what the claim's
    ``refusal`` callback built from it inside the claim's transaction and the refusal log holds
    (:meth:`~.ledger.Ledger.claim`); ``None`` when the claim was given no callback."""

    reason = "refused"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message
        self.refusal = None


class NoFreeSlice(LedgerRefusal):
    """No free slice satisfies the request; ``free``/``total`` count slices of that request;
    ``reserved`` (``Reserved`` notes) when reservations keep the free ones for others."""

    reason = "no-free-slice"

    def __init__(self, message: str, *, free: int = 0, total: int = 0, reserved=()):
        super().__init__(message)
        self.free = free
        self.total = total
        self.reserved = tuple(reserved)


class QuotaExceeded(LedgerRefusal):
    """The user, or every group the allocation could be charged to, is at its slice limit."""

    reason = "quota"

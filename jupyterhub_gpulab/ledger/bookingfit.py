"""Whether a new booking fits: the inventory it will find at each instant of its window, with the
MIG GPUs of a layout schedule counted in the layout they will hold then. Pure: the slices, devices
and bookings come in (read by :meth:`.placement.Reservations._check_fits` in the booking's
transaction); :class:`~.bookings.BookingConflict` goes out.

The rule (:mod:`.placement`'s docstring): at every instant of the new booking's window, the
bookings then open whose slices overlap the new one's must fit the slices that any of them can
use (Hall's condition for that set). A GPU the schedule covers (:class:`ScheduledHost`) offers at
an instant the instances of the layout :func:`~..inventory.layoutplan.layout_spans` says it holds
then, not those it holds now: a research group may book ``3g.40gb`` for tonight while the GPU
still holds the class layout, and cannot book it for tomorrow's class time. While a GPU is
changing it offers nothing (it is drained). A booking of class slices (``follow_bookings``) moves
class time itself; then every booking open where it changes a GPU's layout must still fit, so a
class session cannot take the instances of a research session booked before it.

:func:`planned_inventory` gives the same inventory for a stretch of time to the capacity
calendar (:meth:`.placement.Reservations.capacity_calendar`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from ..inventory.layoutplan import DRAIN_REASON, Span, layout_spans
from ..inventory.layoutschedule import LayoutSchedule
from ..inventory.miglayout import parse_layout
from ..inventory.model import Slice, SliceKind, SliceRequest
from .bookings import Booking, BookingConflict

__all__ = ["PlannedInventory", "ScheduledHost", "check_fits", "planned_inventory"]


@dataclass(frozen=True)
class ScheduledHost:
    """The GPUs whose layout follows ``schedule``: the MIG GPUs of ``node`` it covers, exactly
    those the service's layout pass re-lays (:mod:`..service.layouts`)."""

    node: str
    schedule: LayoutSchedule

    @classmethod
    def of(cls, schedule: LayoutSchedule, node: str, source: str) -> ScheduledHost | None:
        """The lab's scheduled host, or ``None``: no schedule, or the GPUs are not read from NVML
        on ``node`` (on node agents nothing re-lays them, so their layouts stay)."""
        if not schedule.entries or source != "nvml":
            return None
        return cls(node, schedule)

    @property
    def longest_lead(self) -> timedelta:
        return timedelta(seconds=max(e.drain_lead_s for e in self.schedule.entries))

    def covers(self, device: dict) -> bool:
        """Whether the schedule decides ``device``'s layout (a device row of the ledger): a
        present MIG GPU of this node in an entry, not drained by an admin."""
        reason = device.get("drain_reason") or ""
        return (
            device["node"] == self.node
            and device["present"]
            and device["mig_enabled"]
            and self.schedule.entry_for(device["uuid"]) is not None
            and (not device["drained"] or reason.startswith(DRAIN_REASON))
        )


@dataclass
class _Planned:
    """One scheduled GPU over the booking's reach: its spans and the instances each layout has."""

    device: dict
    entry: object
    spans: list[Span]
    #: an instance's memory by (GPU model, profile), as NVML reports it where one exists now
    known: dict[tuple[str, str], int] = field(default_factory=dict)
    _slices: dict[str, list[Slice]] = field(default_factory=dict)

    def span_at(self, t: datetime) -> Span | None:
        return next((s for s in self.spans if s.start <= t < s.end), None)

    def layout_at(self, t: datetime) -> str | None:
        span = self.span_at(t)
        return span.layout if span else None

    def slices_at(self, t: datetime) -> list[Slice]:
        layout = self.layout_at(t)
        if layout is None:
            return []
        if layout not in self._slices:
            d = self.device
            self._slices[layout] = [
                Slice(id=f"{d['uuid']}/planned/{layout}/{i}", kind=SliceKind.MIG,
                      device_uuid=d["uuid"], device_index=d["index"], device_name=d["name"],
                      memory_bytes=self.known.get((d["name"], p)) or _memory(p), visible_id="", node=d["node"], mig_profile=p)
                for i, p in enumerate(parse_layout(layout))
            ]  # fmt: skip
        return self._slices[layout]

    def in_the_way(self, profile: str | None, t: datetime) -> str | None:
        """``"GPU 0 (GPU-…) has the class layout …"`` when one of this GPU's layouts has
        ``profile`` but not the one (if any) it holds at ``t``."""
        span = self.span_at(t)
        if span is None or profile is None:
            return None
        if profile not in (*self.entry.class_layout, *self.entry.research_layout):
            return None
        if span.layout is not None and profile in parse_layout(span.layout):
            return None
        then = span.describe(t)
        has = f"it has no {profile}" if span.layout else "it is drained while it changes"
        return f"GPU {self.device['index']} ({self.device['uuid']}) {then}: {has}"


class PlannedInventory:
    """The slices in service at each instant of a stretch of time: those of unscheduled GPUs as
    they are, a scheduled GPU's those of the layout it holds then (made by
    :func:`planned_inventory`)."""

    def __init__(self, in_service: list[Slice], planned: dict[str, _Planned]):
        self.planned = planned
        self.fixed = [s for s in in_service if s.device_uuid not in planned]
        self._fixed_sets: dict[int, set[str]] = {}

    def slice_ids(self, request: SliceRequest, t: datetime) -> set[str]:
        """The slices ``request`` matches at ``t`` (those of unscheduled GPUs read once)."""
        key = id(request)
        if key not in self._fixed_sets:
            self._fixed_sets[key] = {s.id for s in self.fixed if request.matches(s)}
        planned = {s.id for g in self.planned.values() for s in g.slices_at(t)
                   if request.matches(s)}  # fmt: skip
        return self._fixed_sets[key] | planned

    def changes(self, start: datetime, end: datetime) -> list[datetime]:
        """The instants in ``(start, end)`` where a scheduled GPU's layout changes."""
        return sorted({sp.start for g in self.planned.values() for sp in g.spans
                       if start < sp.start < end})  # fmt: skip


class _Fit(PlannedInventory):
    """The inventory over one new booking's reach, and the rule judged on it."""

    def pool(self, b: Booking, t: datetime) -> set[str]:
        """The slices ``b`` can use at ``t``."""
        return self.slice_ids(b.request, t)

    def in_the_way(self, b: Booking, t: datetime) -> str:
        found = (g.in_the_way(b.request.wanted_mig_profile, t) for g in self.planned.values())
        return "; ".join(w for w in found if w)

    def judge(self, b: Booking, open_now: list[Booking], t: datetime, moved_by=None) -> None:
        """Raise when ``b`` and the bookings of ``open_now`` sharing its slices need more slices
        at ``t`` than any of them can use."""
        pool = self.pool(b, t)
        why = self.in_the_way(b, t)
        fix = f". By c.GPULab.mig_schedule, {why}" if why else ""
        at = f"{t:%Y-%m-%d %H:%M} UTC"
        if moved_by is None and len(pool) < b.count:
            has = f"will have only {len(pool)}" if why else f"has only {len(pool)}"
            raise BookingConflict(
                f"{b.describe()} cannot be booked: the lab {has} {b.request.describe()} "
                f"slice{_s(len(pool))} in service" + (f" at {at}{fix}." if why else ".")
            )
        sets = {id(o): self.pool(o, t) for o in open_now}
        sharing = [o for o in open_now if sets[id(o)] & pool]
        union = pool.union(*(sets[id(o)] for o in sharing))
        wanted = b.count + sum(o.count for o in sharing)
        if wanted <= len(union):
            return
        if moved_by is not None:
            head = (f"{moved_by.describe()} cannot be booked: it moves class time on a scheduled "
                    f"GPU, and at {at} {b.describe()}, booked before it, needs {wanted} "
                    f"slice{_s(wanted)}")  # fmt: skip
        else:
            head = f"{b.describe()} cannot be booked: at {at} it needs {wanted} slices"
        if sharing:
            head += f" together with {'; '.join(o.describe() for o in sharing)}"
        raise BookingConflict(
            f"{head}, and the lab has {len(union)} that they can use{fix}. "
            "Move or shrink one of them.",
            sharing,
        )


def check_fits(
    new: Booking,
    nearby: Iterable[Booking],
    in_service: list[Slice],
    devices: list[dict] = (),
    host: ScheduledHost | None = None,
) -> None:
    """Raise :class:`BookingConflict` when ``new`` does not fit (module docstring). ``nearby``:
    the other bookings within a day of its window; ``in_service``: the slices in service;
    ``devices``: the ledger's device rows (read only with a ``host``)."""
    nearby = list(nearby)
    lead = host.longest_lead if host else timedelta(0)
    start, end = new.window_start - lead, new.ends_at + lead
    known = _known(in_service)
    planned = _plan(host, devices, [*nearby, new], start, end, known)
    before = _plan(host, devices, nearby, start, end, known)
    fit = _Fit(in_service, planned)
    others = [b for b in nearby if b.window_start < end and b.ends_at > start]
    cuts = {new.window_start} | {
        t for b in others for t in (b.window_start, b.ends_at) if start <= t < end
    }
    cuts |= {sp.start for p in (planned, before) for g in p.values() for sp in g.spans
             if start <= sp.start < end}  # fmt: skip
    for t in sorted(cuts):
        open_now = [b for b in others if b.window_start <= t < b.ends_at]
        here = new.window_start <= t < new.ends_at
        if here:
            fit.judge(new, open_now, t)
        if any(before[u].layout_at(t) != g.layout_at(t) for u, g in planned.items()):
            for b in open_now:  # the new booking moved class time: they must still fit
                rest = [o for o in open_now if o is not b] + ([new] if here else [])
                fit.judge(b, rest, t, moved_by=new)


def planned_inventory(
    in_service: list[Slice],
    devices: list[dict],
    host: ScheduledHost | None,
    bookings: Iterable[Booking],
    start: datetime,
    end: datetime,
) -> PlannedInventory:
    """What is in service over ``[start, end)`` with the booked ``bookings`` (they move class
    time where ``follow_bookings``): the capacity calendar's inventory, as a booking's fit sees
    it."""
    known = _known(in_service)
    return PlannedInventory(in_service, _plan(host, devices, list(bookings), start, end, known))


def _known(in_service: list[Slice]) -> dict[tuple[str, str], int]:
    return {(s.device_name, s.mig_profile): s.memory_bytes for s in in_service if s.mig_profile}


def _plan(host, devices, bookings, start, end, known) -> dict[str, _Planned]:
    if host is None:
        return {}
    tz = host.schedule.tz or timezone.utc
    out, spans = {}, {}  # the GPUs of one entry share its spans: worked out once
    for d in devices:
        if host.covers(d):
            entry = host.schedule.entry_for(d["uuid"])
            if id(entry) not in spans:
                spans[id(entry)] = layout_spans(entry, bookings, start, end, tz)
            out[d["uuid"]] = _Planned(d, entry, spans[id(entry)], known)
    return out


def _memory(profile: str) -> int:
    """An instance's memory from its profile's name (``3g.40gb``: 40 GB), for requests that ask
    for a minimum, where no instance of that profile and GPU model is in service to read it."""
    m = re.search(r"\.(\d+)gb", profile)
    return int(m.group(1)) * 10**9 if m else 0


def _s(n: int) -> str:
    return "" if n == 1 else "s"

"""Which MIG layout a scheduled GPU should have, when it next changes, and whether a re-lay is due.
Pure: the schedule (:mod:`.layoutschedule`), the ledger's bookings, the GPU's current layout and
its open allocations come in as arguments, the time too; nothing is read or written here. The
gpulab service's layout pass acts on the answers (:mod:`jupyterhub_gpulab.service.layouts`);
the term simulation calls the same functions.

The rule, per GPU of a schedule entry:

- **class time** is every class window, and (with ``follow_bookings``) every booked session
  whose slices only the class layout has (a booking of ``1g.10gb`` when the class layout is
  ``7x1g.10gb`` and the research layout ``2x3g.40gb``), from the booking's own lead
  (``starts_at - lead``) to its end;
- the GPU's **target** is the class layout from ``drain_lead`` before class time until it
  ends, the research layout otherwise: so the change towards class starts (the GPU is drained,
  holders of research instances are warned) ``drain_lead`` ahead, and the re-lay is done as soon
  as the last holder has stopped;
- a **re-lay is due** when the target differs from the current layout and the GPU holds no open
  allocation; with holders left, the GPU stays drained and they must be gone by
  :attr:`Decision.holders_by`: the start of class time for a change to the class layout (they
  were warned ``drain_lead`` ahead), ``drain_lead`` after class time ends for a change to the
  research layout (a student finishing up gets the same notice).

Functions (all times aware UTC datetimes)::

    periods = class_periods(entry, bookings, start, end, tz)        # [Period], merged, sorted
    d = decide(schedule, uuid, now, current="7x1g.10gb", holders=2, bookings=[...])
    d.target, d.next_layout, d.next_change_at, d.drain, d.relay_due, d.holders_by
    spans = layout_spans(entry, bookings, start, end, tz)          # [Span]: what it holds when
    problems = conflicts(schedule, bookings, now)                    # ["…names both…"]

**What a GPU holds when** (:func:`layout_spans`), the one rule that check-config's
:func:`conflicts` and a booking's fit (:mod:`jupyterhub_gpulab.ledger.bookingfit`) both judge
booked sessions by: the class layout from the moment class time *begins* (its holders were
stopped then) until it ends; the research layout outside class time and its drain leads on either
side; in between it is **changing** and holds neither for certain (drained, so nothing new lands;
research holders may stay until class begins, class holders until ``drain_lead`` after it ends).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Literal

from .layoutschedule import DAYS, LayoutSchedule, ScheduleEntry, Window
from .miglayout import LayoutError, format_layout, parse_layout

__all__ = [
    "DRAIN_REASON",
    "HORIZON",
    "Decision",
    "Period",
    "Span",
    "booking_needs",
    "class_periods",
    "conflicts",
    "decide",
    "layout_spans",
    "same_layout",
]

#: The drain reason of a GPU drained for a change of layout (``gpulab mig-layout``, the service's
#: pass), followed by the target layout; a GPU drained with any other reason is an admin's.
DRAIN_REASON = "MIG re-layout to "

#: How far ahead :func:`decide` looks for the next change (a week and a day: every weekly window).
HORIZON = timedelta(days=8)
Need = Literal["class", "research"]


@dataclass(frozen=True)
class Period:
    """Class time: the class layout is the target over ``[start, end)``; ``begins`` is when the
    class window or booked session itself begins (``start`` is ``drain_lead`` earlier), ``why``
    names it (``"class window mon,wed 08:00–18:00"``, ``"booking DL101 (…)"``)."""

    start: datetime
    begins: datetime
    end: datetime
    why: str


@dataclass(frozen=True)
class Span:
    """What a scheduled GPU holds for certain over ``[start, end)``: ``layout`` (text), or
    ``None`` while it is changing (to ``toward``); ``phase`` is ``"class"``, ``"research"`` or
    ``"changing"``, ``why`` says which part of the schedule makes it so."""

    start: datetime
    end: datetime
    layout: str | None
    phase: Literal["class", "research", "changing"]
    why: str
    toward: str | None = None

    def describe(self, t: datetime | None = None) -> str:
        """``"has the class layout 7x1g.10gb at 2026-12-07 09:00 UTC (class window …, 07:00–17:00
        UTC)"``: what a refusal says of the GPU (after its name) at ``t`` (default: the span's
        first instant)."""
        at = f"at {t or self.start:%Y-%m-%d %H:%M} UTC"
        if self.layout is None:
            return f"is changing to {self.toward} {at} ({self.why})"
        return f"has the {self.phase} layout {self.layout} {at} ({self.why})"


@dataclass(frozen=True)
class Decision:
    """What GPU ``uuid`` should be now. Layouts are written as :func:`.miglayout.format_layout`
    does (``"7x1g.10gb"``); ``current`` as given (``None``: unknown)."""

    uuid: str
    current: str | None
    target: str
    phase: Literal["class", "research"]
    why: str
    #: the next change within :data:`HORIZON`: to which layout, when, why (else ``None``)
    next_layout: str | None
    next_change_at: datetime | None
    next_why: str | None
    #: keep new allocations off the GPU now (it is not in its target layout)
    drain: bool
    #: re-lay it now: not in its target layout and no open allocation on it
    relay_due: bool
    #: with holders left and a change pending: when they must have stopped (else ``None``)
    holders_by: datetime | None

    def to_dict(self) -> dict:
        """For the admin JSON API: times as ISO strings."""
        return {
            k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in self.__dict__.items()
        }


def same_layout(a: str | Sequence[str] | None, b: str | Sequence[str] | None) -> bool:
    """Whether two layouts (text or profile lists) hold the same instances; ``None`` never
    matches, nor does text that is not a layout."""
    if a is None or b is None:
        return False
    try:
        return sorted(_profiles(a)) == sorted(_profiles(b))
    except LayoutError:
        return False


def booking_needs(entry: ScheduleEntry, booking) -> Need | None:
    """Which of ``entry``'s layouts a booked session's slices exist in only: ``"class"``,
    ``"research"``, or ``None`` (not MIG, in both, or in neither)."""
    profile = booking.request.wanted_mig_profile
    if profile is None:
        return None
    in_class, in_research = profile in entry.class_layout, profile in entry.research_layout
    if in_class == in_research:
        return None
    return "class" if in_class else "research"


def window_times(
    window: Window, start: datetime, end: datetime, tz: tzinfo
) -> list[tuple[datetime, datetime]]:
    """``window``'s occurrences overlapping ``[start, end)``, as UTC pairs; wall-clock in ``tz``
    (a 08:00 window stays at 08:00 across a daylight-saving change)."""
    out = []
    day = start.astimezone(tz).date() - timedelta(days=1)
    while day <= end.astimezone(tz).date():
        if (
            DAYS[day.weekday()] in window.days
            and (window.first is None or window.first <= day)
            and (window.last is None or day <= window.last)
        ):
            s = datetime.combine(day, window.start, tz).astimezone(timezone.utc)
            e = datetime.combine(day, window.end, tz).astimezone(timezone.utc)
            if s < end and e > start:
                out.append((s, e))
        day += timedelta(days=1)
    return out


def class_periods(
    entry: ScheduleEntry,
    bookings: Iterable,
    start: datetime,
    end: datetime,
    tz: tzinfo,
    *,
    windows_only: bool = False,
) -> list[Period]:
    """``entry``'s class time overlapping ``[start, end)`` (drain lead included), sorted, with
    overlapping or touching periods merged (the first one's ``begins`` and ``why`` kept).
    ``bookings``: :class:`~..ledger.Booking` records (anything with ``request``, ``window_start``,
    ``ends_at``, ``describe()``); ``windows_only`` leaves them out whatever ``follow_bookings``."""
    lead = timedelta(seconds=entry.drain_lead_s)
    raw: list[Period] = []
    for w in entry.windows:
        for s, e in window_times(w, start, end + lead, tz):
            raw.append(Period(s - lead, s, e, w.describe()))
    if entry.follow_bookings and not windows_only:
        for b in bookings:
            if (
                booking_needs(entry, b) == "class"
                and b.ends_at > start
                and b.window_start < end + lead
            ):
                raw.append(Period(b.window_start - lead, b.window_start, b.ends_at,
                                  f"booking {b.describe()}"))  # fmt: skip
    merged: list[Period] = []
    for p in sorted(raw, key=lambda p: (p.start, p.end)):
        if merged and p.start <= merged[-1].end:
            last = merged[-1]
            merged[-1] = Period(last.start, last.begins, max(last.end, p.end), last.why)
        else:
            merged.append(p)
    return [p for p in merged if p.end > start and p.start < end]


def layout_spans(
    entry: ScheduleEntry, bookings: Iterable, start: datetime, end: datetime, tz: tzinfo
) -> list[Span]:
    """What a GPU of ``entry`` holds over ``[start, end)``, as consecutive :class:`Span` records
    covering it (the module docstring's rule; ``bookings`` as for :func:`class_periods`)."""
    lead = timedelta(seconds=entry.drain_lead_s)
    periods = class_periods(entry, bookings, start - lead, end, tz)
    cuts = {start}
    for p in periods:
        cuts |= {t for t in (p.start, p.begins, p.end, p.end + lead) if start < t < end}
    out: list[Span] = []
    for a, b in zip(sorted(cuts), [*sorted(cuts)[1:], end]):
        layout, phase, why, toward = _state_at(entry, periods, a, lead)
        if out and (out[-1].layout, out[-1].why, out[-1].toward) == (layout, why, toward):
            out[-1] = Span(out[-1].start, b, layout, phase, why, toward)
        else:
            out.append(Span(a, b, layout, phase, why, toward))
    return out


def _state_at(entry: ScheduleEntry, periods: list[Period], t: datetime, lead: timedelta):
    """``(layout, phase, why, toward)`` of a GPU of ``entry`` at ``t``: class from when class
    time begins to its end; changing in the drain lead before it and after it; research else."""
    for p in periods:
        if p.begins <= t < p.end:
            why = f"{p.why}, {p.begins:%H:%M}–{p.end:%H:%M} UTC"
            return entry.class_text, "class", why, None
    for p in periods:
        if p.start <= t < p.begins:
            why = (f"the {_minutes(lead)} drain lead before {p.why}: holders of research "
                   f"instances have until {p.begins:%H:%M} UTC")  # fmt: skip
            return None, "changing", why, entry.class_text
        if p.end <= t < p.end + lead:
            why = (f"after {p.why}: holders of class slices have the {_minutes(lead)} drain "
                   f"lead, until {p.end + lead:%H:%M} UTC")  # fmt: skip
            return None, "changing", why, entry.research_text
    return entry.research_text, "research", "outside class time", None


def decide(
    schedule: LayoutSchedule,
    uuid: str,
    now: datetime,
    *,
    current: str | Sequence[str] | None = None,
    holders: int = 0,
    bookings: Iterable = (),
    horizon: timedelta = HORIZON,
) -> Decision | None:
    """The :class:`Decision` for MIG GPU ``uuid`` at ``now`` (aware); ``None`` when no entry of
    ``schedule`` covers it. ``current``: its layout now (text or profile names, ``None`` when
    unknown: no re-lay is then due); ``holders``: its open allocations; ``bookings``: the
    ledger's bookings (:meth:`~..ledger.Ledger.bookings`)."""
    entry = schedule.entry_for(uuid)
    if entry is None:
        return None
    tz = schedule.tz or timezone.utc
    lead = timedelta(seconds=entry.drain_lead_s)
    bookings = list(bookings)
    periods = class_periods(entry, bookings, now, now + horizon, tz)
    here = next((p for p in periods if p.start <= now < p.end), None)
    if here is not None:
        target, phase, why = entry.class_text, "class", here.why
        nxt = (entry.research_text, here.end, f"after {here.why}")
        by = max(here.begins, now)
    else:
        target, phase, why = entry.research_text, "research", "outside class time"
        after = next((p for p in periods if p.start > now), None)
        nxt = None if after is None else (
            entry.class_text, after.start, f"{_minutes(lead)} before {after.why}")  # fmt: skip
        ended = max(
            (p.end for p in class_periods(entry, bookings, now - lead, now, tz)), default=None
        )
        by = max(ended + lead, now) if ended else now
    if nxt is not None and nxt[1] > now + horizon:
        nxt = None
    cur = _text(current)
    off = cur is not None and not same_layout(cur, target)
    return Decision(
        uuid=uuid,
        current=cur,
        target=target,
        phase=phase,
        why=why,
        next_layout=nxt[0] if nxt else None,
        next_change_at=nxt[1] if nxt else None,
        next_why=nxt[2] if nxt else None,
        drain=off,
        relay_due=off and holders == 0,
        holders_by=by if off and holders > 0 else None,
    )


def conflicts(
    schedule: LayoutSchedule,
    bookings: Iterable,
    now: datetime,
    *,
    horizon: timedelta = timedelta(days=400),
) -> list[str]:
    """The booked sessions ``schedule`` would leave without their slices, one message each naming
    the booking and the schedule's part: a session whose slices only one of an entry's layouts
    has, at a time when :func:`layout_spans` says the GPU holds the other or is changing."""
    tz = schedule.tz or timezone.utc
    bookings = [b for b in bookings if b.ends_at > now and b.window_start < now + horizon]
    out: list[str] = []
    for i, entry in enumerate(schedule.entries):
        gpus = "every MIG GPU" if entry.gpus is None else ", ".join(entry.gpus)
        for b in bookings:
            need = booking_needs(entry, b)
            if need is None:
                continue
            want = entry.class_text if need == "class" else entry.research_text
            spans = layout_spans(entry, bookings, max(b.window_start, now), b.ends_at, tz)
            bad = next((sp for sp in spans if not same_layout(sp.layout, want)), None)
            if bad is None:
                continue
            fix = (
                "add a class window covering it or set follow_bookings to true"
                if need == "class"
                else "move the session or the class window"
            )
            out.append(
                f"mig_schedule[{i}] ({gpus}) {bad.describe()} during booked session "
                f"{b.describe()}, which needs {b.request.wanted_mig_profile} slices of the "
                f"{need} layout {want}: {fix}"
            )
    return out


def _profiles(layout: str | Sequence[str]) -> list[str]:
    return parse_layout(layout) if isinstance(layout, str) else list(layout)


def _text(layout: str | Sequence[str] | None) -> str | None:
    if layout is None:
        return None
    try:
        return format_layout(_profiles(layout))
    except LayoutError:
        return str(layout)


def _minutes(d: timedelta) -> str:
    return f"{int(d.total_seconds() // 60)} min"

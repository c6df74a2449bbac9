"""The MIG layout schedule an admin writes (``c.GPULab.mig_schedule``), read into plain records.
Pure: no I/O, no clock. The decisions it drives are :mod:`.layoutplan`'s.

One entry per group of MIG GPUs (a single dict is one entry)::

    c.GPULab.mig_schedule = [{
        "gpus": "all",                      # or ["GPU-5d1c…", "GPU-8a2e…"]
        "class_layout": "7x1g.10gb",        # during class windows and booked sessions
        "research_layout": "2x3g.40gb",     # outside them
        "class_windows": [{"days": ["mon", "tue", "wed", "thu", "fri"],
                           "start": "08:00", "end": "18:00",
                           "from": "2026-09-07", "until": "2026-12-18"}],   # dates optional
        "follow_bookings": True,            # booked sessions of class slices count as class time
        "drain_lead": "30m",                # drain this long before each class window
    }]

Window times are wall-clock in the lab's time zone (``c.GPULab.quota_timezone``). The structure is
checked with a JSON schema (:data:`SCHEMA`), the values (layouts, times, durations) after it;
:func:`parse_schedule` raises :class:`~..errors.ConfigError` listing every problem, each naming
``mig_schedule[i].key`` and the accepted form.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, time, tzinfo
from typing import Any

from jsonschema import Draft202012Validator

from ..errors import ConfigError
from ..units import UnitError, parse_seconds
from .miglayout import LayoutError, format_layout, parse_layout

__all__ = ["DAYS", "SCHEMA", "LayoutSchedule", "ScheduleEntry", "Window", "parse_schedule"]

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
#: The compute slices of one A100/H100/H200 (7): a layout needing more cannot be laid.
GPU_COMPUTE_SLICES = 7

_WINDOW = {
    "type": "object",
    "additionalProperties": False,
    "required": ["days", "start", "end"],
    "properties": {
        "days": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "start": {"type": "string"},
        "end": {"type": "string"},
        "from": {"type": "string"},
        "until": {"type": "string"},
    },
}
#: The shape of one entry (``c.GPULab.mig_schedule`` is a list of these, or one of them).
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["class_layout", "research_layout"],
    "properties": {
        "gpus": {"type": ["string", "array"], "items": {"type": "string"}},
        "class_layout": {"type": "string"},
        "research_layout": {"type": "string"},
        "class_windows": {"type": "array", "items": _WINDOW},
        "follow_bookings": {"type": "boolean"},
        "drain_lead": {"type": ["string", "integer", "number"]},
    },
}
_VALIDATOR = Draft202012Validator(SCHEMA)


@dataclass(frozen=True)
class Window:
    """Weekly class time: ``days`` (``"mon"`` …) from ``start`` to ``end`` (lab-local wall clock),
    from ``first`` to ``last`` (dates, inclusive; ``None``: no bound)."""

    days: tuple[str, ...]
    start: time
    end: time
    first: date | None = None
    last: date | None = None

    def describe(self) -> str:
        span = f" ({self.first or '…'} to {self.last or '…'})" if self.first or self.last else ""
        return f"class window {','.join(self.days)} {self.start:%H:%M}–{self.end:%H:%M}{span}"


@dataclass(frozen=True)
class ScheduleEntry:
    """One group of GPUs and their two layouts. ``gpus``: GPU UUIDs, ``None`` for every MIG GPU
    no other entry names; layouts as lists of profile names (:func:`.miglayout.parse_layout`);
    ``drain_lead_s`` in seconds."""

    gpus: tuple[str, ...] | None
    class_layout: tuple[str, ...]
    research_layout: tuple[str, ...]
    windows: tuple[Window, ...] = ()
    follow_bookings: bool = True
    drain_lead_s: int = 1800

    @property
    def class_text(self) -> str:
        return format_layout(list(self.class_layout))

    @property
    def research_text(self) -> str:
        return format_layout(list(self.research_layout))


@dataclass(frozen=True)
class LayoutSchedule:
    """Every entry, and the time zone their windows are read in."""

    entries: tuple[ScheduleEntry, ...] = ()
    tz: Any = None

    def entry_for(self, uuid: str) -> ScheduleEntry | None:
        """The entry naming GPU ``uuid``, else the ``"all"`` entry, else ``None``."""
        named = next((e for e in self.entries if e.gpus and uuid in e.gpus), None)
        return named or next((e for e in self.entries if e.gpus is None), None)


def parse_schedule(raw: Any, tz: tzinfo, where: str = "c.GPULab.mig_schedule") -> LayoutSchedule:
    """``raw`` (a list of entries, one entry, or empty) as a :class:`LayoutSchedule`; raises
    :class:`ConfigError` listing every problem."""
    if not raw:
        return LayoutSchedule((), tz)
    items = [raw] if isinstance(raw, dict) else raw
    if not isinstance(items, list):
        raise ConfigError(f"{where} must be a list of dicts (or one dict), not {raw!r:.60}")
    errors: list[str] = []
    entries = []
    for i, item in enumerate(items):
        at = f"{where}[{i}]"
        found = sorted(_VALIDATOR.iter_errors(item), key=lambda e: list(map(str, e.path)))
        for e in found:
            path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.path)
            errors.append(f"{at}{path}: {e.message}; {_HINT}")
        if not found:
            entry = _entry(item, at, errors)
            if entry is not None:
                entries.append(entry)
    seen: dict[str, str] = {}
    for i, e in enumerate(entries):
        for uuid in e.gpus or ("all",):
            if uuid in seen:
                errors.append(
                    f"{where}[{i}]: GPU {uuid!r} is already in {seen[uuid]}; "
                    "each GPU (and 'all') may be in one entry only"
                )
            seen.setdefault(uuid, f"{where}[{i}]")
    if errors:
        raise ConfigError(errors)
    return LayoutSchedule(tuple(entries), tz)


_HINT = (
    "an entry is {'gpus': 'all' or ['GPU-…'], 'class_layout': '7x1g.10gb', "
    "'research_layout': '2x3g.40gb', 'class_windows': [{'days': ['mon'], 'start': '08:00', "
    "'end': '18:00'}], 'follow_bookings': True, 'drain_lead': '30m'}"
)


def _entry(item: dict, at: str, errors: list[str]) -> ScheduleEntry | None:
    n = len(errors)
    gpus = item.get("gpus", "all")
    if gpus == "all":
        uuids = None
    elif isinstance(gpus, list) and gpus and all(g.startswith("GPU-") for g in gpus):
        uuids = tuple(gpus)
    else:
        errors.append(f"{at}.gpus must be 'all' or a list of GPU UUIDs ('GPU-…'), not {gpus!r}")
        uuids = None
    layouts = [_layout(item[k], f"{at}.{k}", errors) for k in ("class_layout", "research_layout")]
    if all(layouts) and sorted(layouts[0]) == sorted(layouts[1]):
        errors.append(f"{at}: class_layout and research_layout are the same; nothing would change")
    windows = [_window(w, f"{at}.class_windows[{j}]", errors)
               for j, w in enumerate(item.get("class_windows", []))]  # fmt: skip
    try:
        lead = parse_seconds(item.get("drain_lead", 1800), f"{at}.drain_lead")
    except UnitError as e:
        errors.append(str(e))
        lead = 0
    if len(errors) > n:
        return None
    return ScheduleEntry(
        gpus=uuids,
        class_layout=tuple(layouts[0]),
        research_layout=tuple(layouts[1]),
        windows=tuple(windows),
        follow_bookings=item.get("follow_bookings", True),
        drain_lead_s=lead,
    )


def _layout(text: str, at: str, errors: list[str]) -> list[str] | None:
    try:
        layout = parse_layout(text)
    except LayoutError as e:
        errors.append(f"{at}: {e}")
        return None
    used = sum(int(p.split("g", 1)[0]) for p in layout)
    if used > GPU_COMPUTE_SLICES:
        errors.append(
            f"{at}: {format_layout(layout)} needs {used} compute slices; a MIG GPU has "
            f"{GPU_COMPUTE_SLICES} (e.g. 7x1g.10gb, 2x3g.40gb, 1x7g.80gb)"
        )
        return None
    return layout


def _window(raw: dict, at: str, errors: list[str]) -> Window | None:
    n = len(errors)
    days = [d.lower()[:3] for d in raw["days"]]
    if not all(d in DAYS for d in days):
        errors.append(f"{at}.days must list days such as ['mon', 'wed'], not {raw['days']!r}")
    start, end = (_parse(time, raw[k], f"{at}.{k}", "a time such as '08:00'", errors)
                  for k in ("start", "end"))  # fmt: skip
    first, last = (
        _parse(date, raw[k], f"{at}.{k}", "a date such as '2026-09-07'", errors)
        if k in raw else None
        for k in ("from", "until")
    )  # fmt: skip
    if len(errors) > n:
        return None
    if end <= start:
        errors.append(f"{at}: end {end:%H:%M} must be after start {start:%H:%M}")
    if first and last and last < first:
        errors.append(f"{at}: 'until' {last} is before 'from' {first}")
    if len(errors) > n:
        return None
    return Window(tuple(d for d in DAYS if d in days), start, end, first, last)


def _parse(kind, value: str, at: str, form: str, errors: list[str]):
    try:
        return kind.fromisoformat(value)
    except ValueError:
        errors.append(f"{at} must be {form}, not {value!r}")
        return None

"""Parse the sizes and durations that admins write in configuration.

Pure functions, no I/O. Every parser accepts an ``int`` (already in base units) or a string, and
raises :class:`UnitError` (a ``ValueError``) with the accepted forms when it cannot parse.
"""

from __future__ import annotations

import math
import re

__all__ = [
    "UnitError",
    "parse_bytes",
    "parse_seconds",
    "format_bytes",
    "format_seconds",
    "plural",
    "counted",
]


class UnitError(ValueError):
    """A size or duration that cannot be parsed; the message lists the accepted forms."""


# Binary (IEC) and decimal (SI) suffixes. "G"/"GB" follow Docker's and NVIDIA's usage
# (a "1 GB" vGPU profile and docker's ``mem_limit="1g"`` are both 2**30 bytes), so the short
# and "B" forms are binary; write "1e9" or an int for exact decimal bytes.
_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "k": 2**10,
    "kb": 2**10,
    "kib": 2**10,
    "m": 2**20,
    "mb": 2**20,
    "mib": 2**20,
    "g": 2**30,
    "gb": 2**30,
    "gib": 2**30,
    "t": 2**40,
    "tb": 2**40,
    "tib": 2**40,
}

_SECOND_UNITS = {
    "": 1,
    "s": 1,
    "sec": 1,
    "secs": 1,
    "second": 1,
    "seconds": 1,
    "m": 60,
    "min": 60,
    "mins": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hr": 3600,
    "hrs": 3600,
    "hour": 3600,
    "hours": 3600,
    "d": 86400,
    "day": 86400,
    "days": 86400,
    "w": 604800,
    "week": 604800,
    "weeks": 604800,
}

_NUMBER_UNIT = re.compile(r"^\s*(\d+(?:\.\d+)?(?:[eE]\d+)?)\s*([A-Za-z]*)\s*$")

BYTES_FORMS = "an integer number of bytes, or a number with a unit: '512M', '10GiB', '1.5 GB', '1T'"
SECONDS_FORMS = (
    "an integer number of seconds, or a number with a unit: '90s', '30m', '2h', '1.5d', '1w'"
)


def _parse(value: object, units: dict[str, int], what: str, forms: str) -> int:
    if isinstance(value, bool):
        raise UnitError(f"{what} {value!r} is not a size; write {forms}")
    if isinstance(value, int):
        if value < 0:
            raise UnitError(f"{what} {value!r} is negative; write {forms}")
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or value < 0:
            raise UnitError(f"{what} {value!r} is not a finite, non-negative number; write {forms}")
        return int(value)
    if not isinstance(value, str):
        raise UnitError(f"{what} {value!r} has type {type(value).__name__}; write {forms}")
    m = _NUMBER_UNIT.match(value)
    if not m:
        raise UnitError(f"{what} {value!r} cannot be parsed; write {forms}")
    number, unit = m.groups()
    factor = units.get(unit.lower())
    if factor is None:
        raise UnitError(f"{what} {value!r} has an unknown unit {unit!r}; write {forms}")
    result = float(number) * factor
    if not math.isfinite(result):
        raise UnitError(f"{what} {value!r} is too large; write {forms}")
    return int(round(result))


def parse_bytes(value: object, what: str = "size") -> int:
    """Return ``value`` in bytes.

    Accepts an ``int`` (bytes) or a string such as ``"512M"``, ``"10GiB"``, ``"1.5 GB"``.
    K/M/G/T with or without ``B``/``iB`` are binary multiples (2**10 …), as in Docker's ``mem_limit``
    and NVIDIA's profile names. Raises :class:`UnitError` naming ``what`` otherwise.
    """
    return _parse(value, _BYTE_UNITS, what, BYTES_FORMS)


def parse_seconds(value: object, what: str = "duration") -> int:
    """Return ``value`` in whole seconds.

    Accepts an ``int`` (seconds) or a string such as ``"90s"``, ``"30m"``, ``"2h"``, ``"1d"``, ``"1w"``.
    Raises :class:`UnitError` naming ``what`` otherwise.
    """
    return _parse(value, _SECOND_UNITS, what, SECONDS_FORMS)


def format_bytes(n: int) -> str:
    """Human form of a byte count with binary units: ``format_bytes(10 * 2**30) == '10 GiB'``."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= factor:
            value = n / factor
            return (
                f"{value:.0f} {unit}"
                if value == int(value) or value >= 100
                else f"{value:.1f} {unit}"
            )
    return f"{n} B"


def format_seconds(s: float) -> str:
    """Human form of a duration: ``format_seconds(5400) == '1h 30m'``."""
    s = int(s)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h}h {m}m" if m else f"{h}h"
    d, h = divmod(s // 3600, 24)
    return f"{d}d {h}h" if h else f"{d}d"


def format_gpu_hours(hours: float, *, limit: bool = False) -> str:
    """GPU-hours as a person reads them, never rounded to a false zero. Used hours: one
    decimal from 1 (``"4.5"``, ``"10.0"``), two significant digits below (``"0.25"``,
    ``"0.0042"``, where ``.1f`` said ``"0.0"``). A configured ``limit``: as written, up to three
    decimals (``"10"``, ``"0.25"``, ``"0.01"``). ``"0"`` for nothing."""
    h = float(hours)
    if h == 0:
        return "0"
    if limit and abs(h) >= 0.001:
        return f"{h:.3f}".rstrip("0").rstrip(".")
    if not limit and abs(h) >= 1:
        return f"{h:.1f}"
    decimals = 1 - math.floor(math.log10(abs(h)))
    return f"{h:.{decimals}f}".rstrip("0").rstrip(".")


def plural(n: float, noun: str, many: str | None = None) -> str:
    """``noun`` in the number that ``n`` calls for: ``plural(1, "slice") == "slice"``,
    ``plural(2, "slice") == "slices"``, ``plural(0, "is", "are") == "are"``. The noun follows
    the count it stands next to: "1 of at most 2 GPU slices" (the limit), "1 GPU slice"."""
    return noun if n == 1 else (many if many is not None else noun + "s")


def counted(n: float, noun: str, many: str | None = None) -> str:
    """``n`` and its noun: ``counted(1, "server") == "1 server"``, ``counted(3, "server") ==
    "3 servers"`` (``n`` shown with ``:g``)."""
    return f"{n:g} {plural(n, noun, many)}"

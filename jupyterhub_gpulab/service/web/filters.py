"""Jinja filters of the gpulab pages: times, sizes and live figures as HTML fragments.

Filters rather than macros: the admin page calls them thousands of times per render."""

from __future__ import annotations

from markupsafe import Markup

from ...units import counted, format_bytes, format_seconds, plural

DASH = Markup('<span class="text-body-secondary">–</span>')


def when(iso: str | None) -> Markup:
    """``<time>`` for an ISO 8601 UTC time (``2026-03-02 12:00:00 UTC``)."""
    if not iso:
        return DASH
    shown = iso[:19].replace("T", " ")
    return Markup('<time datetime="{}">{} UTC</time>').format(iso, shown)


def util(
    gpu_percent: float | None, memory_used: int | None, memory_total: int | None = None
) -> Markup:
    """``40% · 2 GiB of 48 GiB``; a dash when NVML gave nothing."""
    parts = []
    if gpu_percent is not None:
        parts.append(Markup('<span class="gpu-util">{}%</span>').format(f"{gpu_percent:.0f}"))
    if memory_used is not None:
        of = f" of {format_bytes(memory_total)}" if memory_total else ""
        parts.append(
            Markup('<span class="mem-used">{}{}</span>').format(format_bytes(memory_used), of)
        )
    return Markup(" · ").join(parts) if parts else DASH


def size(n: int | None) -> str:
    return format_bytes(n) if n is not None else "–"


def duration(seconds: float | None) -> str:
    return format_seconds(seconds) if seconds is not None else "–"


#: ``{{ n|counted("server") }}`` is "1 server" / "2 servers"; ``{{ "slice"|plural(n) }}`` the noun
#: alone in ``n``'s number.
FILTERS = {
    "when": when,
    "util": util,
    "bytes": size,
    "duration": duration,
    "counted": counted,
    "plural": lambda noun, n, many=None: plural(n, noun, many),
}

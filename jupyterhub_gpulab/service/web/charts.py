"""Server-rendered SVG charts for the service's pages: no JavaScript, no network at view time.

Pure builders: data in, :class:`markupsafe.Markup` out (every text escaped). Readable without
colour: each line has its own dash pattern and end marker and is labelled at its end; each bar
has its own fill pattern and carries its value and name as text. Each chart is an ``<svg
role="img">`` with a ``<title>``; pages put the same figures in a table next to it. Elements carry
their figures in ``data-*`` attributes (``data-label``, ``data-value``, ``data-last``, a line's
``data-values``: its points' y in order, empty where unknown) so a test reads what is plotted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

#: Dash patterns (``stroke-dasharray``) and end markers, one per line, in order.
DASHES = ("", "8 4", "2 3", "10 3 2 3", "4 4", "1 6")
MARKERS = ("circle", "square", "triangle", "diamond")
#: Fill patterns, one per bar series, in order (defined in :func:`_patterns`).
FILLS = ("solid", "hatch", "dots", "cross", "vertical", "horizontal")


@dataclass(frozen=True)
class Series:
    """One line: ``label`` and ``points`` ``(x, y)``, ``x`` in any increasing unit (seconds),
    ``y`` ``None`` where nothing is known (the line breaks there)."""

    label: str
    points: tuple[tuple[float, float | None], ...]

    @property
    def last(self) -> float | None:
        """The latest known ``y``."""
        return next((y for _, y in reversed(self.points) if y is not None), None)


def _fmt(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".") if v != int(v) else str(int(v))


def _label(v: float) -> str:
    """A bar's or axis's figure: one decimal, two below 1 so a small non-zero value (a few
    minutes of GPU time) never reads as 0."""
    if 0 < abs(v) < 1:
        return f"{v:.2f}".rstrip("0").rstrip(".") if round(v, 2) else f"{v:.1g}"
    return _fmt(round(v, 1))


def _marker(kind: str, x: float, y: float) -> str:
    if kind == "circle":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5"/>'
    if kind == "square":
        return f'<rect x="{x - 3.5:.1f}" y="{y - 3.5:.1f}" width="7" height="7"/>'
    if kind == "triangle":
        return f'<path d="M{x:.1f} {y - 4.5:.1f} L{x + 4.5:.1f} {y + 3.5:.1f} L{x - 4.5:.1f} {y + 3.5:.1f} Z"/>'
    return f'<path d="M{x:.1f} {y - 4.5:.1f} L{x + 4.5:.1f} {y:.1f} L{x:.1f} {y + 4.5:.1f} L{x - 4.5:.1f} {y:.1f} Z"/>'


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_range: tuple[float, float],
    x_labels: tuple[str, str],
    y_max: float = 100.0,
    unit: str = "%",
    width: int = 640,
    height: int = 190,
) -> Markup:
    """Lines over ``x_range`` (``x_labels``: the texts under its two ends), ``0 … y_max``."""
    left, right, top, bottom = 44, 150, 10, 26
    pw, ph = width - left - right, height - top - bottom
    x0, x1 = x_range
    span = (x1 - x0) or 1.0

    def px(x: float) -> float:
        return left + pw * min(max((x - x0) / span, 0.0), 1.0)

    def py(y: float) -> float:
        return top + ph * (1 - min(max(y / y_max, 0.0), 1.0))

    out = [
        f'<svg class="gpulab-chart line-chart" role="img" viewBox="0 0 {width} {height}" '
        f'width="100%" style="max-width:{width}px" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        '<g class="axes" stroke="currentColor" stroke-opacity="0.25" font-size="11" fill="currentColor">',
    ]
    for frac in (0.0, 0.5, 1.0):
        y = py(y_max * frac)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(
            f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" stroke="none">'
            f"{_fmt(y_max * frac)} {escape(unit)}</text>"
        )
    out.append(
        f'<text x="{left}" y="{height - 8}" stroke="none">{escape(x_labels[0])}</text>'
        f'<text x="{left + pw}" y="{height - 8}" text-anchor="end" stroke="none">'
        f"{escape(x_labels[1])}</text></g>"
    )
    label_ys: list[float] = []
    for i, s in enumerate(series):
        dash, marker = DASHES[i % len(DASHES)], MARKERS[i % len(MARKERS)]
        last = s.last
        values = " ".join("" if y is None else _fmt(y) for _, y in s.points)
        attrs = (
            f'data-label="{escape(s.label)}" data-last="{"" if last is None else last}" '
            f'data-values="{values}"'
        )
        out.append(f'<g class="series" {attrs} fill="currentColor">')
        segment: list[str] = []
        segments: list[list[str]] = []
        for x, y in s.points:
            if y is None:
                if segment:
                    segments.append(segment)
                segment = []
            else:
                segment.append(f"{px(x):.1f},{py(y):.1f}")
        if segment:
            segments.append(segment)
        for seg in segments:
            dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
            out.append(
                f'<polyline fill="none" stroke="currentColor" stroke-width="2"{dash_attr} '
                f'points="{" ".join(seg)}"/>'
            )
        known = [(x, y) for x, y in s.points if y is not None]
        if known:
            lx, ly = px(known[-1][0]), py(known[-1][1])
            out.append(_marker(marker, lx, ly))
            ty = ly + 4
            while any(abs(ty - other) < 12 for other in label_ys):
                ty += 12
            label_ys.append(ty)
            out.append(
                f'<text x="{left + pw + 8}" y="{ty:.1f}" font-size="11">'
                f"{escape(s.label)}: {_fmt(known[-1][1])} {escape(unit)}</text>"
            )
        out.append("</g>")
    if not series or all(s.last is None for s in series):
        out.append(
            f'<text x="{left + pw / 2}" y="{top + ph / 2}" text-anchor="middle" font-size="12" '
            f'fill="currentColor">no samples</text>'
        )
    out.append("</svg>")
    return Markup("".join(out))


def _patterns(prefix: str) -> str:
    p = escape(prefix)
    return (
        "<defs>"
        f'<pattern id="{p}-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="none"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="currentColor" stroke-width="3"/></pattern>'
        f'<pattern id="{p}-dots" width="5" height="5" patternUnits="userSpaceOnUse">'
        '<circle cx="2.5" cy="2.5" r="1.5" fill="currentColor"/></pattern>'
        f'<pattern id="{p}-cross" width="6" height="6" patternUnits="userSpaceOnUse">'
        '<path d="M0 0L6 6M6 0L0 6" stroke="currentColor" stroke-width="1"/></pattern>'
        f'<pattern id="{p}-vertical" width="4" height="4" patternUnits="userSpaceOnUse">'
        '<line x1="1" y1="0" x2="1" y2="4" stroke="currentColor" stroke-width="2"/></pattern>'
        f'<pattern id="{p}-horizontal" width="4" height="4" patternUnits="userSpaceOnUse">'
        '<line x1="0" y1="1" x2="4" y2="1" stroke="currentColor" stroke-width="2"/></pattern>'
        "</defs>"
    )


def bar_chart(
    categories: Sequence[str],
    groups: Sequence[str],
    values: dict[tuple[str, str], float],
    *,
    title: str,
    unit: str = "h",
    chart_id: str = "bars",
    limit: float | None = None,
    width: int = 640,
    height: int = 220,
) -> Markup:
    """Grouped bars: for each of ``categories`` (x, e.g. weeks) one bar per of ``groups``
    (``values[(category, group)]``, missing = 0), each with its own fill pattern, its value above
    and its group below. ``limit`` draws a labelled horizontal line (a budget)."""
    left, right, top, bottom = 44, 10, 16, 46
    pw, ph = width - left - right, height - top - bottom
    top_value = max([*values.values(), limit or 0.0, 0.0])
    y_max = top_value * 1.15 if top_value > 0 else 1.0

    def py(v: float) -> float:
        return top + ph * (1 - v / y_max)

    out = [
        f'<svg class="gpulab-chart bar-chart" role="img" viewBox="0 0 {width} {height}" '
        f'width="100%" style="max-width:{width}px" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        _patterns(chart_id),
        f'<g stroke="currentColor" stroke-opacity="0.25" font-size="11" fill="currentColor">'
        f'<line x1="{left}" x2="{left + pw}" y1="{py(0):.1f}" y2="{py(0):.1f}"/>'
        f'<text x="{left - 4}" y="{py(0) + 4:.1f}" text-anchor="end" stroke="none">0 {escape(unit)}</text>'
        f'<text x="{left - 4}" y="{py(y_max / 1.15) + 4:.1f}" text-anchor="end" stroke="none">'
        f"{_label(y_max / 1.15)} {escape(unit)}</text></g>",
    ]
    n_cat = max(len(categories), 1)
    slot = pw / n_cat
    bar_w = max(min((slot - 12) / max(len(groups), 1), 48), 4)
    for ci, cat in enumerate(categories):
        x_cat = left + ci * slot + (slot - bar_w * len(groups)) / 2
        for gi, group in enumerate(groups):
            v = values.get((cat, group), 0.0)
            fill = FILLS[gi % len(FILLS)]
            paint = "currentColor" if fill == "solid" else f"url(#{escape(chart_id)}-{fill})"
            x = x_cat + gi * bar_w
            y = py(v)
            out.append(
                f'<g class="bar" data-category="{escape(cat)}" data-label="{escape(group)}" '
                f'data-value="{v}" fill="currentColor">'
                f'<rect x="{x + 1:.1f}" y="{y:.1f}" width="{bar_w - 2:.1f}" '
                f'height="{py(0) - y:.1f}" fill="{paint}" stroke="currentColor"/>'
                f'<text x="{x + bar_w / 2:.1f}" y="{y - 3:.1f}" text-anchor="middle" '
                f'font-size="10">{_label(v)}</text>'
                f'<text x="{x + bar_w / 2:.1f}" y="{py(0) + 12:.1f}" text-anchor="middle" '
                f'font-size="9">{escape(group[:10])}</text></g>'
            )
        out.append(
            f'<text x="{left + ci * slot + slot / 2:.1f}" y="{height - 8}" text-anchor="middle" '
            f'font-size="11" fill="currentColor">{escape(cat)}</text>'
        )
    if limit is not None:
        out.append(
            f'<g class="limit" data-value="{limit}" stroke="currentColor" fill="currentColor">'
            f'<line x1="{left}" x2="{left + pw}" y1="{py(limit):.1f}" y2="{py(limit):.1f}" '
            f'stroke-dasharray="6 3" stroke-width="2"/>'
            f'<text x="{left + pw}" y="{py(limit) - 4:.1f}" text-anchor="end" font-size="11" '
            f'stroke="none">budget {_fmt(limit)} {escape(unit)}</text></g>'
        )
    out.append("</svg>")
    return Markup("".join(out))

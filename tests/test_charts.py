"""The pages' SVG charts: readable without colour, escaped, carrying the plotted figures."""

from __future__ import annotations

import re

from jupyterhub_gpulab.service.web.charts import Series, bar_chart, line_chart


def test_lines_differ_by_dash_and_marker_and_carry_their_latest_value():
    svg = str(
        line_chart(
            [Series("seat 1", ((0, 10.0), (50, None), (100, 30.0))), Series("seat 2", ((0, 5.0),))],
            title="GPU 1",
            x_range=(0, 100),
            x_labels=("10:00", "14:00 (now)"),
        )
    )
    assert svg.startswith("<svg") and 'role="img"' in svg and "<title>GPU 1</title>" in svg
    groups = re.findall(r'<g class="series" data-label="([^"]*)" data-last="([^"]*)"', svg)
    assert groups == [("seat 1", "30.0"), ("seat 2", "5.0")]
    # the unknown sample breaks the first line into two segments
    first = svg.split('data-label="seat 2"')[0]
    assert first.count("<polyline") == 2
    # no two lines look alike in black and white: one solid, one dashed
    dashes = [
        re.search(r'stroke-dasharray="([^"]*)"', p) for p in re.findall("<polyline[^>]*>", svg)
    ]
    assert dashes[0] is None and dashes[2].group(1) == "8 4"
    assert "seat 1: 30 %" in svg and "seat 2: 5 %" in svg


def test_text_is_escaped():
    svg = str(bar_chart(["w<1>"], ["<script>"], {("w<1>", "<script>"): 2.0}, title="a & b"))
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "a &amp; b" in svg


def test_bars_carry_value_name_and_pattern_and_the_limit_line():
    svg = str(
        bar_chart(
            ["2026-11-23", "2026-11-30"],
            ["researchers", "students"],
            {("2026-11-23", "students"): 3.0, ("2026-11-30", "researchers"): 1.25},
            title="per week",
            limit=10,
        )
    )
    bars = re.findall(r'data-category="([^"]*)" data-label="([^"]*)" data-value="([^"]*)"', svg)
    assert bars == [
        ("2026-11-23", "researchers", "0.0"),
        ("2026-11-23", "students", "3.0"),
        ("2026-11-30", "researchers", "1.25"),
        ("2026-11-30", "students", "0.0"),
    ]
    assert 'fill="url(#bars-hatch)"' in svg  # the second group is hatched, not only coloured
    assert 'class="limit" data-value="10"' in svg and "budget 10 h" in svg


def test_small_figures_never_read_as_zero():
    svg = str(bar_chart(["this week"], ["students"], {("this week", "students"): 0.0267},
                        title="t"))  # fmt: skip
    texts = re.findall(r">([^<>]+)</text>", svg)
    assert "0.03" in texts and "0.03 h" in texts  # the bar and the axis's top
    assert "0" not in texts

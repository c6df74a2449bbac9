"""Sizes and durations as admins write them: properties of ``parse_bytes`` / ``parse_seconds``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jupyterhub_gpulab.units import (
    UnitError,
    format_bytes,
    parse_bytes,
    parse_seconds,
)

BYTE_UNITS = {
    "": 1, "B": 1,
    "K": 2**10, "KB": 2**10, "KiB": 2**10,
    "M": 2**20, "MB": 2**20, "MiB": 2**20,
    "G": 2**30, "GB": 2**30, "GiB": 2**30,
    "T": 2**40, "TB": 2**40, "TiB": 2**40,
}  # fmt: skip
SECOND_UNITS = {
    "": 1, "s": 1, "sec": 1, "seconds": 1,
    "m": 60, "min": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 604800, "week": 604800, "weeks": 604800,
}  # fmt: skip

spaces = st.sampled_from(["", " ", "  "])


def cased(unit: str) -> st.SearchStrategy[str]:
    return st.sampled_from([unit, unit.lower(), unit.upper()])


@given(st.integers(min_value=0, max_value=2**62))
def test_an_int_is_already_bytes_and_seconds(n):
    assert parse_bytes(n) == n
    assert parse_seconds(n) == n


@given(st.integers(min_value=0, max_value=2**53))
def test_a_plain_number_string_is_bytes(n):
    assert parse_bytes(str(n)) == n


@given(
    st.integers(min_value=0, max_value=10**6),
    st.sampled_from(sorted(BYTE_UNITS)).flatmap(lambda u: st.tuples(st.just(u), cased(u))),
    spaces,
    spaces,
)
def test_number_with_a_byte_unit_round_trips(n, unit, gap, pad):
    canonical, written = unit
    assert parse_bytes(f"{pad}{n}{gap}{written}{pad}") == n * BYTE_UNITS[canonical]


@given(
    st.integers(min_value=0, max_value=10**9),
    st.sampled_from(sorted(SECOND_UNITS)).flatmap(lambda u: st.tuples(st.just(u), cased(u))),
    spaces,
)
def test_number_with_a_time_unit_round_trips(n, unit, gap):
    canonical, written = unit
    assert parse_seconds(f"{n}{gap}{written}") == n * SECOND_UNITS[canonical]


@given(st.integers(min_value=1, max_value=1023), st.sampled_from(["KiB", "MiB", "GiB", "TiB"]))
def test_format_bytes_of_a_whole_unit_parses_back_exactly(k, unit):
    n = k * BYTE_UNITS[unit]
    assert format_bytes(n) == f"{k} {unit}"
    assert parse_bytes(format_bytes(n)) == n


@given(st.integers(min_value=0, max_value=2**50))
def test_format_bytes_parses_back_within_its_rounding(n):
    # one decimal below 100 units, none above: at most 5 % off, exact below 1 KiB
    back = parse_bytes(format_bytes(n))
    assert abs(back - n) <= 0.05 * n
    if n < 1024:
        assert back == n


@pytest.mark.parametrize(
    ("written", "expected"),
    [("1.5 GB", 3 * 2**29), ("0.5GiB", 2**29), ("1e9", 10**9), ("512M", 512 * 2**20)],
)
def test_decimal_sizes(written, expected):
    assert parse_bytes(written) == expected


@pytest.mark.parametrize(("written", "expected"), [("1.5h", 5400), ("90s", 90), ("2 days", 172800)])
def test_decimal_durations(written, expected):
    assert parse_seconds(written) == expected


@given(st.one_of(st.text(max_size=20), st.none(), st.booleans(), st.lists(st.integers())))
def test_anything_either_parses_or_says_which_forms_are_accepted(value):
    for parse, forms in ((parse_bytes, "'10GiB'"), (parse_seconds, "'30m'")):
        try:
            result = parse(value, what="limit")
        except UnitError as exc:
            assert "limit" in str(exc)
            assert forms in str(exc)
        else:
            assert isinstance(result, int) and result >= 0


@pytest.mark.parametrize("bad", [-1, "-1G", "ten GB", "10 gigs", True, None, [10], "1e999"])
def test_bad_values_raise_a_value_error_naming_the_setting(bad):
    with pytest.raises(ValueError, match="mem_limit"):
        parse_bytes(bad, what="mem_limit")


def test_one_naive_datetime_rule_reads_naive_as_utc_and_converts_aware_to_utc():
    # The ledger's and the views' copies left a non-UTC aware time as it was (the API then wrote
    # "+01:00" where it writes "Z" for everything else); the cull plan's converted it.
    from datetime import datetime, timedelta, timezone

    from jupyterhub_gpulab.clock import as_utc
    from jupyterhub_gpulab.hubapi.servers import hub_time
    from jupyterhub_gpulab.service.web.views import iso

    berlin = datetime(2026, 3, 2, 13, 0, tzinfo=timezone(timedelta(hours=1)))
    naive = datetime(2026, 3, 2, 12, 0)
    assert as_utc(None) is None
    assert as_utc(naive) == as_utc(berlin) == datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)
    assert as_utc(berlin).utcoffset() == timedelta(0)
    assert iso(berlin) == iso(naive) == "2026-03-02T12:00:00Z"
    assert hub_time("2026-03-02T13:00:00+01:00") == as_utc(naive)


# -- counted nouns: the noun follows the number it stands next to ------------------------------


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0 slices"), (1, "1 slice"), (2, "2 slices"), (1.5, "1.5 slices")],
)
def test_a_counted_noun_takes_the_plural_except_for_one(n, text):
    from jupyterhub_gpulab.units import counted

    assert counted(n, "slice") == text


def test_an_irregular_plural_is_given():
    from jupyterhub_gpulab.units import plural

    assert (plural(1, "holds", "hold"), plural(3, "holds", "hold")) == ("holds", "hold")


@pytest.mark.parametrize(
    ("held", "limit", "text"),
    [
        (1, 2, "You hold 1 of the 2 GPU slices your groups allow at once."),
        (0, 1, "You hold 0 of the 1 GPU slice your groups allow at once."),
        (1, None, "You hold 1 GPU slice."),
        (2, None, "You hold 2 GPU slices."),
    ],
)
def test_the_spawn_forms_use_of_the_limit_counts_the_noun_next_to_it(held, limit, text):
    from jupyterhub_gpulab.spawner.form import usage_note

    assert usage_note(held, limit) == text


def test_a_stop_all_of_one_idle_server_says_it_was_not_running():
    from datetime import datetime, timezone

    from jupyterhub_gpulab.courses.parse import parse_course
    from jupyterhub_gpulab.courses.prestart import PrestartRun

    course = parse_course({"slug": "dl", "title": "DL", "roster_group": "dl", "staff_group": "s"})
    run = PrestartRun(course, ["ann", "bob"], started_at=datetime.now(timezone.utc))
    run.servers["ann"].state, run.servers["bob"].state = "stopped", "not-running"
    assert run.summary() == "1 stopped, 1 was not running"

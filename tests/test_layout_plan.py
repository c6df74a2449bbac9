"""The MIG layout schedule (issue 22, lever 3a): what an admin writes (``c.GPULab.mig_schedule``)
and the pure decisions on it (:mod:`jupyterhub_gpulab.inventory.layoutplan`): which layout a GPU
should have at a time, when it next changes, whether a re-lay is due, and which booked sessions a
schedule would leave without their slices."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from jupyterhub_gpulab.errors import ConfigError
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.inventory.layoutplan import conflicts, decide, layout_spans, same_layout
from jupyterhub_gpulab.inventory.layoutschedule import parse_schedule
from jupyterhub_gpulab.ledger import Booking

pytestmark = pytest.mark.unit

BERLIN = ZoneInfo("Europe/Berlin")
GPU = "GPU-aaaa"
CLASS, RESEARCH = "7x1g.10gb", "2x3g.40gb"
WEEKDAYS = {"days": ["mon", "tue", "wed", "thu", "fri"], "start": "08:00", "end": "18:00"}


def schedule(**over):
    entry = {"gpus": "all", "class_layout": CLASS, "research_layout": RESEARCH,
             "class_windows": [WEEKDAYS], "drain_lead": "30m", **over}  # fmt: skip
    return parse_schedule(entry, BERLIN)


def local(day: int, hh: int, mm: int = 0) -> datetime:
    """December 2026 in Berlin (Mon 7th … Sun 13th), as aware UTC."""
    return datetime(2026, 12, day, hh, mm, tzinfo=BERLIN).astimezone(timezone.utc)


def booking(profile: str, start: datetime, hours: float = 2, lead_min: int = 15, bid: int = 1):
    return Booking(
        id=bid, holder=f"course{bid}", ref=None, groups=("ml101",), profile="p",
        request=SliceRequest(kind=SliceKind.MIG, mig_profile=profile), count=4,
        starts_at=start, ends_at=start + timedelta(hours=hours), lead_s=lead_min * 60, grace_s=0,
    )  # fmt: skip


# -- the schedule an admin writes --------------------------------------------------------------


def test_a_written_schedule_reads_into_layouts_windows_and_seconds():
    s = schedule(gpus=[GPU])
    (e,) = s.entries
    assert e.gpus == (GPU,) and e.drain_lead_s == 1800 and e.follow_bookings
    assert e.class_text == CLASS and e.research_text == RESEARCH
    assert e.windows[0].days == ("mon", "tue", "wed", "thu", "fri")
    assert s.entry_for(GPU) is e and s.entry_for("GPU-other") is None


@pytest.mark.parametrize(
    "over, says",
    [
        ({"class_layout": "7x1g.10gbx"}, "mig_schedule[0].class_layout: '7x1g.10gbx' is not a MIG"),
        ({"research_layout": "3x3g.40gb"}, "needs 9 compute slices; a MIG GPU has 7"),
        ({"research_layout": CLASS}, "class_layout and research_layout are the same"),
        ({"drain_lead": "soon"}, "mig_schedule[0].drain_lead 'soon' cannot be parsed"),
        ({"gpus": ["0"]}, "gpus must be 'all' or a list of GPU UUIDs"),
        ({"layout": "x"}, "Additional properties are not allowed ('layout' was unexpected)"),
        ({"class_windows": [{**WEEKDAYS, "start": "8h"}]}, "class_windows[0].start must be a time"),
        ({"class_windows": [{**WEEKDAYS, "days": ["mo", "xx"]}]}, "must list days such as"),
        ({"class_windows": [{**WEEKDAYS, "end": "07:00"}]}, "end 07:00 must be after start 08:00"),
        ({"follow_bookings": "yes"}, "follow_bookings: 'yes' is not of type 'boolean'"),
    ],
    ids=["layout", "too-big", "same", "lead", "gpus", "unknown-key", "time", "days", "end", "bool"],
)
def test_a_bad_schedule_is_refused_naming_the_key_and_the_form(over, says):
    with pytest.raises(ConfigError) as e:
        schedule(**over)
    assert says in str(e.value), str(e.value)


def test_a_gpu_may_be_in_one_entry_only_and_a_named_gpu_beats_all():
    two = {"class_layout": CLASS, "research_layout": RESEARCH}
    with pytest.raises(ConfigError, match="GPU 'GPU-aaaa' is already in"):
        parse_schedule([{**two, "gpus": [GPU]}, {**two, "gpus": [GPU]}], BERLIN)
    s = parse_schedule([{**two}, {**two, "gpus": [GPU], "research_layout": "1x7g.80gb"}], BERLIN)
    assert s.entry_for(GPU).research_text == "1x7g.80gb"
    assert s.entry_for("GPU-bbbb").research_text == RESEARCH


# -- which layout, when ------------------------------------------------------------------------


def test_before_the_drain_lead_a_gpu_keeps_research_and_knows_when_it_changes():
    d = decide(schedule(), GPU, local(7, 7, 0), current=RESEARCH, holders=1)
    assert (d.phase, d.target, d.drain, d.relay_due) == ("research", RESEARCH, False, False)
    assert d.next_layout == CLASS and d.next_change_at == local(7, 7, 30)
    assert "30 min before class window" in d.next_why


def test_in_the_drain_lead_a_held_gpu_is_drained_and_its_holders_have_until_class_starts():
    d = decide(schedule(), GPU, local(7, 7, 40), current=RESEARCH, holders=2)
    assert (d.target, d.drain, d.relay_due) == (CLASS, True, False)
    assert d.holders_by == local(7, 8, 0)
    free = decide(schedule(), GPU, local(7, 7, 40), current=RESEARCH, holders=0)
    assert free.relay_due and free.holders_by is None


def test_in_class_the_class_layout_stays_until_the_window_ends():
    d = decide(schedule(), GPU, local(7, 12), current="7x1g.10gb", holders=5)
    assert (d.phase, d.drain, d.relay_due) == ("class", False, False)
    assert (d.next_layout, d.next_change_at) == (RESEARCH, local(7, 18))


def test_after_class_students_get_the_drain_lead_to_finish_before_research_takes_the_gpu():
    d = decide(schedule(), GPU, local(7, 18, 10), current=CLASS, holders=3)
    assert (d.target, d.drain, d.relay_due) == (RESEARCH, True, False)
    assert d.holders_by == local(7, 18, 30)
    assert decide(schedule(), GPU, local(7, 18, 10), current=CLASS, holders=0).relay_due


def test_over_the_weekend_the_next_change_is_monday_morning_in_local_time():
    d = decide(schedule(), GPU, local(12, 12), current=RESEARCH)
    assert d.next_change_at == local(14, 7, 30) and d.next_layout == CLASS
    # wall clock: the window is 08:00 in Berlin in winter and in summer alike
    summer = datetime(2026, 7, 6, 7, 29, tzinfo=BERLIN).astimezone(timezone.utc)
    assert decide(schedule(), GPU, summer, current=RESEARCH).next_change_at == summer + timedelta(
        minutes=1
    )


def test_an_unknown_or_empty_current_layout():
    assert not decide(schedule(), GPU, local(7, 12), current=None).relay_due  # unknown: leave it
    assert decide(schedule(), GPU, local(7, 12), current=[]).relay_due  # no instances: lay it
    assert same_layout("1x3g.40gb,1x3g.40gb", ["3g.40gb", "3g.40gb"])
    assert not same_layout(None, RESEARCH) and not same_layout("bogus", RESEARCH)


def test_a_booked_session_of_class_slices_brings_the_class_layout_with_its_own_lead():
    sat = booking("1g.10gb", local(12, 10), lead_min=15)
    before = decide(schedule(), GPU, local(12, 9, 0), current=RESEARCH, bookings=[sat])
    assert before.phase == "research" and before.next_change_at == local(12, 9, 15)
    d = decide(schedule(), GPU, local(12, 9, 20), current=RESEARCH, holders=1, bookings=[sat])
    assert d.phase == "class" and "booking course1" in d.why
    assert d.holders_by == local(12, 9, 45)  # the seats' lead begins then
    assert d.next_change_at == local(12, 12)
    research_only = booking("3g.40gb", local(12, 10))
    assert decide(schedule(), GPU, local(12, 10), bookings=[research_only]).phase == "research"
    off = schedule(follow_bookings=False)
    assert decide(off, GPU, local(12, 10), current=RESEARCH, bookings=[sat]).phase == "research"


# -- conflicts with booked sessions ------------------------------------------------------------


def test_a_class_session_in_research_time_conflicts_when_bookings_are_not_followed():
    sat = booking("1g.10gb", local(12, 10))
    now = local(7, 6)
    assert conflicts(schedule(), [sat], now) == []  # followed: the schedule makes room
    (msg,) = conflicts(schedule(follow_bookings=False), [sat], now)
    assert "booked session course1" in msg and "research layout 2x3g.40gb" in msg
    assert "needs 1g.10gb" in msg and "mig_schedule[0]" in msg
    weekday = booking("1g.10gb", local(8, 10))  # inside the weekday window: fine
    assert conflicts(schedule(follow_bookings=False), [weekday], now) == []


def test_a_research_session_cut_by_the_drain_lead_or_a_class_window_conflicts():
    now = local(7, 0)
    early = booking("3g.40gb", local(7, 6), hours=1.75, bid=2)  # 06:00-07:45: the lead cuts in
    (msg,) = conflicts(schedule(), [early], now)
    assert "(every MIG GPU) is changing to 7x1g.10gb at 2026-12-07 06:30 UTC" in msg
    assert "the 30 min drain lead before class window mon,tue,wed,thu,fri 08:00–18:00" in msg
    assert "during booked session course2" in msg and "research layout 2x3g.40gb" in msg
    inside = booking("3g.40gb", local(7, 9), hours=3, bid=3)
    (msg,) = conflicts(schedule(), [inside], now)
    assert (
        "has the class layout 7x1g.10gb at 2026-12-07 07:45 UTC (class window "
        "mon,tue,wed,thu,fri 08:00–18:00, 07:00–17:00 UTC)"
    ) in msg
    night = booking("3g.40gb", local(7, 19), hours=3, bid=4)
    assert conflicts(schedule(), [night], now) == []
    gone = booking("3g.40gb", local(1, 7), hours=3, bid=5)  # in the past
    assert conflicts(schedule(), [gone], now) == []


def test_a_research_session_in_the_students_drain_lead_after_class_conflicts():
    # class ends 18:00; its students have until 18:30 to stop, so research is sure from then
    evening = booking("3g.40gb", local(7, 18, 15), hours=2, lead_min=0, bid=6)
    (msg,) = conflicts(schedule(), [evening], local(7, 12))
    assert "is changing to 2x3g.40gb at 2026-12-07 17:15 UTC" in msg
    assert "holders of class slices have the 30 min drain lead, until 17:30 UTC" in msg
    later = booking("3g.40gb", local(7, 18, 30), hours=2, lead_min=0, bid=7)
    assert conflicts(schedule(), [later], local(7, 12)) == []


# -- what a GPU holds when ---------------------------------------------------------------------


def test_a_gpu_holds_the_class_layout_from_class_start_and_research_after_the_students_lead():
    spans = layout_spans(schedule().entries[0], [], local(7, 6), local(7, 20), BERLIN)
    assert [(s.start, s.layout, s.phase) for s in spans] == [
        (local(7, 6), RESEARCH, "research"),
        (local(7, 7, 30), None, "changing"),  # research holders have until 08:00
        (local(7, 8), CLASS, "class"),
        (local(7, 18), None, "changing"),  # class holders have until 18:30
        (local(7, 18, 30), RESEARCH, "research"),
    ]
    assert spans[-1].end == local(7, 20) and spans[1].toward == CLASS
    assert spans[3].toward == RESEARCH
    # a booked class session is class time from its seats' lead, with the drain lead before it
    sat = booking("1g.10gb", local(12, 10), lead_min=15)
    spans = layout_spans(schedule().entries[0], [sat], local(12, 9), local(12, 13), BERLIN)
    assert [(s.start, s.phase) for s in spans] == [
        (local(12, 9), "research"), (local(12, 9, 15), "changing"), (local(12, 9, 45), "class"),
        (local(12, 12), "changing"), (local(12, 12, 30), "research"),
    ]  # fmt: skip

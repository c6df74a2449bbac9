"""A booking on a MIG GPU of the layout schedule (issue 22, lever 3a) is judged against the layout
the GPU will hold at the booking's time, not the one it holds now: a research group books
``3g.40gb`` for tonight while the GPU is in its class layout, and cannot book it for tomorrow's
class. The refusal names the GPU, its layout then and what the booking needs, and check-config
refuses exactly the sessions the booking refuses (one rule, :func:`layout_spans`).

The first tests run on a real ledger (SQLite, and PostgreSQL when configured) holding a declared
H100; the last one books through the service's ledger, lets the service's layout pass re-lay the
fake NVML's GPU, and claims the booked instances as members and as a walk-in."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest
from fake_nvml import FakeNVML
from ledger_support import backends, make_url
from miglayout_support import (
    CLASS,
    RESEARCH,
    RecordingHub,
    ledger_matches_nvml,
    scheduled_gpulab,
)
from tornado.web import HTTPError

from jupyterhub_gpulab.courses.config import GPULabCourses
from jupyterhub_gpulab.courses.manager import CourseManager
from jupyterhub_gpulab.courses.parse import parse_course
from jupyterhub_gpulab.courses.store import CourseStore
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest, load_declared
from jupyterhub_gpulab.inventory.layoutplan import conflicts
from jupyterhub_gpulab.inventory.layoutschedule import parse_schedule
from jupyterhub_gpulab.lab.profiles import load_profiles
from jupyterhub_gpulab.ledger import Booking, BookingConflict, Ledger, NoFreeSlice
from jupyterhub_gpulab.ledger.bookingfit import ScheduledHost
from jupyterhub_gpulab.service.layouts import LayoutKeeper, LayoutTraits
from jupyterhub_gpulab.service.state import LabState
from jupyterhub_gpulab.service.web.courseapi import save_course

pytestmark = pytest.mark.unit

BERLIN = ZoneInfo("Europe/Berlin")

SMALL = SliceRequest(kind=SliceKind.MIG, mig_profile="1g.10gb")
BIG = SliceRequest(kind=SliceKind.MIG, mig_profile="3g.40gb")
GPU = "GPU-h100-0"
SCHEDULE = {"class_layout": CLASS, "research_layout": RESEARCH, "drain_lead": "30m",
            "class_windows": [{"days": ["mon", "tue", "wed", "thu", "fri"],
                               "start": "08:00", "end": "18:00"}]}  # fmt: skip


def local(day: int, hh: int, mm: int = 0) -> datetime:
    """December 2026 in Berlin (Mon 7th … Sun 13th), as aware UTC."""
    return datetime(2026, 12, day, hh, mm, tzinfo=BERLIN).astimezone(timezone.utc)


def declared(layout: list[str]) -> list[dict]:
    return [{"uuid": GPU, "index": 0, "name": "NVIDIA H100 80GB HBM3", "memory": "80GiB",
             "mig": [{"uuid": f"MIG-h100-0-{i}", "profile": p} for i, p in enumerate(layout)]}]  # fmt: skip


@pytest.fixture(params=backends())
def backend(request):
    return request.param


def lab(backend, tmp_path, layout, **schedule) -> Ledger:
    """A ledger holding the declared H100 in ``layout``, its layout following the schedule."""
    led = Ledger(make_url(backend, tmp_path))
    led.sync_inventory(load_declared(declared(layout)))
    led.layout_plan = ScheduledHost("local", parse_schedule({**SCHEDULE, **schedule}, BERLIN))
    return led


def book(led, request, start, end, *, holder="nlp-lab", count=1, lead_min=0, profile="research"):
    return led.book(holder=holder, groups=[holder], profile=profile, request=request,
                    count=count, starts_at=start, ends_at=end, lead_s=lead_min * 60)  # fmt: skip


def test_a_research_group_books_tonight_while_the_gpu_holds_the_class_layout(backend, tmp_path):
    led = lab(backend, tmp_path, ["1g.10gb"] * 7)
    try:
        assert book(led, BIG, local(7, 19), local(7, 22), count=2).count == 2
        with pytest.raises(BookingConflict) as e:  # the research layout has two
            book(led, BIG, local(7, 20), local(7, 21), holder="cv-lab")
        assert "at 2026-12-07 19:00 UTC it needs 3 slices together with nlp-lab" in e.value.message
        assert "the lab has 2 that they can use" in e.value.message
    finally:
        led.close()


def test_a_booking_in_class_time_is_refused_naming_the_gpu_its_layout_and_the_need(
    backend, tmp_path
):
    led = lab(backend, tmp_path, ["3g.40gb"] * 2)  # research layout now
    try:
        with pytest.raises(BookingConflict) as e:
            book(led, BIG, local(8, 10), local(8, 12))
        assert e.value.message == (
            "nlp-lab (1 × MIG 3g.40gb, 2026-12-08 09:00–11:00 UTC) cannot be booked: the lab will "
            "have only 0 MIG 3g.40gb slices in service at 2026-12-08 09:00 UTC. By c.GPULab.mig_schedule, "
            "GPU 0 (GPU-h100-0) has the class layout 7x1g.10gb at 2026-12-08 09:00 UTC (class "
            "window mon,tue,wed,thu,fri 08:00–18:00, 07:00–17:00 UTC): it has no 3g.40gb."
        )
        assert led.bookings() == []
        # an admin's drain takes the GPU out of the plan: nothing to book tonight either
        led.set_drained(GPU, True, "fan noise")
        with pytest.raises(BookingConflict, match="only 0 MIG 3g.40gb slices in service"):
            book(led, BIG, local(8, 19), local(8, 21))
    finally:
        led.close()


def test_a_class_session_cannot_take_the_instances_of_research_booked_before_it(backend, tmp_path):
    led = lab(backend, tmp_path, ["3g.40gb"] * 2)
    try:
        book(led, BIG, local(12, 10), local(12, 12), count=2)  # Saturday: research time
        with pytest.raises(BookingConflict) as e:  # a booked class session brings class time
            book(led, SMALL, local(12, 11), local(12, 13), holder="ml101", count=4,
                 lead_min=15, profile="class")  # fmt: skip
        msg = e.value.message
        assert msg.startswith("ml101 (4 × MIG 1g.10gb, 2026-12-12 10:00–12:00 UTC) cannot be "
                              "booked: it moves class time on a scheduled GPU")  # fmt: skip
        assert "nlp-lab (2 × MIG 3g.40gb, 2026-12-12 09:00–11:00 UTC), booked before it" in msg
        assert "has the class layout 7x1g.10gb" in msg or "is changing to 7x1g.10gb" in msg
        assert book(led, SMALL, local(12, 14), local(12, 16), holder="ml101", count=4,
                    profile="class").count == 4  # fmt: skip
    finally:
        led.close()


def test_gpus_nothing_re_lays_are_booked_on_the_instances_they_hold(tmp_path):
    # GPUs read from node agents (or declared) keep their layout: no plan, today's instances count
    schedule = parse_schedule(SCHEDULE, BERLIN)
    for source, fits in (("declared", False), ("nvml", True)):
        (tmp_path / source).mkdir()
        led = Ledger(make_url("sqlite", tmp_path / source))
        led.sync_inventory(load_declared(declared(["1g.10gb"] * 7)))
        led.layout_plan = ScheduledHost.of(schedule, "local", source)
        try:
            if fits:
                assert book(led, BIG, local(7, 19), local(7, 21)).count == 1
            else:
                with pytest.raises(BookingConflict, match="only 0 MIG 3g.40gb slices in service"):
                    book(led, BIG, local(7, 19), local(7, 21))
        finally:
            led.close()


def test_the_capacity_calendar_counts_each_hour_in_the_layout_the_gpu_holds_then(backend, tmp_path):
    led = lab(backend, tmp_path, ["1g.10gb"] * 7)  # class layout now
    try:
        book(led, BIG, local(7, 19), local(7, 21))
        cal = led.capacity_calendar({"class": SMALL, "research": BIG}, local(7, 6), 14)
        row = {(r["profile"], r["hour"]): r for r in cal}

        def total(profile, hh):
            return row[profile, local(7, hh).isoformat()]["total"]

        assert (total("research", 6), total("class", 6)) == (2, 0)  # research before class
        assert (total("research", 7), total("class", 7)) == (0, 0)  # changing from 07:30
        assert (total("research", 12), total("class", 12)) == (0, 7)
        assert (total("research", 18), total("class", 18)) == (0, 0)  # students' lead
        evening = row["research", local(7, 19).isoformat()]
        assert (evening["total"], evening["reserved"], evening["holders"]) == (2, 1, ["nlp-lab"])
    finally:
        led.close()


@pytest.mark.parametrize(
    "start, end",
    [
        (local(7, 6), local(7, 7, 45)),  # the drain lead before class cuts in
        (local(7, 9), local(7, 11)),  # in class
        (local(7, 18, 10), local(7, 20)),  # the students' lead after class
        (local(7, 18, 30), local(7, 20)),  # research for sure
        (local(12, 10), local(12, 12)),  # Saturday
    ],
    ids=["lead-before", "in-class", "lead-after", "evening", "saturday"],
)
def test_check_config_refuses_exactly_the_research_sessions_a_booking_refuses(tmp_path, start, end):
    led = lab("sqlite", tmp_path, ["1g.10gb"] * 7)
    session = Booking(id=1, holder="nlp-lab", ref=None, groups=("nlp-lab",), profile="research",
                      request=BIG, count=1, starts_at=start, ends_at=end, lead_s=0, grace_s=0)  # fmt: skip
    try:
        found = conflicts(led.layout_plan.schedule, [session], local(7, 0))
        try:
            book(led, BIG, start, end)
            refused = ""
        except BookingConflict as e:
            refused = e.message
        assert bool(found) == bool(refused), (found, refused)
        if found:  # the same words for the GPU's layout then
            said = found[0].split("(every MIG GPU) ", 1)[1].split(" at ")[0]
            assert f"GPU 0 (GPU-h100-0) {said} at " in refused, (said, refused)
    finally:
        led.close()


# -- through the service: the course API, the layout pass ----------------------------------------


@pytest.fixture
def clock_start():
    return local(7, 12)  # Monday noon: class time, the GPU in its class layout


def test_a_course_session_the_schedule_leaves_without_slices_is_a_409_naming_the_gpu(tmp_path, at):
    led = lab("sqlite", tmp_path, ["1g.10gb"] * 7, follow_bookings=False)
    profiles = {p.slug: p for p in load_profiles([
        {"slug": "class", "display_name": "1g", "image": "x",
         "slice": {"kind": "mig", "mig_profile": "1g.10gb"}}])}  # fmt: skip
    manager = CourseManager(CourseStore(led.engine), GPULabCourses(), None, tz=BERLIN,
                            secret=None, ledger=led, lab_profiles=profiles)  # fmt: skip
    course = parse_course({"slug": "ml101", "profiles": ["class"], "reserve": 4,
                           "lead_minutes": 15, "sessions": {"dates": [
                               {"start": "2026-12-12T10:00", "end": "2026-12-12T12:00"}]}})  # fmt: skip
    try:
        with pytest.raises(HTTPError) as e:
            asyncio.run(save_course(manager, course, "admin"))
        said = e.value.log_message % e.value.args
        assert e.value.status_code == 409 and said.startswith("Not saved: ml101 (4 × MIG 1g.10gb")
        assert (
            "GPU 0 (GPU-h100-0) has the research layout 2x3g.40gb at 2026-12-12 08:45 UTC "
            "(outside class time): it has no 1g.10gb"
        ) in said
        assert led.bookings() == []
    finally:
        led.close()


async def test_booked_research_time_is_laid_out_by_the_pass_and_kept_for_the_group(tmp_path, at):
    db = f"sqlite:///{tmp_path / 'gpulab.sqlite'}"
    nvml = FakeNVML.h100_mig_lab(1)
    uuid = nvml.gpus[0].uuid
    led = Ledger(db, auto_upgrade=True)
    state = LabState(scheduled_gpulab(db), led, nvml=nvml)  # the service, on the GPU's host
    state.sync()
    keeper = LayoutKeeper(state, RecordingHub(), LayoutTraits())
    try:
        (done,) = await keeper.run_pass()
        assert done.decision.phase == "class" and len(nvml.gpus[0].migs) == 7
        nlp = state.ledger.book(holder="nlp-lab", groups=["nlp"], profile="research",
                                request=BIG, count=1, starts_at=local(7, 19),
                                ends_at=local(7, 21), lead_s=900)  # fmt: skip
        with pytest.raises(BookingConflict, match=f"GPU 0 \\({uuid}\\) has the class layout"):
            state.ledger.book(holder="cv-lab", groups=["cv"], profile="research", request=BIG,
                              count=1, starts_at=local(8, 10), ends_at=local(8, 12))  # fmt: skip

        at.now = local(7, 18, 0)  # class is over and nobody holds a slice: re-laid at once
        (done,) = await keeper.run_pass()
        assert done.relaid == 0
        assert ledger_matches_nvml(led, nvml, uuid, node="gpu1") == ["3g.40gb"] * 2

        at.now = local(7, 18, 50)  # the booking keeps its seat: one walk-in, not two
        walk_in = led.claim(BIG, user="wes", profile="research", groups=["students"])
        with pytest.raises(NoFreeSlice) as e:
            led.claim(BIG, user="wu", profile="research", groups=["students"])
        assert "reserved for nlp-lab" in str(e.value)
        member = led.claim(BIG, user="nadia", profile="research", groups=["nlp"])
        assert member.allocation.booking_id == nlp.id
        instances = {m.uuid for m in nvml.gpus[0].migs}
        assert {walk_in.slice.id, member.slice.id} == instances  # the new layout's instances
    finally:
        led.close()

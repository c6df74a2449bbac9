"""``gpulab check-config`` and the MIG layout schedule (issue 22, lever 3a): a schedule that would
leave a booked session without its slices is refused (exit 1) naming the session and the part of
the schedule, whether the session is a declared course's or a booking in the ledger; a bad
schedule is refused naming the key and the form."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from cli_support import write_config

from jupyterhub_gpulab.cli import main
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest, load_declared
from jupyterhub_gpulab.ledger import Ledger

pytestmark = pytest.mark.unit

BERLIN = ZoneInfo("Europe/Berlin")
IMG = "quay.io/jupyter/base-notebook"
INVENTORY = [
    {"uuid": "GPU-h100-0", "index": 0, "name": "NVIDIA H100 80GB HBM3", "memory": "80GiB",
     "mig": [{"uuid": f"MIG-h100-0-{i}", "profile": "3g.40gb"} for i in range(2)]},
]  # fmt: skip
PROFILES = [
    {"slug": "cpu", "display_name": "CPU", "image": IMG, "default": True},
    {"slug": "class", "display_name": "1g", "image": IMG,
     "slice": {"kind": "mig", "mig_profile": "1g.10gb"}},
    {"slug": "research", "display_name": "3g", "image": IMG,
     "slice": {"kind": "mig", "mig_profile": "3g.40gb"}},
]  # fmt: skip
WEEKDAYS = {"days": ["mon", "tue", "wed", "thu", "fri"], "start": "08:00", "end": "18:00"}


def saturday() -> date:
    """A Saturday one to two weeks ahead (course sessions are booked for the coming months)."""
    d = date.today() + timedelta(days=7)
    return d + timedelta(days=(5 - d.weekday()) % 7)


def config(tmp_path, *, follow: bool = True, course: bool = True):
    schedule = {"class_layout": "7x1g.10gb", "research_layout": "2x3g.40gb",
                "class_windows": [WEEKDAYS], "drain_lead": "30m", "follow_bookings": follow}  # fmt: skip
    sat = saturday().isoformat()
    ml101 = {"slug": "ml101", "title": "ML 101", "roster_group": "ml101",
             "staff_group": "ml101-staff", "profiles": ["class"], "reserve": 4,
             "prestart": False, "sessions": {"dates": [
                 {"start": f"{sat}T10:00", "end": f"{sat}T12:00"}]}}  # fmt: skip
    body = (
        f"c.GPULab.db_url = 'sqlite:///{tmp_path / 'gpulab.sqlite'}'\n"
        f"c.GPULab.inventory = {INVENTORY!r}\nc.GPULab.profiles = {PROFILES!r}\n"
        "c.GPULab.quota_timezone = 'Europe/Berlin'\n"
        f"c.GPULab.mig_schedule = {schedule!r}\n"
        + (f"c.GPULabCourses.courses = [{ml101!r}]\n" if course else "")
    )
    return str(write_config(tmp_path, body))


def check(capsys, path) -> tuple[int, str, str]:
    rc = main(["check-config", "-f", path])
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_course_session_in_research_time_is_refused_naming_both(tmp_path, capsys):
    rc, out, err = check(capsys, config(tmp_path, follow=False))
    assert rc == 1 and "OK" not in out
    assert "c.GPULab.mig_schedule[0] (every MIG GPU) has the research layout 2x3g.40gb" in err
    assert "during booked session ml101 (4 × " in err and "needs 1g.10gb slices" in err
    # followed, the schedule lays the class layout out for the session: fine
    rc, out, err = check(capsys, config(tmp_path, follow=True))
    assert rc == 0, err


def test_a_drain_lead_cutting_into_a_booked_research_session_is_refused(tmp_path, capsys):
    path = config(tmp_path, course=False)
    ledger = Ledger(f"sqlite:///{tmp_path / 'gpulab.sqlite'}", auto_upgrade=True)
    ledger.sync_inventory(load_declared(INVENTORY), node="local")
    monday = saturday() + timedelta(days=2)
    start = datetime.combine(monday, time(6, 30), BERLIN)  # 06:30-07:45, the lead starts 07:30
    ledger.book(holder="nlp-lab", groups=["nlp"], profile="research", count=1,
                request=SliceRequest(kind=SliceKind.MIG, mig_profile="3g.40gb"),
                starts_at=start, ends_at=start + timedelta(minutes=75))  # fmt: skip
    ledger.close()
    rc, _, err = check(capsys, path)
    assert rc == 1
    assert "(every MIG GPU) is changing to 7x1g.10gb at " in err
    assert "(the 30 min drain lead before class window mon,tue,wed,thu,fri 08:00–18:00" in err
    assert "during booked session nlp-lab (1 × " in err and "research layout 2x3g.40gb" in err


def test_a_malformed_schedule_is_refused_naming_the_key(tmp_path, capsys):
    path = config(tmp_path, course=False)
    with open(path, "a") as f:
        f.write("c.GPULab.mig_schedule = {'class_layout': '7x1g.10gb', 'research_layout': 'big'}\n")
    rc, _, err = check(capsys, path)
    assert rc == 1 and "c.GPULab.mig_schedule[0].research_layout: 'big' is not a MIG layout" in err

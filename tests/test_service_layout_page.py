"""The admin page and the inventory API show the MIG layout schedule (issue 22, lever 3a): the
schedule itself, and on each scheduled GPU its current and next layout with the time of the
change. The service runs in this process behind a real hub (its clock is the test's), NVML is the
fake one, and every API response is checked against the OpenAPI document."""

from __future__ import annotations

import secrets
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest
from fake_nvml import FakeNVML
from html_support import parse_html
from inprocess_support import InProcessService, inprocess_service_hub
from service_support import PREFIX, login

pytestmark = pytest.mark.usefixtures("api_contract")

H100 = FakeNVML.h100_mig_lab(1).gpus[0].uuid
SCHEDULE = {
    "gpus": [H100],
    "class_layout": "7x1g.10gb",
    "research_layout": "2x3g.40gb",
    "class_windows": [{"days": ["mon", "tue", "wed", "thu", "fri"],
                       "start": "08:00", "end": "18:00"}],
    "drain_lead": "30m",
}  # fmt: skip
EXTRA = (
    'c.GPULab.inventory = []\nc.GPULab.inventory_source = "nvml"\n'
    'c.GPULab.quota_timezone = "Europe/Berlin"\n'
    f"c.GPULab.mig_schedule = {SCHEDULE!r}\n"
    'c.GPULabService.layout_every = "1h"\n'  # the test acts, not the timer
)


@pytest.fixture
def clock_start():  # Monday 7 December 2026, noon in Berlin: class time
    return datetime(2026, 12, 7, 12, 0, tzinfo=ZoneInfo("Europe/Berlin")).astimezone(timezone.utc)


@pytest.fixture(scope="module")
def token():
    return secrets.token_hex(16)


@pytest.fixture(scope="module")
def hub(tmp_path_factory, token):
    with inprocess_service_hub(
        tmp_path_factory.mktemp("layout-hub"), token, extra=EXTRA, users={},
        nvml=FakeNVML.h100_mig_lab(1),
    ) as hub:  # fmt: skip
        yield hub


@pytest.fixture
def service(hub, token, at):
    svc = InProcessService(hub, token, nvml=FakeNVML.h100_mig_lab(1)).start()
    yield svc
    svc.stop()


def test_the_admin_page_and_api_show_the_schedule_and_each_gpus_next_layout(hub, service, at):
    admin = login(hub, "admin")
    r = admin.get(hub.url + PREFIX, timeout=30)
    assert r.status_code == 200, r.text[:300]
    page = parse_html(r.text)
    entry = page.find("li", cls="schedule-entry").text()
    assert (
        f"{H100}: class layout 7x1g.10gb during class window mon,tue,wed,thu,fri 08:00–18:00"
        in entry
    )
    assert "drained 30 min ahead; research layout 2x3g.40gb otherwise" in entry
    plan = page.find("tr", cls="device", data_uuid=H100).find("small", cls="layout-plan")
    assert "class layout (class window" in plan.text()
    assert "next: 2x3g.40gb at 2026-12-07 17:00:00 UTC" in plan.text()

    inv = admin.get(hub.url + PREFIX + "api/inventory", timeout=30).json()
    (dev,) = [d for n in inv["nodes"] for d in n["devices"] if d["uuid"] == H100]
    lp = dev["layout_plan"]
    assert (lp["current"], lp["target"], lp["phase"]) == ("7x1g.10gb", "7x1g.10gb", "class")
    assert lp["next_layout"] == "2x3g.40gb" and lp["next_change_at"].startswith("2026-12-07T17:00")
    assert inv["mig_schedule"][0]["gpus"] == [H100]

    at.now = datetime(2026, 12, 7, 17, 10, tzinfo=timezone.utc)  # 18:10 in Berlin: class is over
    service.call(service.service.layouts.run_pass)  # the pass re-lays it and re-reads NVML
    page = parse_html(admin.get(hub.url + PREFIX, timeout=30).text)
    row = page.find("tr", cls="device", data_uuid=H100)
    assert "3g.40gb ×2" in row.find("td", cls="layout").text()
    assert (
        "next: 7x1g.10gb at 2026-12-08 06:30:00 UTC" in row.find("small", cls="layout-plan").text()
    )

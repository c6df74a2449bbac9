"""The plots on the admin and user pages, in a real browser (Debian's chromium through Selenium):
what they draw is what the API answers.

A real hub fronts the service, which runs in this process with the fake NVML (the one stand-in:
no GPU here) so the test sets what the GPUs report between two samples. Screenshots of both pages
land in ``test-artifacts/`` (``admin-plots.png``, ``user-plots.png``). The allocations are
written to the ledger (one of them a week in the past, which no spawn can make).
"""

from __future__ import annotations

import secrets
from datetime import timedelta

import pytest
from browser_support import ARTIFACTS, browser_problem, log_in, save_screenshot
from fake_nvml import A40_UUID, P40_UUID, FakeNVML
from inprocess_support import InProcessService, inprocess_service_hub
from service_support import (
    POLICIES,
    PREFIX,
    ledger_for,
    login,
    require_or_skip,
)

from jupyterhub_gpulab import clock
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.ledger.schema import allocations

pytestmark = pytest.mark.browser

BUDGET = {**POLICIES, "students": {**POLICIES["students"], "gpu_hours": 10, "period": "week"}}
EXTRA = f"""
c.GPULab.inventory = []
c.GPULab.inventory_source = "nvml"
c.GPULab.group_policies = {BUDGET!r}
"""
#: the running allocation accrues GPU-hours between the page and the API call: 0.01 h = 36 s
HOURS_TOLERANCE = 0.01


@pytest.fixture(scope="module")
def token():
    return secrets.token_hex(16)


@pytest.fixture(scope="module")
def fake():
    return FakeNVML.mixed_lab()


@pytest.fixture(scope="module")
def hub(tmp_path_factory, token, fake):
    require_or_skip(browser_problem(), "A headless chromium")
    with inprocess_service_hub(
        tmp_path_factory.mktemp("plots-hub"), token, extra=EXTRA, users={},
        nvml=FakeNVML.mixed_lab(),
    ) as hub:  # fmt: skip
        svc = InProcessService(hub, token, nvml=fake).start()
        hub.svc = svc
        try:
            yield hub
        finally:
            svc.stop()


def log_in_to(browser, hub, name: str, page: str) -> None:  # noqa: F811
    browser.get(f"{hub.url}/hub/logout")
    log_in(browser, hub, name, PREFIX + page)


def series_last(figure) -> dict[str, float]:
    from selenium.webdriver.common.by import By

    return {
        g.get_attribute("data-label"): float(g.get_attribute("data-last"))
        for g in figure.find_elements(By.CSS_SELECTOR, "g.series")
        if g.get_attribute("data-last")
    }


def test_admin_and_user_plots_show_the_apis_figures(hub, fake, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    ledger = ledger_for(hub)
    svc = hub.svc
    try:
        ledger.claim(SliceRequest(kind=SliceKind.GPU, model="A40"), user="researcher",
                     profile="a40", charge_groups=[("researchers", None)])  # fmt: skip
        ledger.claim(SliceRequest(kind=SliceKind.GPU, model="P40"), user="student",
                     profile="cpu", charge_groups=[("students", 3)])  # fmt: skip
        # three GPU-hours last week (its Wednesday, whatever day this runs), charged to the students
        past = ledger.claim(SliceRequest(kind=SliceKind.GPU, model="H100"), user="student",
                            profile="cpu", server_name="old", charge_groups=[("students", 3)])  # fmt: skip
        ledger.release(past.allocation.id, "stopped")
        now = clock.utcnow()  # the hub's weeks start on Monday 00:00 UTC (quota_timezone)
        monday = now.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(now.weekday())
        start = monday - timedelta(days=5, hours=-9)
        with ledger.engine.begin() as conn:
            conn.execute(
                allocations.update()
                .where(allocations.c.id == past.allocation.id)
                .values(started_at=start, ended_at=start + timedelta(hours=3))
            )
        for a40, p40 in ((20, 10), (40, 25), (70, 55)):
            fake.set_utilization(A40_UUID, gpu_percent=a40)
            fake.set_utilization(P40_UUID, gpu_percent=p40)
            svc.call(svc.service.sample)

        # -- the admin page ------------------------------------------------------------------
        log_in_to(browser, hub, "admin", "")
        save_screenshot(browser, ARTIFACTS / "admin-plots.png")
        admin = login(hub, "admin")
        inventory = admin.get(hub.url + PREFIX + "api/inventory", timeout=30).json()
        util = {
            s["id"]: s["gpu_percent"]
            for n in inventory["nodes"]
            for d in n["devices"]
            for s in d["slices"]
        }
        fig = browser.find_element(
            By.CSS_SELECTOR, f'figure.device-chart[data-device="{A40_UUID}"]'
        )
        assert series_last(fig) == {"whole GPU": util[A40_UUID]} == {"whole GPU": 70.0}
        assert "whole GPU: 70 %" in fig.find_element(By.TAG_NAME, "svg").text
        # the line is the sampler's readings (the service's own periodic samples too), one
        # vertex each, drawn higher for more; its table fallback says the same
        line = fig.find_element(By.CSS_SELECTOR, "g.series")
        values = [float(v) for v in line.get_attribute("data-values").split()]
        taken = iter(values)
        assert all(v in taken for v in (20, 40, 70)) and values[-1] == 70, values
        points = line.find_element(By.TAG_NAME, "polyline").get_attribute("points").split()
        assert len(points) == len(values)
        ys = {v: float(p.split(",")[1]) for v, p in zip(values, points)}
        assert ys[20] > ys[40] > ys[70]  # SVG y grows downwards
        row = browser.execute_script(
            "return [...arguments[0].querySelectorAll('table.chart-table tr[data-label] td')]"
            ".map(td => td.textContent.trim())",
            fig,
        )
        mean = sum(values) / len(values)
        assert row == ["whole GPU", "70.0 %", f"{mean:.1f} %", "70.0 %", str(len(values))]
        fig = browser.find_element(
            By.CSS_SELECTOR, f'figure.device-chart[data-device="{P40_UUID}"]'
        )
        assert series_last(fig) == {"whole GPU": util[P40_UUID]} == {"whole GPU": 55.0}

        bars = browser.find_elements(By.CSS_SELECTOR, "figure.weekly-chart g.bar")
        plotted = {
            (b.get_attribute("data-category"), b.get_attribute("data-label")): float(
                b.get_attribute("data-value")
            )
            for b in bars
        }
        weeks = sorted({week for week, _ in plotted})
        assert len(weeks) == 4
        nonzero = 0
        for week in weeks:
            end = (clock.date.fromisoformat(week) + timedelta(days=7)).isoformat()
            usage = admin.get(
                hub.url + PREFIX + f"api/usage?start={week}&end={end}", timeout=30
            ).json()["gpu_hours"]
            api = {(g["group"] or "(no group)"): g["gpu_hours"] for g in usage["by_group"]}
            for (w, group), hours in plotted.items():
                if w == week:
                    assert hours == pytest.approx(api.get(group, 0.0), abs=HOURS_TOLERANCE)
                    nonzero += hours > 0
        assert plotted[(weeks[-2], "students")] == pytest.approx(3.0)
        assert nonzero >= 3  # last week's students; this week's students and researchers

        # -- the user page -------------------------------------------------------------------
        log_in_to(browser, hub, "student", "me")
        save_screenshot(browser, ARTIFACTS / "user-plots.png")
        me = login(hub, "student").get(hub.url + PREFIX + "api/me", timeout=30).json()
        fig = browser.find_element(By.CSS_SELECTOR, "figure.budget-chart")
        [bar] = fig.find_elements(By.CSS_SELECTOR, "g.bar")
        assert float(bar.get_attribute("data-value")) == pytest.approx(
            me["gpu_hours"]["used_hours"], abs=HOURS_TOLERANCE
        )
        limit = fig.find_element(By.CSS_SELECTOR, "g.limit")
        assert float(limit.get_attribute("data-value")) == me["gpu_hours"]["budget"]["limit_hours"]
        assert "budget 10 h" in fig.text
        fig = browser.find_element(By.CSS_SELECTOR, "figure.utilisation-chart")
        [mine] = [s for s in me["slices"] if s["slice_id"] == P40_UUID]
        assert series_last(fig) == {"default: whole GPU": mine["gpu_percent"]}
        assert mine["gpu_percent"] == 55.0
    finally:
        for a in ledger.open_allocations():
            ledger.release(a.id, "test-cleanup")
        ledger.close()

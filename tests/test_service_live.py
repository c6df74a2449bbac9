"""The service with live figures: run in this process behind a real hub (the hub declares it
unmanaged), with NVML from the fake pynvml handed to its constructor, so a test can change what
the GPUs report, or their MIG layout, between requests."""

from __future__ import annotations

import secrets

import pytest
from fake_nvml import A40_UUID, A100_MIGS, A100_UUID, FakeNVML, GiB
from html_support import parse_html
from inprocess_support import InProcessService, inprocess_service_hub
from service_support import (
    OLD_1G,
    PREFIX,
    ledger_for,
    login,
    rebooted_lab,
    service_xsrf,
)

from jupyterhub_gpulab.inventory import SliceKind, SliceRequest

MIG_1G = SliceRequest(kind=SliceKind.MIG, mig_profile="1g.5gb")


@pytest.fixture(scope="module")
def token():
    return secrets.token_hex(16)


@pytest.fixture(scope="module")
def hub(tmp_path_factory, token):
    # an external service runs before the hub starts (the hub waits for it); the tests start
    # their own instance of it afterwards
    with inprocess_service_hub(
        tmp_path_factory.mktemp("live-hub"), token,
        extra='c.GPULab.inventory = []\nc.GPULab.inventory_source = "nvml"\n',
        users={}, nvml=FakeNVML.mixed_lab(),
    ) as hub:  # fmt: skip
        yield hub


@pytest.fixture
def fake():
    return FakeNVML.mixed_lab()


@pytest.fixture
def service(hub, token, fake):
    svc = InProcessService(hub, token, nvml=fake).start()
    yield svc
    svc.stop()
    ledger = ledger_for(hub)
    for a in ledger.open_allocations():
        ledger.release(a.id, "test-cleanup")
    ledger.close()


@pytest.fixture
def admin(hub, service):
    return login(hub, "admin")


def admin_page(hub, session):
    r = session.get(hub.url + PREFIX, timeout=30)
    assert r.status_code == 200, r.text[:300]
    return parse_html(r.text)


def test_admin_page_shows_live_utilisation_per_device_and_slice(hub, service, fake, admin):
    fake.set_utilization(A40_UUID, gpu_percent=40, memory_used=2 * GiB)
    fake.set_utilization(A100_MIGS[0][0], memory_used=3 * GiB)
    service.call(service.service.sample)

    page = admin_page(hub, admin)

    a40 = page.find("tr", cls="device", data_uuid=A40_UUID)
    assert a40.find("span", cls="gpu-util").text() == "40%"
    assert a40.find("span", cls="mem-used").text().startswith("2 GiB of ")
    a100 = page.find("tr", cls="device", data_uuid=A100_UUID)
    assert a100.find("td", cls="meter").find("span", cls="mem-used").text().startswith("3 GiB of")
    chip = page.find("span", data_slice=A100_MIGS[0][0])
    assert "3 GiB" in chip.text()
    assert not page.find_all("span", id="nvml-status")

    inv = admin.get(hub.url + PREFIX + "api/inventory", timeout=30).json()
    devices = {d["uuid"]: d for d in inv["nodes"][0]["devices"]}
    assert devices[A40_UUID]["gpu_percent"] == 40


def test_a_changed_mig_layout_is_flagged_and_its_slice_never_offered(hub, service, admin):
    ledger = ledger_for(hub)
    held = ledger.claim(MIG_1G, user="student", profile="mig-small").allocation
    assert held.slice_id == OLD_1G
    service.service.state.nvml = rebooted_lab()  # the GPU was re-partitioned

    r = admin.post(
        hub.url + PREFIX + "actions/refresh", data={"_xsrf": service_xsrf(admin)}, timeout=30
    )
    assert r.status_code == 200 and r.url == hub.url + PREFIX

    page = parse_html(r.text)
    assert f"student ({OLD_1G})" in page.find("div", id="gpulab-flash").text()
    warning = page.find("div", id="vanished-allocations")
    assert "student" in warning.text() and OLD_1G in warning.text()
    assert page.find("span", data_slice=OLD_1G).attrs["data-state"] == "vanished"
    row = page.find("tr", cls="allocation", data_allocation=str(held.id))
    assert "vanished" in row.text()
    a100 = page.find("tr", cls="device", data_uuid=A100_UUID)
    assert "MIG: 7g.40gb" in a100.text()

    student = parse_html(login(hub, "student").get(hub.url + PREFIX + "me", timeout=30).text)
    free = student.find("tr", cls="profile", data_profile="mig-small").find("td", cls="free")
    assert free.text() == "none in this lab"
    assert ledger.capacity(MIG_1G) == (0, 0)
    ledger.close()


def test_an_action_on_the_admin_page_brings_the_admin_back_to_where_they_were(hub, service, admin):
    # a new user's trial: after "Stop server" on page 3 of a filtered table the admin landed on
    # the bare page 1; the forms hand the page's query back, and only a query comes back
    where = "kind=shared&offset=50&users_offset=50&start=2026-11-30"
    page = parse_html(admin.get(hub.url + PREFIX + "?" + where, timeout=30).text)
    backs = {i.attrs["value"] for i in page.find_all("input", name="back")}
    assert backs == {where}
    for back, lands in (
        (where, "?" + where),
        ("kind=shared&evil=%0d%0aSet-Cookie:%20x", "?kind=shared"),  # no header injected
        ("//evil.example/x", "?%2F%2Fevil.example%2Fx="),  # a query of ours, not another host
        ("a=" + "b" * 3000, ""),
    ):
        r = admin.post(
            hub.url + PREFIX + "actions/refresh",
            data={"_xsrf": service_xsrf(admin), "back": back},
            timeout=30,
        )
        assert r.status_code == 200 and r.url == hub.url + PREFIX + lands, (back, r.url)


@pytest.mark.parametrize(
    "keep_secret", [pytest.param(True, id="secret-kept"), pytest.param(False, id="secret-lost")]
)
def test_users_stay_logged_in_across_a_service_restart(hub, token, fake, keep_secret):
    """The cookie secret is kept in c.GPULabService.cookie_secret_file: a restarted service
    still accepts its cookies (with a new secret, the browser would be sent to log in again)."""
    svc = InProcessService(hub, token, nvml=fake).start()
    session = login(hub, "researcher")
    svc.stop()
    if not keep_secret:
        (hub.workdir / "gpulab_cookie_secret").unlink()
    svc = InProcessService(hub, token, nvml=fake).start()
    try:
        r = session.get(hub.url + PREFIX + "me", allow_redirects=False, timeout=30)
    finally:
        svc.stop()
    if keep_secret:
        assert r.status_code == 200
    else:
        assert r.status_code == 302 and "/hub/api/oauth2/authorize" in r.headers["Location"]

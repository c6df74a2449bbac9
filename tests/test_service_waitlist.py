"""The waitlist as a student lives it, on a real JupyterHub with the gpulab service and Docker: a
refused student joins the queue through the API, a slice frees, the service holds it for them and
the hub's home page says so, their spawn takes exactly the held slice; an offer nobody takes
passes to the next in line."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import requests
from clock_support import quota_timezone_clear_of_the_week_turn
from hubtools import wait_for
from leakcheck import unique
from service_support import (
    POLICIES,
    PREFIX,
    login,
    real_servers,
    running_service_hub,
    user_token,
)

from jupyterhub_gpulab.inventory import SliceKind, SliceRequest

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("api_contract")]

MIG_1G = SliceRequest(kind=SliceKind.MIG, mig_profile="1g.5gb")
SEAT = SliceRequest(kind=SliceKind.SHARED)
#: a group whose members may use 0.01 GPU-hours (36 s of a whole GPU) a week
BUDGETED = {**POLICIES, "budgeted": {"gpu_hours": 0.01, "period": "week"}}
#: bea's ten minutes must lie in the budget's week: the first minutes of a UTC Monday hold fewer
#: (one minute of a seat is 15 s, under her 36 s), so the lab's week is one that began hours ago
QUOTA_TZ = quota_timezone_clear_of_the_week_turn(datetime.now(timezone.utc))
NODE = unique("gpulabwait")
EXTRA = (
    real_servers(NODE, hold_rows=True)
    + f"""
c.GPULabService.waitlist_every = 1
c.GPULabService.waitlist_hold = 4
c.GPULab.group_policies = {BUDGETED!r}
c.GPULab.quota_timezone = {QUOTA_TZ!r}
"""
)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    from hubtools import docker_available

    reason = docker_available()
    if reason:
        pytest.fail(f"Docker is needed: {reason}")
    with running_service_hub(
        tmp_path_factory.mktemp("waitlist-hub"), extra=EXTRA, node=NODE
    ) as hub:
        yield hub


def test_a_queued_student_is_offered_a_freed_slice_and_their_spawn_takes_it(hub, ledger):
    # Both 1g.5gb MIG slices of the lab are held by others.
    others = [
        ledger.claim(MIG_1G, user=u, profile="mig-small", server_name="x")
        for u in ("researcher", "instructor")
    ]
    session = login(hub, "student")
    token = user_token(hub, session, "student")
    api = hub.url + PREFIX + "api/"
    auth = {"Authorization": f"token {token}"}
    joined = requests.post(
        api + "waitlist", json={"profile": "mig-small"}, headers=auth, timeout=30
    )
    assert joined.status_code == 201 and "number 1 in line" in joined.json()["message"]

    ledger.release(others[0].allocation.id, "stopped")
    hold = wait_for("the student's hold", lambda: ledger.open_allocations("student"), 20)[0]
    assert hold.hold_until is not None and hold.slice_id == others[0].allocation.slice_id
    mine = requests.get(api + "waitlist", headers=auth, timeout=30).json()["entries"]
    assert [(e["state"], e["position"]) for e in mine] == [("offered", 0)]
    home = session.get(hub.url + "/hub/home", timeout=30)
    assert "held for you" in home.text  # the hub's banner

    r = hub.spawn("student", {"profile": "mig-small"})
    assert r.status_code < 400, r.text
    hub.wait_ready("student")
    held = ledger.open_allocations("student")
    assert [(a.id, a.hold_until) for a in held] == [(hold.id, None)]
    assert [e.state for e in ledger.entries_of("student")][0] == "served"
    assert ledger.warnings("student") == []
    hub.stop_server("student")
    ledger.release(others[1].allocation.id, "stopped")


def test_an_offer_nobody_takes_passes_to_the_next(hub, ledger):
    holders = [
        ledger.claim(MIG_1G, user=u, profile="mig-small", server_name="y")
        for u in ("researcher", "instructor")
    ]
    ledger.join_waitlist("admin", "mig-small", MIG_1G)
    ledger.join_waitlist("student", "mig-small", MIG_1G)
    try:
        ledger.release(holders[0].allocation.id, "stopped")
        first = wait_for("the admin's hold", lambda: ledger.open_allocations("admin"), 20)[0]
        assert first.hold_until is not None
        # nobody starts a server: after the 4 s hold it lapses and the student gets it
        second = wait_for("the student's hold", lambda: ledger.open_allocations("student"), 20)[0]
        assert second.slice_id == first.slice_id
        assert [e.state for e in ledger.entries_of("admin")][0] == "lapsed"
        assert ledger.get(first.id).end_reason == "offer-lapsed"
    finally:
        ledger.leave_waitlist("admin")
        ledger.leave_waitlist("student")
        for a in ledger.open_allocations():
            ledger.release(a.id, "test-cleanup")


def test_a_student_joins_and_leaves_the_queue_from_their_page(hub, ledger):
    from html_support import parse_html
    from service_support import service_xsrf

    holders = [
        ledger.claim(MIG_1G, user=u, profile="mig-small", server_name="z")
        for u in ("researcher", "instructor")
    ]
    session = login(hub, "student")
    page = hub.url + PREFIX + "me"
    try:
        doc = parse_html(session.get(page, timeout=30).text)
        assert doc.find_all("form", cls="join-waitlist", data_profile="mig-small")
        r = session.post(
            page + "/waitlist",
            data={"action": "join", "profile": "mig-small", "_xsrf": service_xsrf(session)},
            timeout=30,
        )
        assert r.status_code == 200 and r.url.endswith(PREFIX + "me")
        assert "number 1 in line" in r.text
        assert [e.user for e in ledger.waitlist("mig-small")] == ["student"]
        entry = parse_html(r.text).find_all("div", cls="waitlist-entry", data_profile="mig-small")
        assert entry and entry[0].find_all(cls="position")[0].text() == "1"
        bad = session.post(
            page + "/waitlist",
            data={"action": "join", "profile": "cpu", "_xsrf": service_xsrf(session)},
            timeout=30,
        )
        assert bad.status_code == 400 and "mig-small" in bad.text
        r = session.post(
            page + "/waitlist",
            data={"action": "leave", "profile": "mig-small", "_xsrf": service_xsrf(session)},
            timeout=30,
        )
        assert r.status_code == 200 and ledger.waitlist("mig-small") == []
    finally:
        ledger.leave_waitlist("student")
        for h in holders:
            ledger.release(h.allocation.id, "test-cleanup")


def test_the_spawn_form_offers_the_slice_held_for_the_student(hub, ledger):
    """The reviewer's journey: both slices taken, one frees and is held for the student. Their
    spawn form must pick the held profile, as the claim does (``ledger.holds_of`` is the
    claim's own test of a hold); their other GPU profile stays closed, the hold counting toward
    their limit of 1 as the claim counts it; pressing Start takes the held slice."""
    from html_support import parse_html

    others = [
        ledger.claim(MIG_1G, user=u, profile="mig-small", server_name="z")
        for u in ("researcher", "instructor")
    ]
    ledger.release(others[0].allocation.id, "stopped")
    # the hold an offer makes, for longer than this hub's 4 s offers (nobody queues for it, so
    # the service lets it be)
    until = datetime.now(timezone.utc) + timedelta(minutes=10)
    hold = ledger.claim(MIG_1G, user="student", profile="mig-small", hold_until=until)
    try:
        session = login(hub, "student")
        page = session.get(hub.url + "/hub/spawn", timeout=30)
        assert page.status_code == 200, page.text[:500]
        doc = parse_html(page.text)
        radios = {i.attrs["value"]: i for i in doc.find_all("input", name="profile")}
        assert set(radios) == {"cpu", "mig-small", "shared-seat"}
        held = radios["mig-small"]
        assert "disabled" not in held.attrs and "checked" in held.attrs
        assert [n for n, r in radios.items() if "checked" in r.attrs] == ["mig-small"]
        row = held.parent
        assert f"held for you until {until:%H:%M} UTC" in row.text()
        seat = radios["shared-seat"]
        assert "disabled" in seat.attrs
        assert "held for you" in seat.description() and "stop a server" not in seat.description()
        note = doc.find(cls="gpulab-note").text()
        assert "You hold 0 of the 1 GPU slice" in note and "1 more is held for you" in note

        form = doc.find("form", id="spawn_form")
        r = session.post(
            hub.url + form.attrs["action"],
            data={"profile": "mig-small", "_xsrf": session.cookies.get("_xsrf", path="/hub/")},
            timeout=60,
        )
        assert r.status_code == 200, r.text[:500]
        hub.wait_ready("student")
        mine = ledger.open_allocations("student")
        assert [(a.id, a.hold_until) for a in mine] == [(hold.allocation.id, None)]
    finally:
        if hub.server("student") is not None:
            hub.stop_server("student")
        for a in ledger.open_allocations():
            ledger.release(a.id, "test-cleanup")


def test_a_queued_student_whose_budget_ran_out_is_skipped_and_told_why(hub, ledger):
    from html_support import parse_html

    from jupyterhub_gpulab.ledger.schema import allocations

    hub.create_user("bea", ["budgeted"])
    # bea used a seat for ten minutes earlier today: more than her 0.01 GPU-hours
    old = ledger.claim(SEAT, user="bea", profile="shared-seat", server_name="old")
    ledger.release(old.allocation.id, "stopped")
    with ledger.engine.begin() as conn:
        conn.execute(
            allocations.update()
            .where(allocations.c.id == old.allocation.id)
            .values(started_at=datetime.now(timezone.utc) - timedelta(minutes=10))
        )
    holders = [
        ledger.claim(MIG_1G, user=u, profile="mig-small", server_name="w")
        for u in ("researcher", "instructor")
    ]
    session = login(hub, "bea")
    auth = {"Authorization": f"token {user_token(hub, session, 'bea')}"}
    api = hub.url + PREFIX + "api/waitlist"
    try:
        joined = requests.post(api, json={"profile": "mig-small"}, headers=auth, timeout=30)
        assert joined.status_code == 201, joined.text
        ledger.release(holders[0].allocation.id, "stopped")
        # the pass after the slice freed skips her (and holds nothing for her)
        [entry] = wait_for(
            "bea's entry refused",
            lambda: [
                e
                for e in requests.get(api, headers=auth, timeout=30).json()["entries"]
                if e["state"] == "refused"
            ],
            20,
        )
        assert ledger.open_allocations("bea") == []
        said = entry["message"]
        assert said.startswith("Skipped in the queue for ") and (
            "your GPU-hour budget is spent until Monday" in said
        ), said
        assert "of 0.01 GPU-hours this week (budgeted)" in said and "0.0 of" not in said
        # the hub's home page says it, and so does her gpulab page (in its waitlist section)
        home = session.get(hub.url + "/hub/home", timeout=30).text
        assert "budget is spent until Monday" in home
        me = parse_html(session.get(hub.url + PREFIX + "me", timeout=30).text)
        [told] = me.find_all("div", cls="waitlist-entry", data_state="refused")
        assert told.text().strip() == said
    finally:
        ledger.leave_waitlist("bea")
        for h in holders:
            ledger.release(h.allocation.id, "test-cleanup")


@pytest.fixture
def mig_full(ledger):
    """Both 1g.5gb MIG slices of the lab held, by the researcher and the instructor."""
    holders = [
        ledger.claim(MIG_1G, user=u, profile="mig-small", server_name="full")
        for u in ("researcher", "instructor")
    ]
    yield holders
    for h in holders:
        ledger.release(h.allocation.id, "test-cleanup")


@pytest.mark.usefixtures("mig_full")
def test_a_full_profiles_join_the_waitlist_on_the_spawn_form_links_to_the_queue(hub, ledger):
    from html_support import parse_html

    session = login(hub, "student")
    doc = parse_html(session.get(hub.url + "/hub/spawn", timeout=30).text)
    [why] = [n for n in doc.find_all("small") if n.attrs.get("id") == "why-mig-small"]
    [link] = why.find_all("a")
    assert link.text() == "join the waitlist"
    # the link leads to the page whose button joins that queue
    target = session.get(hub.url + link.attrs["href"], timeout=30)
    assert target.status_code == 200 and target.url.split("#")[0].endswith(PREFIX + "me")
    assert parse_html(target.text).find_all("form", cls="join-waitlist", data_profile="mig-small")


@pytest.mark.usefixtures("mig_full")
def test_a_researcher_is_not_offered_the_queue_for_the_slice_he_holds(hub, ledger):
    from html_support import parse_html

    doc = parse_html(login(hub, "researcher").get(hub.url + PREFIX + "me", timeout=30).text)
    assert not doc.find_all("form", cls="join-waitlist", data_profile="mig-small")
    # his limit is 2: the noun follows "at most 2", not the 1 he holds
    assert "You hold 1 of at most 2 GPU slices." in " ".join(
        doc.find("p", id="my-use").text().split()
    )
    other = parse_html(login(hub, "student").get(hub.url + PREFIX + "me", timeout=30).text)
    assert other.find_all("form", cls="join-waitlist", data_profile="mig-small")


def test_an_offer_while_the_default_server_runs_says_to_start_a_named_one(hub, ledger, mig_full):
    others = mig_full
    r = hub.spawn("student", {"profile": "cpu"})
    assert r.status_code in (201, 202), r.text
    try:
        hub.wait_ready("student")
        ledger.join_waitlist("student", "mig-small", MIG_1G)
        session = login(hub, "student")
        ledger.release(others[0].allocation.id, "stopped")
        wait_for("the student's hold", lambda: ledger.open_allocations("student"), 20)
        home = " ".join(session.get(hub.url + "/hub/home", timeout=30).text.split())
        assert "held for you" in home
        assert "Start your server to take it" not in home
        assert "Your default server is running: start a named server with that profile" in home
    finally:
        ledger.leave_waitlist("student")
        hub.stop_server("student")
        for a in ledger.open_allocations():
            ledger.release(a.id, "test-cleanup")

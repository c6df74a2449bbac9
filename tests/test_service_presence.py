"""Who is at the keyboard (:mod:`jupyterhub_gpulab.service.presence`): the service holds the
latest interaction each server's JupyterLab extension reports, refuses times no page could
have sent, and stays bounded. Pure: no hub, no database (the endpoint on a real hub:
``test_service_culling.py``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpulab.service.presence import MAX_AGE_S, MAX_AHEAD_S, Presence, check

NOW = datetime(2026, 12, 7, 10, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "at",
    [
        pytest.param(NOW, id="now"),
        pytest.param(NOW - timedelta(minutes=3), id="minutes-ago"),
        pytest.param(NOW + timedelta(seconds=MAX_AHEAD_S), id="a-clock-a-little-ahead"),
        pytest.param(NOW - timedelta(seconds=MAX_AGE_S), id="a-day-old"),
    ],
)
def test_a_time_a_page_could_have_sent_is_accepted(at):
    assert check(at, NOW) is None


@pytest.mark.parametrize(
    "at, says",
    [
        pytest.param(NOW + timedelta(seconds=MAX_AHEAD_S + 1), "ahead", id="future"),
        pytest.param(NOW - timedelta(seconds=MAX_AGE_S + 1), "old", id="absurdly-old"),
        pytest.param(NOW.replace(tzinfo=None), "time zone", id="no-zone"),
    ],
)
def test_a_time_no_page_could_have_sent_is_refused_with_why(at, says):
    assert says in check(at, NOW)


def test_the_latest_interaction_is_held_whatever_order_reports_arrive_in():
    p = Presence()
    assert p.report("ann", "", NOW - timedelta(minutes=1)) == NOW - timedelta(minutes=1)
    assert p.report("ann", "", NOW - timedelta(minutes=5)) == NOW - timedelta(minutes=1)
    assert p.last("ann", "") == NOW - timedelta(minutes=1)
    assert p.last("ann", "gpu2") is None and p.last("ben", "") is None  # per server


def test_the_store_is_bounded_dropping_the_server_least_recently_reported():
    p = Presence(limit=2)
    p.report("ann", "", NOW)
    p.report("ben", "", NOW)
    p.report("ann", "", NOW + timedelta(minutes=1))  # ann reports again: ben is now oldest
    p.report("cat", "", NOW)
    assert set(p.snapshot()) == {("ann", ""), ("cat", "")}


def test_one_user_flooding_made_up_server_names_pushes_out_only_their_own_reports():
    # the endpoint takes any well-formed server name, running or not: a student posting
    # thousands of names must not push out other users' reports (their servers would fall back
    # to last_activity, an open tab spared again)
    p = Presence(limit=100, per_user=3)
    p.report("ann", "", NOW)
    p.report("ben", "gpu", NOW)
    for i in range(500):
        p.report("mallory", f"fake{i}", NOW)
    held = p.snapshot()
    assert ("ann", "") in held and ("ben", "gpu") in held
    assert sorted(n for u, n in held if u == "mallory") == ["fake497", "fake498", "fake499"]
    # a server reported again is the user's most recent: their oldest goes first
    p.report("mallory", "fake497", NOW + timedelta(minutes=1))
    p.report("mallory", "real", NOW)
    assert sorted(n for u, n in p.snapshot() if u == "mallory") == ["fake497", "fake499", "real"]

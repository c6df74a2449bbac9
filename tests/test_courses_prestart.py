"""Pre-start (Start all, Stop all, a session's scheduled start) against a stand-in hub API
(``course_web_support.StandInHub``) through the service's real ``HubClient``, without a hub
process or an engine: what the staff's summary says when servers are refused, fail to spawn, are
already running, or when the hub stops answering; that one server's failure never stops the
others; and what a stop-all says of servers that did not run or would not stop.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
from course_web_support import SERVICE_TOKEN, StandInHub, course_lab
from tornado.httpserver import HTTPServer

from jupyterhub_gpulab import clock
from jupyterhub_gpulab.courses import prestart
from jupyterhub_gpulab.courses.parse import parse_course
from jupyterhub_gpulab.courses.prestart import PrestartRun
from jupyterhub_gpulab.courses.store import CourseStore
from jupyterhub_gpulab.hubapi.client import HubClient

COURSE = parse_course({"slug": "ml101", "profiles": ["cpu"]})
STUDENTS = ["ann", "bob", "cy"]


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(prestart, "POLL_S", 0.02)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
async def hub():
    """The stand-in hub listening, and a client of it with the service's token."""
    standin = StandInHub(users={u: {"ml101"} for u in STUDENTS}, start_s=0.02)
    port = _port()
    server = HTTPServer(standin.app())
    server.listen(port, "127.0.0.1")
    standin.client = HubClient(f"http://127.0.0.1:{port}/hub/api", SERVICE_TOKEN, timeout=5)
    standin.server = server
    yield standin
    server.stop()


async def start(hub, users=STUDENTS, **kw) -> PrestartRun:
    run = PrestartRun(COURSE, list(users))
    opts = {"batch": 2, "retries": 2, "backoff_s": 0.01, "ready_timeout_s": 5, **kw}
    await run.start_all(hub.client, **opts)
    return run


async def test_every_server_started_is_ready_with_the_courses_profile(hub):
    run = await start(hub)
    assert run.done and run.summary() == "3 of 3 ready"
    assert all(hub.running(u, "ml101") for u in STUDENTS)
    assert hub.servers["ann"]["ml101"]["user_options"] == {"profile": "cpu"}
    assert run.as_dict()["counts"] == {"ready": 3}


async def test_a_refused_start_is_retried_and_counted_with_the_hubs_reason(hub):
    hub.refuse["bob"] = [(503, "No free slice of 'cpu'")] * 3  # every try refused
    hub.refuse["cy"] = [(429, "quota")]  # refused once, then started
    run = await start(hub)
    assert run.summary() == "2 of 3 ready, 1 refused: No free slice of 'cpu'"
    assert (run.servers["bob"].attempts, run.servers["bob"].status) == (3, 503)
    assert run.servers["cy"].state == "ready" and run.servers["cy"].attempts == 2
    # the staff's own words for the reason, where the page has them
    assert run.summary({"bob": "no free slice of the course's profile"}).endswith(
        "1 refused: no free slice of the course's profile"
    )


async def test_a_server_that_vanishes_while_starting_failed(hub):
    hub.fail_spawn.add("ann")
    run = await start(hub, retries=0)
    assert run.servers["ann"].state == "failed"
    assert run.summary() == (
        "2 of 3 ready, 1 failed: the server stopped while starting (its spawn failed; see the "
        "hub log)"
    )


async def test_a_hub_error_is_a_failure_not_a_refusal(hub):
    hub.refuse["cy"] = [(500, "Internal error")]
    run = await start(hub, retries=0)
    assert run.servers["cy"].state == "failed" and run.servers["cy"].reason == "Internal error"
    assert not run.interrupted


async def test_an_already_running_server_counts_once_it_answers(hub):
    hub.run("ann", "ml101")
    run = await start(hub)
    assert run.servers["ann"].state == "ready" and run.servers["ann"].attempts == 1
    assert run.summary() == "3 of 3 ready"


async def test_a_server_never_ready_fails_at_the_timeout(hub):
    hub.start_s = 30
    run = await start(hub, users=["ann"], retries=0, ready_timeout_s=0.3)
    assert run.summary() == "0 of 1 ready, 1 failed: not ready within 0.3 s"


async def test_a_token_that_may_not_list_asks_for_each_server(hub):
    hub.listing = False
    run = await start(hub)
    assert run.summary() == "3 of 3 ready"
    assert ("GET", "/hub/api/users/ann") in hub.calls


async def test_a_hub_that_stops_answering_interrupts_the_run(hub):
    hub.server.stop()
    run = await start(hub, retries=0)
    assert run.interrupted and run.done
    assert {p.state for p in run.servers.values()} == {"failed"}


async def test_stop_all_says_what_ran_and_what_would_not_stop(hub):
    hub.run("ann", "ml101")
    hub.run("bob", "ml101")
    hub.refuse_stop = {"bob": (500, "the spawner cannot stop it")}
    run = PrestartRun(COURSE, STUDENTS)
    await run.stop_all(hub.client)
    assert run.summary() == (
        "1 stopped, 1 was not running, 1 not stopped: the spawner cannot stop it"
    )
    assert not hub.running("ann", "ml101") and hub.running("bob", "ml101")
    assert run.as_dict()["counts"] == {"stopped": 1, "not-running": 1, "failed": 1}


async def test_a_stop_all_that_stopped_nothing_still_reads_as_a_stop(hub):
    hub.run("ann", "ml101")
    hub.refuse_stop = {"ann": (500, "the hub is busy")}
    run = PrestartRun(COURSE, ["ann"])
    await run.stop_all(hub.client)
    assert run.summary() == "0 stopped, 1 not stopped: the hub is busy"


def test_the_summary_names_servers_started_without_their_content():
    run = PrestartRun(COURSE, [f"s{i}" for i in range(8)])
    for p in run.servers.values():
        p.state = "ready"
    run.servers["s7"].state = "failed"
    run.servers["s7"].reason = "spawn failed"
    why = {f"s{i}": "failed: ~/ml101: no such branch" for i in range(6)}
    why["s7"] = "failed: ~/ml101: gone"  # not started: counted as failed, not here
    assert run.summary(unready=why) == (
        "1 of 8 ready, 6 started without their content (s0, s1, s2, s3, s4 and 1 more): "
        "failed: ~/ml101: no such branch, 1 failed: spawn failed"
    )
    assert run.summary(unready={"s0": "failed: x"}).startswith(
        "6 of 8 ready, 1 started without its content (s0): failed: x"
    )


async def test_a_scheduled_start_records_its_session_unless_cut_off(tmp_path, monkeypatch):
    lab = await course_lab(tmp_path, courses=[{"slug": "ml101", "profiles": ["cpu"]}],
                           users={"ann": ["ml101"], "ta1": ["ml101-staff"]})  # fmt: skip
    try:
        course = await lab.courses.course("ml101")
        store = CourseStore(lab.ledger.engine)
        session = clock.utcnow().replace(microsecond=0)
        assert store.begin_prestart("ml101", session)  # as the scheduled pass does
        run = await lab.courses.start_all(course, by="gpulab", session_start=session)
        again = await lab.courses.start_all(course, by="ta1")
        assert again is run  # a run in progress is not started twice
        while not run.done:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        finished_at, summary = store.prestarts("ml101")[session]
        assert finished_at is not None and summary == "1 of 1 ready"
        # the hub gone mid-run: the session's pre-start is not recorded as done
        later = session.replace(year=session.year + 1)
        assert store.begin_prestart("ml101", later)
        lab.hub.servers.clear()
        lab.hub.start_s = 30
        run = await lab.courses.start_all(course, by="gpulab", session_start=later)
        for _ in range(100):
            if lab.hub.servers:
                break
            await asyncio.sleep(0.02)
        lab._servers[0].stop()  # the hub stops answering while ann's server is starting
        while not run.done:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        assert run.interrupted
        assert store.prestarts("ml101")[later][0] is None  # the next pass resumes it
    finally:
        lab.stop()

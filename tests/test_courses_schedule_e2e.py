"""A course's timed work on a real hub, the gpulab service and real containers: an assignment is
collected at its deadline once; a hub killed with SIGKILL in the middle of a session's pre-start
is restarted and the pre-start resumes and finishes, run once; a course server that would pass
the course's GPU-hour budget is refused; the course's shared folder is in every course server,
read-only."""

from __future__ import annotations

import subprocess
import time
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from course_support import (
    LAB_IMAGE,
    GitServer,
    containers_of,
    read_home,
    running_course,
    work_of,
)
from e2e_support import require_docker
from hubtools import wait_for
from service_support import PREFIX, ledger_for, login, user_token, wait_for_service
from service_support import service_api as api

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("api_contract")]

ROSTER = ["u1", "u2", "u3"]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    require_docker()
    tmp = tmp_path_factory.mktemp("course-schedule")
    repo = GitServer(tmp / "git")
    repo.commit({"intro.py": "print('hello')\n"}, "week 1")
    shared = tmp / "shared"
    shared.mkdir()
    (shared / "data.csv").write_text("x,y\n1,2\n")
    shared.chmod(0o755)
    course = {
        "slug": "sched",
        "title": "Scheduling 101",
        "profiles": ["course-lab"],
        "content": [{"repo": repo.url, "dir": "sched"}],
        "shared_folder": str(shared),
    }
    try:
        with running_course(tmp, course, ROSTER, ["ta"], shared_root=str(tmp)) as hub:
            tokens = {u: user_token(hub, login(hub, u), u) for u in ("ta", "admin", "u1")}
            ledger = ledger_for(hub)
            yield hub, tokens, ledger
            ledger.close()
    finally:
        repo.stop()


def local(dt: datetime) -> str:
    """A lab-local wall-clock time as the record takes it (the test lab's zone is UTC)."""
    return dt.astimezone(timezone.utc).replace(tzinfo=None).isoformat(timespec="seconds")


def test_an_assignment_is_collected_at_its_deadline_once(lab):
    hub, tokens, _ = lab
    home = work_of(hub.node, "sched", "u1")  # the course work, where collect reads
    subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "-v", f"{home}:/home/jovyan", LAB_IMAGE,
         "sh", "-c", "mkdir -p ~/assignments/hw1 && echo 'answer' > ~/assignments/hw1/a.py"],
        check=True, capture_output=True,
    )  # fmt: skip
    due = datetime.now(timezone.utc) + timedelta(seconds=6)
    r = api(hub, tokens["ta"], "PUT", "courses/sched",
            json={"assignments": [{"name": "hw1", "due": local(due)}]})  # fmt: skip
    assert r.status_code == 200, r.text
    # the student's page says when it is collected
    page = login(hub, "u1").get(hub.url + PREFIX + "me", timeout=30).text
    assert "~/assignments/hw1" in page and "collected at" in page

    def collected():
        view = api(hub, tokens["ta"], "GET", "courses/sched").json()
        done = view["assignments"][0]["collected"]
        return view if done and done != "running" else None

    view = wait_for("the deadline's collect", collected, 60, every=1)
    assert view["assignments"][0]["collected"] == "1 of 3 submitted"
    time.sleep(6)  # three more passes of the schedule: nothing is collected again
    audit = api(hub, tokens["ta"], "GET", "courses/sched/audit").json()["audit"]
    assert [(a["who"], a["action"]) for a in audit].count(("schedule", "collect")) == 1
    folder = next(a for a in audit if a["action"] == "collect")["detail"]["report"]["u1"]["folder"]
    assert read_home(f"{hub.node}-course-sched", folder + "/a.py") == "answer\n"


def test_a_prestart_cut_off_by_a_killed_hub_resumes_after_the_restart(lab):
    hub, tokens, ledger = lab
    start = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(minutes=10)
    session = {"start": local(start), "end": local(start + timedelta(hours=1))}
    r = api(hub, tokens["ta"], "PUT", "courses/sched", json={"sessions": {"dates": [session]}})
    assert r.status_code == 200, r.text

    def begun():
        with ledger.engine.connect() as conn:
            return conn.execute(sa.text("SELECT finished_at FROM course_prestarts")).all()

    rows = wait_for("the pre-start to begin", begun, 30, every=1)
    assert rows[0][0] is None  # running
    hub.kill()  # SIGKILL, mid pre-start: its service exits by itself within a second
    hub.start()
    wait_for_service(hub)
    # the next service finds the run cut off (no heartbeat) and finishes it
    rows = wait_for(
        "the resumed run", lambda: [r for r in begun() if r[0] is not None], 240, hub, every=1
    )
    assert len(rows) == 1
    for u in ROSTER:
        hub.wait_ready(u, "sched", timeout=120)
        assert read_home(work_of(hub.node, "sched", u), "sched/intro.py") == "print('hello')\n"
    view = api(hub, tokens["ta"], "GET", "courses/sched").json()
    assert view["sessions"][0]["prestart"] == "3 of 3 ready", view["sessions"]
    starts = [a for a in view["audit"] if a["action"] == "start-all"]
    assert [a["who"] for a in starts] == ["schedule", "schedule"]  # begun, then resumed once
    # the shared folder is there, read-only
    cid = containers_of(hub.node, "sched")["u2"]
    r = subprocess.run(["docker", "exec", cid, "cat", "/home/jovyan/sched-shared/data.csv"],
                       capture_output=True, text=True)  # fmt: skip
    assert r.stdout == "x,y\n1,2\n", r.stderr
    r = subprocess.run(["docker", "exec", cid, "sh", "-c", "echo x > ~/sched-shared/new"],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode != 0 and "Read-only" in r.stderr
    # stopping them ends every allocation of the course's servers
    assert api(hub, tokens["ta"], "POST", "courses/sched/stop").status_code == 200
    wait_for("the servers to stop", lambda: not containers_of(hub.node, "sched"), 60, every=1)
    assert [a for a in ledger.open_allocations() if a.server_name == "sched"] == []


def test_a_course_server_past_the_course_budget_is_refused(lab):
    hub, tokens, _ = lab
    r = api(hub, tokens["admin"], "PUT", "courses/sched",
            json={"profiles": ["course-seat"], "gpu_hours": 0})  # fmt: skip
    assert r.status_code == 200, r.text
    time.sleep(6)  # the hub's hook re-reads the courses every 5 s
    r = hub.spawn("u3", name="sched")
    assert r.status_code == 429, r.text
    assert "used 0.0 of its 0 GPU-hours" in r.json()["message"]
    assert not containers_of(hub.node, "sched")

"""A course problem stays a course problem (issue 20.6): a declared course naming a profile the lab
renamed, a declared record that does not parse, a stored record that no longer does — each is
marked as needing attention (on its page, in the API, in the log, in ``gpulab check-config``)
while the hub, the service and every other course keep running. Against a real hub starting the
real (managed) service; no Docker engine."""

from __future__ import annotations

import json
import time

import pytest
import requests
import sqlalchemy as sa
from service_support import (
    PREFIX,
    ledger_for,
    login,
    make_hub,
    start_hub,
    user_token,
    wait_for_service,
)

from jupyterhub_gpulab.courses.parse import parse_course
from jupyterhub_gpulab.courses.store import CourseStore
from jupyterhub_gpulab.ledger.schema import courses as courses_table

pytestmark = pytest.mark.usefixtures("api_contract")

#: "gpu-old" was the lab's profile when dl201 was stored; the admin renamed it since.
DECLARED = [
    {"slug": "ml101", "profiles": ["cpu"]},
    {"slug": "dl201", "profiles": ["gpu-old"]},
    {"slug": "hw301", "assignments": [{"name": "hw1", "due": "0001-01-01T00:00"}]},
]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("attention-hub")
    hub = make_hub(
        workdir,
        extra=f"""
c.GPULabCourses.courses = {DECLARED!r}
from jupyterhub_gpulab.courses.hubhook import configure_courses
configure_courses(c)
""",
    )
    ledger = ledger_for(hub)
    try:
        store = CourseStore(ledger.engine)
        store.put(parse_course({"slug": "dl201", "profiles": ["gpu-old"]}), by="config")
        # a record an older version stored, which no longer parses
        with ledger.engine.begin() as conn:
            conn.execute(
                courses_table.insert().values(
                    slug="old9", record=json.dumps({"slug": "old9", "profiles": 5}),
                    origin="admin", created_at=sa.func.now(), updated_at=sa.func.now(),
                    updated_by="admin",
                )
            )  # fmt: skip
    finally:
        ledger.close()
    start_hub(workdir, hub=hub)
    try:
        wait_for_service(hub)
        yield hub
    finally:
        hub.stop()


@pytest.fixture(scope="module")
def admin(hub):
    return login(hub, "admin")


@pytest.fixture(scope="module")
def api(hub, admin):
    """Headers of the service API as the hub's admin."""
    return {"Authorization": f"token {user_token(hub, admin, 'admin')}"}


def test_the_lab_runs_and_says_which_courses_need_attention(hub, api):
    time.sleep(1)  # the hub would exit with its service: it must still be up
    assert hub.proc.poll() is None, hub.log_tail()
    r = requests.get(hub.url + PREFIX + "api/courses", headers=api, timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    assert {c["slug"] for c in body["courses"]} == {"ml101", "dl201"}
    attention = body["attention"]
    assert "profile 'gpu-old' is not one of the lab's" in " ".join(attention["dl201"])
    assert "must lie in the years 2000 to 2099" in " ".join(attention["hw301"])
    assert "stored record cannot be read" in " ".join(attention["old9"])
    assert "ml101" not in attention
    ml = next(c for c in body["courses"] if c["slug"] == "ml101")
    assert ml["attention"] == []
    lines = hub.log_path.read_text(errors="replace").splitlines()
    for slug in ("dl201", "hw301", "old9"):
        assert any(
            line.startswith("[W ") and f"Course {slug} needs attention" in line for line in lines
        ), slug


def test_the_course_page_says_why_and_a_broken_record_is_a_404_that_says_why(hub, admin, api):
    r = admin.get(hub.url + PREFIX + "courses/dl201", timeout=60)
    assert r.status_code == 200, r.text[:500]
    assert "course-attention" in r.text and "gpu-old" in r.text
    r = admin.get(hub.url + PREFIX + "courses/ml101", timeout=60)
    assert r.status_code == 200 and "course-attention" not in r.text
    r = admin.get(hub.url + PREFIX + "courses", timeout=60)
    assert r.status_code == 200 and 'data-course="hw301"' in r.text
    r = requests.get(hub.url + PREFIX + "api/courses/old9", headers=api, timeout=30)
    assert r.status_code == 404
    assert "cannot be used until an admin fixes it" in r.json()["message"]


def test_check_config_names_the_course(hub, capsys):
    from jupyterhub_gpulab.cli import main

    assert main(["check-config", "-f", str(hub.config_path)]) == 1
    err = capsys.readouterr().err
    assert "profile 'gpu-old' is not one of the lab's" in err
    assert "assignments[0].due must lie in the years 2000 to 2099" in err
    assert hub.api("GET", "/").status_code == 200  # the hub runs on

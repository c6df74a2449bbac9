"""The course journey on the real three-node test Swarm (``swarm_course_support``): a real hub
running GPUSwarmSpawner, the gpulab service, node agents, a real git repository (``git daemon`` on
the host's end of the nodes' network), course servers as Swarm services on the nodes, and their
volumes with Docker's local driver, each on one node.

One hub for the module; the tests run in order, as an instructor's week does: Start all (each
student's course server a Swarm service, pinned beside its course volume), Distribute (content in
each student's course-work volume on the node that holds it), a student's work, Collect (into the
staff folder, wherever it lives), the TA's own course server beside the staff folder (feedback
written there as the image's user), Return (feedback in the student's course volume), and a
restart that finds the student's work again. The personal home is never mounted in a course
server (test at the end), as on one Docker host (``test_courses_e2e.py``, the single-engine model).
"""

from __future__ import annotations

import pytest
from course_support import GitServer, course_api, wait_prestart
from service_support import login, user_token
from swarm_course_support import (
    course_services,
    ensure_image_on_nodes,
    exec_in,
    mounts_of,
    node_of_volume,
    read_on_node,
    remove_node_volumes,
    swarm_course_hub,
    write_on_node,
)
from swarm_support import HOST_IP, require_swarm

pytestmark = [pytest.mark.docker, pytest.mark.swarm, pytest.mark.usefixtures("api_contract")]

SLUG = "ml101"
STUDENTS = ["s1", "s2", "s3"]
WORKERS = ["gpulab-swn2", "gpulab-swn3"]
WORKERS_ONLY = 'c.GPUSwarmSpawner.extra_placement_spec = {"constraints": ["node.role==worker"]}\n'
#: s1 did course work in a personal home on gpulab-swn2 before course storage existed
S1_HOME_NODE = "gpulab-swn2"
#: s2's personal home, on gpulab-swn3, holds a private file no course server may show
S2_HOME_NODE = "gpulab-swn3"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    require_swarm()
    ensure_image_on_nodes()
    tmp = tmp_path_factory.mktemp("swarmcourses")
    repo = GitServer(tmp / "git", host=HOST_IP)
    repo.commit({"intro.py": "print('week 1')\n"}, "week 1")
    course = {
        "slug": SLUG,
        "title": "Machine learning 101",
        "roster_group": SLUG,
        "staff_group": f"{SLUG}-staff",
        "profiles": ["course-lab", "course-seat"],
        "content": [{"repo": repo.url, "branch": "main", "dir": SLUG}],
    }
    # as a lab would: user servers on the workers, none on the manager
    hub = swarm_course_hub(tmp, course, extra=WORKERS_ONLY)
    v = Volumes(hub.prefix)
    write_on_node(S1_HOME_NODE, v.home("s1"), "assignments/hw0/old.py", "mine\n")
    write_on_node(S2_HOME_NODE, v.home("s2"), "secret.txt", "my own diary\n")
    try:
        hub.start(timeout=120)
        for u in STUDENTS:
            hub.create_user(u, [SLUG])
        hub.create_user("ta1", [f"{SLUG}-staff"])
        tokens = {u: user_token(hub, login(hub, u), u) for u in ("ta1", "s1")}
        yield hub, repo, tokens, v
    finally:
        hub.close()
        repo.stop()
        remove_node_volumes(hub.prefix)


class Volumes:
    """The names of the lab's volumes (``course_support.course_lines``, escaped as the lab
    escapes user names)."""

    def __init__(self, prefix: str):
        from jupyterhub_gpulab.courses.config import GPULabCourses

        self.settings = GPULabCourses(
            home_volume=f"{prefix}-home-{{username}}",
            work_volume=f"{prefix}-work-{{slug}}--{{username}}",
            course_volume=f"{prefix}-course-{{slug}}",
        )

    def home(self, user: str) -> str:
        return self.settings.home_of(user)

    def work(self, user: str) -> str:
        return self.settings.work_of(SLUG, user)

    @property
    def staff(self) -> str:
        return self.settings.staff_of(SLUG)


def one_node(volume: str) -> str:
    """The one node holding ``volume`` (a second copy elsewhere fails the test)."""
    nodes = node_of_volume(volume)
    assert len(nodes) == 1, f"{volume} is on {nodes or 'no node'}"
    return nodes[0]


def test_start_all_runs_each_course_server_as_a_service_beside_its_course_volume(lab):
    hub, repo, tokens, v = lab
    r = course_api(hub, tokens["ta1"], "POST", f"courses/{SLUG}/start")
    assert r.status_code == 202, r.text
    p = wait_prestart(hub, tokens["ta1"], SLUG)
    assert p["summary"].startswith("3 of 3 ready"), p
    services = course_services(hub, SLUG)
    assert sorted(services) == STUDENTS
    for u, name in services.items():
        node = hub.task(name)["node"]
        assert node in WORKERS
        # the course-work volume is on the node the server runs on, and only there
        assert one_node(v.work(u)) == node, u
        assert read_on_node(node, v.work(u), f"{SLUG}/intro.py") == "print('week 1')\n", u
    # s1's course folders of the personal home were carried over, on the home's node, and the
    # server was pinned there
    assert hub.task(services["s1"])["node"] == S1_HOME_NODE
    assert read_on_node(S1_HOME_NODE, v.work("s1"), "assignments/hw0/old.py") == "mine\n"
    assert read_on_node(S1_HOME_NODE, v.home("s1"), "assignments/hw0/old.py") == "mine\n"


def test_distribute_pulls_into_each_course_volume_on_its_node(lab):
    hub, repo, tokens, v = lab
    repo.commit({"week2.py": "print('week 2')\n"}, "week 2")
    r = course_api(hub, tokens["ta1"], "POST", f"courses/{SLUG}/distribute")
    assert r.status_code == 200, r.text
    assert r.json()["message"] == "Pulled into 3 of 3 running servers.", r.json()
    assert all(line.startswith("pulled at ") for line in r.json()["report"].values()), r.json()
    for u in STUDENTS:
        assert read_on_node(one_node(v.work(u)), v.work(u), f"{SLUG}/week2.py") == (
            "print('week 2')\n"
        ), u


def test_collect_brings_each_students_work_to_the_staff_folder(lab):
    hub, repo, tokens, v = lab
    services = course_services(hub, SLUG)
    for u in ("s1", "s2"):
        done = exec_in(
            hub,
            services[u],
            f"mkdir -p ~/assignments/hw1 && echo 'answer of {u}' > ~/assignments/hw1/answer.py",
        )
        assert done.returncode == 0, done.stderr
    r = course_api(
        hub, tokens["ta1"], "POST", f"courses/{SLUG}/collect", json={"assignment": "hw1"}
    )
    assert r.status_code == 200, r.text
    report = r.json()["report"]
    assert r.json()["message"] == "2 of 3 submitted.", r.json()
    assert report["s3"] == {"state": "missing", "reason": "no assignments/hw1 folder"}
    staff_node = one_node(v.staff)
    for u in ("s1", "s2"):
        assert report[u]["state"] == "submitted", report
        got = read_on_node(staff_node, v.staff, report[u]["folder"] + "/answer.py")
        assert got == f"answer of {u}\n", u


def test_the_ta_writes_feedback_beside_the_staff_folder_and_return_delivers_it(lab):
    hub, repo, tokens, v = lab
    r = hub.spawn("ta1", name=SLUG)
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("ta1", SLUG, timeout=180)
    try:
        ta = course_services(hub, SLUG)["ta1"]
        # the TA's course server runs where the staff folder is (collect made it there)
        assert hub.task(ta)["node"] == one_node(v.staff)
        assert mounts_of(hub, ta)[f"/home/jovyan/{SLUG}-staff"] == v.staff
        done = exec_in(
            hub,
            ta,
            f"set -e; cd ~/{SLUG}-staff; ls collected/hw1/s1/*/answer.py;"
            " mkdir -p feedback/hw1/s1 && echo 'well done' > feedback/hw1/s1/notes.txt",
        )
        assert done.returncode == 0, done.stderr
        r = course_api(
            hub, tokens["ta1"], "POST", f"courses/{SLUG}/return", json={"assignment": "hw1"}
        )
        assert r.status_code == 200, r.text
        assert r.json()["report"]["s1"] == {"state": "returned", "files": 1}, r.json()
        node = one_node(v.work("s1"))
        assert read_on_node(node, v.work("s1"), "feedback/hw1/notes.txt") == "well done\n"
        # the student sees it in their running course server
        seen = exec_in(hub, course_services(hub, SLUG)["s1"], "cat ~/feedback/hw1/notes.txt")
        assert seen.stdout == "well done\n", seen.stderr
    finally:
        hub.stop_server("ta1", SLUG)


def test_a_restarted_course_server_runs_where_its_work_is(lab):
    """s3 had no volume anywhere: Swarm placed its first server, whose mount made the course
    volume there. Its restarts go back to that node, though the other worker is emptier (Swarm
    would spread an unpinned task there), and find its files."""
    hub, repo, tokens, v = lab
    node = one_node(v.work("s3"))
    write = exec_in(hub, course_services(hub, SLUG)["s3"], "echo kept > ~/notes.txt")
    assert write.returncode == 0, write.stderr
    services = course_services(hub, SLUG)
    away = [u for u in ("s1", "s2") if hub.task(services[u])["node"] != node]
    for u in away:  # the other worker runs none of this lab's servers now
        hub.stop_server(u, SLUG)
    for _ in range(2):
        hub.stop_server("s3", SLUG)
        r = hub.spawn("s3", name=SLUG)
        assert r.status_code in (201, 202), r.text
        hub.wait_ready("s3", SLUG, timeout=180)
        name = course_services(hub, SLUG)["s3"]
        spec = hub.service(name)["Spec"]["TaskTemplate"]["Placement"]["Constraints"]
        assert hub.task(name)["node"] == node and spec[0].startswith("node.id=="), spec
        assert exec_in(hub, name, "cat ~/notes.txt").stdout == "kept\n"
    assert one_node(v.work("s3")) == node  # no second, empty copy on another node
    for u in away:
        assert hub.spawn(u, name=SLUG).status_code in (201, 202)
        hub.wait_ready(u, SLUG, timeout=180)


def test_a_gpu_course_server_takes_its_slice_on_the_node_of_its_work_or_is_told_why(lab):
    """``course-seat`` is a T4 seat, on gpulab-swn3 only. s2's work is on gpulab-swn3: the seat
    is claimed there. s1's work is on gpulab-swn2 (an A100 in MIG instances, no seats): refused,
    saying why, rather than a seat on gpulab-swn3 beside a new, empty course volume."""
    hub, repo, tokens, v = lab
    assert one_node(v.work("s2")) == S2_HOME_NODE == "gpulab-swn3"
    hub.stop_server("s2", SLUG)
    r = hub.spawn("s2", {"profile": "course-seat"}, name=SLUG)
    assert r.status_code in (201, 202), r.text
    state = hub.wait_ready("s2", SLUG, timeout=180)["state"]
    name = course_services(hub, SLUG)["s2"]
    assert hub.task(name)["node"] == "gpulab-swn3"
    assert hub.env_of(name)["NVIDIA_VISIBLE_DEVICES"] != "void" and state["gpulab_slice"]
    assert exec_in(hub, name, f"cat ~/{SLUG}/week2.py").stdout == "print('week 2')\n"
    assert one_node(v.work("s2")) == "gpulab-swn3"
    hub.stop_server("s1", SLUG)
    r = hub.spawn("s1", {"profile": "course-seat"}, name=SLUG)
    assert r.status_code == 503, r.text
    assert "keeps its files on gpulab-swn2, so it runs there only" in r.json()["message"], r.text
    led = hub.ledger()
    assert led.open_allocations(user="s1") == []
    led.close()
    assert node_of_volume(v.work("s1")) == ["gpulab-swn2"]  # no copy made on gpulab-swn3
    r = hub.spawn("s1", name=SLUG)  # the course's CPU profile: back beside its work
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("s1", SLUG, timeout=180)
    assert hub.task(course_services(hub, SLUG)["s1"])["node"] == "gpulab-swn2"


def test_no_course_server_mounts_the_personal_home(lab):
    hub, repo, tokens, v = lab
    services = course_services(hub, SLUG)
    assert set(STUDENTS) <= set(services)
    for u in STUDENTS:
        mounts = mounts_of(hub, services[u])
        assert mounts["/home/jovyan"] == v.work(u), mounts
        assert v.home(u) not in mounts.values(), mounts
    # s2's private file is in their personal home on gpulab-swn3, and nowhere in the course
    # server, wherever it runs
    assert read_on_node(S2_HOME_NODE, v.home("s2"), "secret.txt") == "my own diary\n"
    look = exec_in(
        hub,
        services["s2"],
        "ls -a ~; test -e ~/home && echo HOME-MOUNTED; test -e ~/secret.txt && echo SEEN; true",
    )
    assert look.returncode == 0 and SLUG in look.stdout.split(), look  # the course work
    assert "secret.txt" not in look.stdout and "HOME-MOUNTED" not in look.stdout, look.stdout
    assert "SEEN" not in look.stdout, look.stdout

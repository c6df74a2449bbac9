"""Which Swarm node a course server runs on (:mod:`jupyterhub_gpulab.courses.coursenode`), without
an engine: :class:`~jupyterhub_gpulab.backends.volumes.NodeVolumes` over one folder tree per node
(:class:`~jupyterhub_gpulab.courses.storage.LocalFolders`), and the pre-spawn hook's storage step
(:func:`~jupyterhub_gpulab.courses.hubhook._prepare_storage`) for a Swarm spawner's shape."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from jupyterhub_gpulab.backends.volumes import NodeVolumes
from jupyterhub_gpulab.courses.config import GPULabCourses
from jupyterhub_gpulab.courses.coursenode import course_node, first_node
from jupyterhub_gpulab.courses.hubhook import _prepare_storage
from jupyterhub_gpulab.courses.parse import parse_course
from jupyterhub_gpulab.courses.storage import Entry, LocalFolders

NODES = ("n1", "n2", "n3")


@pytest.fixture
def roots(tmp_path):
    found = {}
    for n in NODES:
        (tmp_path / n).mkdir()
        found[n] = LocalFolders(str(tmp_path / n))
    return found


def put(roots, node: str, volume: str, path: str = "a.txt", data: bytes = b"x\n") -> None:
    roots[node].write_tree(volume, path.rsplit("/", 1)[0] if "/" in path else "",
                           [Entry(path.rsplit("/", 1)[-1], data, 1.0)], (0, 0))  # fmt: skip


def test_the_staff_folder_then_the_work_then_the_home_decide_the_node(roots):
    files = NodeVolumes(roots)
    args = {"work": "w", "staff_folder": "staff", "home": "h"}
    assert course_node(files, **args) is None  # nothing yet: Swarm places it
    put(roots, "n3", "h")
    assert course_node(NodeVolumes(roots), **args) == "n3"  # beside the home to carry over
    put(roots, "n2", "w")
    assert course_node(NodeVolumes(roots), **args) == "n2"  # the course work, over the home
    put(roots, "n1", "staff")
    assert course_node(NodeVolumes(roots), **args) == "n1"  # staff: beside the staff folder
    assert course_node(NodeVolumes(roots), **{**args, "staff_folder": None}) == "n2"
    # one Docker host: no node to choose
    assert course_node(roots["n1"], **args) is None


def swarm_spawner(user: str, roots, *, driver: str = "", kind: str = "service"):
    backend = SimpleNamespace(storage=lambda image, near=None: NodeVolumes(roots, near=near))
    return SimpleNamespace(
        user=SimpleNamespace(name=user),
        object_type=kind,
        image="img",
        volume_driver=driver,
        course_node="stale",
        lab_backend=lambda: backend,
        format_volume_name=lambda template, spawner: template.format(username=spawner.user.name),
    )


def test_a_first_start_carries_the_home_over_on_its_node_and_pins_the_server_there(roots):
    settings = GPULabCourses(home_volume="home-{username}")
    course = parse_course({"slug": "dl101"})
    put(roots, "n3", "home-ann", "assignments/hw0/old.py", b"mine\n")
    sp = swarm_spawner("ann", roots)
    done = _prepare_storage(sp, course, settings, "home-{username}", staff=False)
    assert done["assignments"] == "copied"
    assert sp.course_node == "n3"
    work = settings.work_of("dl101", "ann")
    assert [n for n in NODES if roots[n].exists(work)] == ["n3"]
    entries, _ = roots["n3"].read_tree(work, "assignments/hw0", 1 << 20)
    assert [e.data for e in entries if e.data] == [b"mine\n"]


def test_a_staff_server_runs_where_the_staff_folder_is_made(roots):
    settings = GPULabCourses()
    course = parse_course({"slug": "dl101"})
    put(roots, "n2", settings.staff_of("dl101"), "collected/hw1/x.py")
    sp = swarm_spawner("ta1", roots)
    _prepare_storage(sp, course, settings, None, staff=True)
    assert sp.course_node == "n2"
    # a first staff start with no course volume anywhere: nothing is made on a node chosen
    # blindly (the first node engine may run no servers); the server's mount makes it
    other = parse_course({"slug": "cv200"})
    sp = swarm_spawner("ta2", roots)
    _prepare_storage(sp, other, settings, None, staff=True)
    assert sp.course_node is None
    assert not any(roots[n].exists(settings.staff_of("cv200")) for n in NODES)
    # with the TA's own course work on n3, the staff folder is made beside it
    put(roots, "n3", settings.work_of("cv200", "ta2"))
    _prepare_storage(sp, other, settings, None, staff=True)
    assert sp.course_node == "n3" and roots["n3"].exists(settings.staff_of("cv200"))
    assert [n for n in NODES if roots[n].exists(settings.staff_of("cv200"))] == ["n3"]


def test_collect_makes_a_staff_folder_beside_the_first_students_course_work(roots):
    files = NodeVolumes(roots)
    assert first_node(files, ["w-ann", "w-bob"]) is None
    put(roots, "n3", "w-bob")
    put(roots, "n2", "w-cyd")
    assert first_node(NodeVolumes(roots), ["w-ann", "w-bob", "w-cyd"]) == "n3"
    assert first_node(roots["n1"], ["w-bob"]) is None  # one host: no node


def test_nothing_to_find_leaves_the_placement_to_swarm_and_a_shared_driver_pins_nothing(roots):
    settings = GPULabCourses()
    course = parse_course({"slug": "dl101"})
    sp = swarm_spawner("bob", roots)
    _prepare_storage(sp, course, settings, None, staff=False)
    assert sp.course_node is None  # the stale value of an earlier start is not kept
    put(roots, "n1", settings.work_of("dl101", "bob"))
    shared = swarm_spawner("bob", roots, driver="nfs-driver")
    _prepare_storage(shared, course, settings, None, staff=False)
    assert shared.course_node == "stale"  # untouched: every node sees the volume
    pinned = swarm_spawner("bob", roots)
    _prepare_storage(pinned, course, settings, None, staff=False)
    assert pinned.course_node == "n1"


def test_the_copy_containers_use_the_course_profiles_image_not_the_spawners_default(roots):
    """A lab without a registry (the demo: ``pull_policy = "never"``) has no DockerSpawner default
    image; the hook runs before the profile's image is applied, so copying a student's course
    folders with ``spawner.image`` failed every course start ("No such image")."""
    from jupyterhub_gpulab.lab.profile import Profile

    profiles = {
        "pytorch": Profile(slug="pytorch", display_name="PyTorch", image="gpulab/pytorch:cpu"),
        "cpu": Profile(slug="cpu", display_name="CPU", image="gpulab/base:1"),
    }
    asked = []
    backend = SimpleNamespace(
        storage=lambda image, near=None: asked.append(image) or NodeVolumes(roots, near=near)
    )
    lab = SimpleNamespace(profile=profiles.get)
    sp = SimpleNamespace(
        user=SimpleNamespace(name="ann"),
        object_type="container",
        image="quay.io/jupyterhub/singleuser:6.1",  # DockerSpawner's default: not on this engine
        user_options={},
        lab_backend=lambda: backend,
        runtime=lambda: SimpleNamespace(lab=lab),
        format_volume_name=lambda template, spawner: template.format(username=spawner.user.name),
    )
    settings = GPULabCourses(home_volume="home-{username}")
    course = parse_course({"slug": "dl101", "profiles": ["pytorch", "cpu"]})
    put(roots, "n1", "home-ann", "assignments/hw0/old.py", b"mine\n")
    _prepare_storage(sp, course, settings, "home-{username}", staff=False)
    assert asked and set(asked) == {"gpulab/pytorch:cpu"}  # the course's first profile
    asked.clear()
    sp.user_options = {"profile": "cpu"}  # the start's own profile, when it names one
    _prepare_storage(sp, course, settings, None, staff=True)
    assert set(asked) == {"gpulab/base:1"}
    asked.clear()
    _prepare_storage(sp, course, GPULabCourses(helper_image="helper:1"), None, staff=True)
    assert set(asked) == {"helper:1"}  # the admin's choice wins

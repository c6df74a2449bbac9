"""The seed's own lab, started (issue 23 item 4): ``examples/p40-lab/jupyterhub_config.py`` with
its declared twin (``GPULAB_P40_DECLARED=1``) seats 24 students, one P40 seat each, and refuses
the 25th at once, saying why, with nothing claimed for him. Its PyTorch and TensorFlow images
are let onto the P40 by their labels, and its course is one the service will save.

The example file itself is loaded (as ``gpulab check-config`` and the hub load it), so its
inventory, profiles and students' policy are the ones tested. Everything is real but the engine:
JupyterHub's ``User``/``orm`` objects and gpulab's spawner, the ledger on SQLite; only
DockerSpawner's ``docker()`` seam answers, from a dict (tests/enginefree_support.py). The image's
labels are those ``images/build-image.sh --variant cuda12-legacy`` writes, so the image gate
admits the Pascal PyTorch onto the P40 as it would on the host."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from enginefree_support import NO_ENGINE, spawner_maker
from images_support import lock
from jupyterhub import orm

from jupyterhub_gpulab.courses.access import roster_profile_problems
from jupyterhub_gpulab.courses.config import GPULabCourses
from jupyterhub_gpulab.errors import SpawnRefused
from jupyterhub_gpulab.lab import imagelabels
from jupyterhub_gpulab.lab.config import GPULab, load_config_file
from jupyterhub_gpulab.lab.images import check_profiles
from jupyterhub_gpulab.spawner.backendbase import EngineBackend
from jupyterhub_gpulab.spawner.runtime import forget_runtimes, get_runtime

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "p40-lab" / "jupyterhub_config.py"
#: What torch 2.7.1+cu126 says of its build (torch.version.cuda, torch._C._cuda_getArchFlags()).
CU126_ARCHS = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]


def legacy_torch_labels() -> dict[str, str]:
    """The labels build-image.sh writes on gpulab/pytorch:<v>-cuda12-legacy."""
    return imagelabels.labels_for(
        "pytorch",
        "cuda12-legacy",
        lock("pytorch-cuda12-legacy.txt"),
        arch_min=imagelabels.lowest_arch(CU126_ARCHS),
        cuda_version="12.6",
    )


@pytest.fixture
def example(tmp_path, monkeypatch):
    """The example file loaded as the hub loads it, with the declared P40."""
    monkeypatch.setenv("GPULAB_P40_DECLARED", "1")
    monkeypatch.setenv("GPULAB_STATE_DIR", str(tmp_path))
    return load_config_file(EXAMPLE)


@pytest.fixture
def p40(example):
    """The example's lab: ``(make, ledger, profile)``, ``make(user, groups)`` giving a spawner."""
    config = example
    config.GPULab.node_name = "p40-host"
    config.DockerSpawner.pull_policy = "never"
    config.DockerSpawner.client_kwargs = NO_ENGINE
    rt = get_runtime(GPULab(config=config))
    rt.reconciled = True  # reconcile lists containers on an engine: there is none
    profile = rt.lab.profile("pytorch-seat")
    EngineBackend._label_cache[profile.image] = (time.monotonic(), legacy_torch_labels())
    db = orm.new_session_factory("sqlite://")()
    try:
        yield spawner_maker(config, db), rt.ledger, profile
    finally:
        EngineBackend._label_cache.clear()
        forget_runtimes()
        db.close()


async def test_24_students_get_a_seat_each_and_the_25th_is_refused_at_once_saying_why(p40):
    make, ledger, profile = p40
    assert profile.default  # a start without a choice runs the PyTorch seat
    students = [make(f"student{i}", ["students"]) for i in range(1, 26)]
    for sp in students[:24]:
        sp.user_options = {}
        assert await sp.start() == ("127.0.0.1", 49153)
    held = ledger.open_allocations()
    assert sorted(a.user for a in held) == sorted(f"student{i}" for i in range(1, 25))
    assert len({a.slice_id for a in held}) == 24  # 24 distinct seats, none given twice
    assert {a.slice_id for a in held} == {sp.slice_id for sp in students[:24]}

    last = students[24]
    last.user_options = {}
    began = time.monotonic()
    with pytest.raises(SpawnRefused) as e:
        await last.start()
    took = time.monotonic() - began
    assert took < 2.0, f"the refusal took {took:.1f} s"
    assert e.value.status_code == 503 and e.value.reason == "no-free-slice"
    assert "No free" in e.value.message and "0 of 24 free" in e.value.message, e.value.message
    assert "waitlist" in e.value.message.lower(), e.value.message  # and what he can do
    # nothing was claimed or created for him
    assert last.engine_calls == [] and last.allocation_id is None
    assert len(ledger.open_allocations()) == 24


async def test_a_student_holding_a_seat_is_refused_a_second_one(p40):
    make, ledger, _profile = p40
    sp = make("student1", ["students"])
    sp.user_options = {}
    await sp.start()
    sp.user._new_orm_spawner("second", "second")  # a named server of his
    again = sp.user._new_spawner("second", spawner_class=type(sp))
    again.user_options = {"profile": "pytorch-seat"}
    with pytest.raises(SpawnRefused) as e:
        await again.start()
    assert e.value.status_code == 429 and e.value.reason == "quota"
    assert "the most your groups allow at once (1)" in e.value.message, e.value.message
    assert again.engine_calls == [] and len(ledger.open_allocations()) == 1


def test_its_pytorch_and_tensorflow_images_run_on_the_p40_and_a_cuda_13_one_would_not(example):
    lab = GPULab(config=example).load()
    assert {p.slug for p in lab.profiles if p.wants_gpu} == {"pytorch-seat", "tensorflow-seat"}
    by_image = {
        lab.profile("pytorch-seat").image: legacy_torch_labels(),
        lab.profile("tensorflow-seat").image: imagelabels.labels_for(
            "tensorflow", "cuda", lock("tensorflow-cuda.txt")
        ),
    }
    assert check_profiles(lab.profiles, lab.inventory.slices, by_image.__getitem__) == ([], [])
    # the CUDA 13 PyTorch in the seat's place: check-config says no seat can run it
    cuda13 = imagelabels.labels_for("pytorch", "cuda", lock("pytorch-cuda.txt"))
    errors, _ = check_profiles(lab.profiles, lab.inventory.slices, lambda image: cuda13)
    assert any("pytorch-seat" in e and "6.1" in e for e in errors), errors


def test_its_course_is_one_the_service_saves(example):
    lab = GPULab(config=example).load()
    [course] = GPULabCourses(config=example).declared({p.slug for p in lab.profiles})
    assert (course.roster_group, course.staff_group) == ("dl101", "dl101-staff")
    assert roster_profile_problems(course, lab) == []  # its roster may start its profile
    groups = example.JupyterHub.load_groups
    assert set(groups["dl101"]["users"]) <= set(groups["students"]["users"])
    assert groups["dl101-staff"]["users"]

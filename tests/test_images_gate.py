"""An image never lands on a GPU it cannot use: image labels → requirements → the one slice rule,
the refusal's words, the spawn form and ``gpulab check-config``. No engine needed (the hub tests
in ``test_images_e2e.py`` run the same gate on a real hub)."""

from __future__ import annotations

import pytest
from images_support import P40_LAB, cuda13_labels, lock

from jupyterhub_gpulab.inventory.declared import load_declared
from jupyterhub_gpulab.inventory.model import SliceKind, SliceRequest
from jupyterhub_gpulab.lab import imagelabels, images
from jupyterhub_gpulab.lab.profiles import load_profiles
from jupyterhub_gpulab.spawner.form import form_rows


def test_the_cuda_locks_resolve_with_hashes_and_name_their_cuda_major():
    for name, major in [("pytorch-cuda.txt", 13), ("tensorflow-cuda.txt", 12)]:
        lines = lock(name)
        pins = imagelabels.pins(lines)
        assert imagelabels.cuda_major_of(lines) == major, name
        # every pinned package carries at least one sha256 (pip --require-hashes)
        text = "\n".join(lines)
        blocks = [b for b in text.split("\n") if "==" in b and not b.startswith("#")]
        assert len(blocks) == len(pins) and len(pins) > 100
        assert text.count("--hash=sha256:") >= len(pins)
    assert imagelabels.pins(lock("pytorch-cpu.txt"))["torch"] == "2.13.0+cpu"
    assert imagelabels.cuda_major_of(lock("pytorch-cpu.txt")) is None
    # a framework lock only adds to the base image's venv: every base pin is the same there
    base = imagelabels.pins(lock("base.txt"))
    for name in (
        "pytorch-cpu.txt",
        "pytorch-cuda.txt",
        "tensorflow-cpu.txt",
        "tensorflow-cuda.txt",
    ):
        fw = imagelabels.pins(lock(name))
        assert {k: fw.get(k) for k in base} == base, name


def test_labels_state_versions_cuda_major_driver_and_compute_capability():
    labels = cuda13_labels()
    assert labels[images.LABEL_FRAMEWORK + "torch"] == "2.13.0"
    assert labels[images.LABEL_CUDA] == "13"
    assert labels[images.LABEL_MIN_DRIVER] == "580.65.06"
    assert labels[images.LABEL_MIN_CC] == "7.5"
    tf = imagelabels.labels_for("tensorflow", "cuda", lock("tensorflow-cuda.txt"))
    assert (tf[images.LABEL_CUDA], tf[images.LABEL_MIN_DRIVER]) == ("12", "525.60.13")
    assert tf[images.LABEL_MIN_CC] == "6.0"
    # the installed framework's own architecture list raises the floor, never lowers it
    higher = imagelabels.labels_for("tensorflow", "cuda", lock("tensorflow-cuda.txt"), (8, 0))
    assert higher[images.LABEL_MIN_CC] == "8.0"
    assert imagelabels.lowest_arch(["sm_75", "sm_80", "sm_120a", "compute_90"]) == (7, 5)
    cpu = imagelabels.labels_for("pytorch", "cpu", lock("pytorch-cpu.txt"))
    assert images.LABEL_CUDA not in cpu and cpu[images.LABEL_SEAT_CAP] == "framework"
    assert images.requirements_from_labels("x", cpu).needs_gpu_facts is False


def test_requirements_read_back_and_bad_labels_are_named():
    need = images.requirements_from_labels("img", cuda13_labels())
    assert need.min_driver == (580, 65, 6) and need.min_compute_capability == (7, 5)
    assert (
        need.describe() == "CUDA 13 needs NVIDIA driver >= 580.65.06 and compute capability >= 7.5"
    )
    assert images.requirements_from_labels("plain", None) == images.ImageRequirements("plain")
    with pytest.raises(ValueError, match="cuda.min-compute-capability"):
        images.requirements_from_labels("img", {images.LABEL_MIN_CC: "seven"})


def test_the_gate_refuses_a_cuda_13_image_on_a_p40_naming_both():
    p40 = load_declared(P40_LAB[:1])
    need = images.requirements_from_labels("gpulab/pytorch:6.1.1-cuda", cuda13_labels())
    request = SliceRequest(SliceKind.GPU)
    assert not any(need.restrict(request).matches(s) for s in p40.slices)
    why = images.unservable(need, request, p40.slices)
    assert "gpulab/pytorch:6.1.1-cuda" in why
    assert "CUDA 13" in why and "compute capability >= 7.5" in why
    assert "GPU 0 (Tesla P40)" in why and "compute capability 6.1" in why
    # beside an L4 the profile is served there, and the P40 is only skipped
    both = load_declared(P40_LAB)
    assert images.unservable(need, request, both.slices) is None
    servable, matching, problems = images.gate_report(need, request, both.slices)
    assert (servable, matching) == (1, 2) and "Tesla P40" in problems[0]
    # a CUDA 12 TensorFlow runs on the P40
    tf = images.requirements_from_labels(
        "tf", imagelabels.labels_for("tensorflow", "cuda", lock("tensorflow-cuda.txt"))
    )
    assert images.unservable(tf, request, p40.slices) is None


def test_an_old_driver_is_named_and_unknown_facts_exclude_nothing():
    old = [{**P40_LAB[1], "driver_version": "535.183.01"}]
    need = images.requirements_from_labels("img", cuda13_labels())
    why = images.unservable(need, SliceRequest(SliceKind.GPU), load_declared(old).slices)
    assert "driver 535.183.01" in why and "NVIDIA L4" in why
    unknown = [{"uuid": "GPU-v", "index": 0, "name": "GRID A40-8Q", "memory": "8GiB"}]
    assert (
        images.unservable(need, SliceRequest(SliceKind.GPU), load_declared(unknown).slices) is None
    )


def test_check_config_lists_a_profile_no_slice_can_serve_and_warns_about_a_partial_one():
    profiles = load_profiles(
        [
            {"slug": "torch-p40", "display_name": "P40", "image": "cuda13",
             "slice": {"kind": "gpu", "model": "P40"}},
            {"slug": "torch-any", "display_name": "any", "image": "cuda13",
             "slice": {"kind": "gpu"}},
            {"slug": "elsewhere", "display_name": "x", "image": "not-here",
             "slice": {"kind": "gpu"}},
            {"slug": "cpu", "display_name": "CPU", "image": "cuda13"},
        ]
    )  # fmt: skip
    labels = {"cuda13": cuda13_labels()}

    def labels_of(image):
        if image not in labels:
            raise LookupError(image)
        return labels[image]

    errors, warnings = images.check_profiles(profiles, load_declared(P40_LAB).slices, labels_of)
    assert len(errors) == 1 and errors[0].startswith("profile 'torch-p40'")
    assert "Tesla P40" in errors[0] and "cuda13" in errors[0]
    assert any(w.startswith("profile 'torch-any': 1 of its 2 slices") for w in warnings)
    assert any("'elsewhere'" in w and "not on this host" in w for w in warnings)


def test_the_form_disables_the_profile_and_says_why():
    profiles = load_profiles(
        [{"slug": "torch", "display_name": "PyTorch", "image": "cuda13", "slice": {"kind": "gpu"},
          "default": True}]
    )  # fmt: skip
    inv = load_declared(P40_LAB[:1])
    need = images.requirements_from_labels("cuda13", cuda13_labels())
    asked = []

    def capacity(req):
        asked.append(req)
        return sum(req.matches(s) for s in inv.slices), sum(req.matches(s) for s in inv.slices)

    def gate(p):
        return need.restrict(p.slice), images.unservable(need, p.slice, inv.slices), False

    (row,) = form_rows(profiles, capacity, preselect="torch", image_gate=gate)
    assert row.disabled_reason and "Tesla P40" in row.disabled_reason
    assert row.capacity == "no GPU here runs its image"
    assert asked[0].min_compute_capability == (7, 5)  # capacity counted what the image can use
    (plain,) = form_rows(profiles, capacity, preselect="torch")
    assert plain.disabled_reason is None


def test_a_seat_in_an_image_that_caps_the_frameworks_says_so():
    profiles = load_profiles(
        [{"slug": "seat", "display_name": "Seat", "image": "tf", "slice": {"kind": "shared"}}]
    )
    seats = load_declared(
        [{"uuid": "GPU-t4", "index": 0, "name": "Tesla T4", "memory": "16GiB",
          "shared": {"seats": 4, "memory_per_seat": "4GiB"}}]
    )  # fmt: skip
    cap = lambda req: (4, 4)  # noqa: E731
    (capped,) = form_rows(profiles, cap, preselect=None, image_gate=lambda p: (p.slice, None, True))
    (soft,) = form_rows(profiles, cap, preselect=None)
    assert "capped by the framework" in capped.gives and "bypasses" in capped.gives
    assert "advisory" in soft.gives
    assert "capped by the framework" in seats.slices[0].explain(False, True)


def test_configure_service_lets_each_servers_own_token_reach_the_service():
    from traitlets.config import Config

    from jupyterhub_gpulab.hub.hubconfig import configure_service

    c = Config()
    configure_service(c, url="http://172.17.0.1:10101")
    # JupyterHub's default (the server role's scopes) plus the service: the status bar entry
    assert c.Spawner.server_token_scopes == [
        "users:activity!user",
        "access:servers!server",
        "access:services!service=gpulab",
    ]
    assert c.GPUDockerSpawner.service_api_url == "http://172.17.0.1:10101/services/gpulab/api/"

    own = Config()
    own.Spawner.server_token_scopes = ["users:activity!user", "read:users:name!user"]
    configure_service(own)
    assert own.Spawner.server_token_scopes[-1] == "access:services!service=gpulab"
    assert "read:users:name!user" in own.Spawner.server_token_scopes

    role = Config()
    role.JupyterHub.load_roles = [{"name": "server", "scopes": ["users:activity!user"]}]
    configure_service(role)
    assert role.Spawner.server_token_scopes == [
        "users:activity!user",
        "access:services!service=gpulab",
    ]

    def scopes(spawner):
        return ["users:activity!user"]

    called = Config()
    called.Spawner.server_token_scopes = scopes
    configure_service(called)
    assert called.Spawner.server_token_scopes is scopes  # an admin's callable decides alone


#: One minor version short on each fact: a V100 (7.0) against CUDA 13's 7.5, an L4 on a driver of
#: the right major but older than 580.65.06; and a T4 with exactly the minimums.
EDGE_LAB = [
    {"uuid": "GPU-v100", "index": 0, "name": "Tesla V100-SXM2-16GB", "memory": "16GiB",
     "compute_capability": "7.0", "driver_version": "580.95.05"},
    {"uuid": "GPU-l4-old", "index": 1, "name": "NVIDIA L4", "memory": "24GiB",
     "compute_capability": "8.9", "driver_version": "580.60"},
    {"uuid": "GPU-t4", "index": 2, "name": "Tesla T4", "memory": "16GiB",
     "compute_capability": "7.5", "driver_version": "580.65.06"},
]  # fmt: skip


def test_the_gate_compares_minor_versions_in_memory_in_its_words_and_in_the_ledger(tmp_path):
    from ledger_support import make_url

    from jupyterhub_gpulab.ledger import Ledger, NoFreeSlice

    lab = load_declared(EDGE_LAB)
    need = images.requirements_from_labels("img", cuda13_labels())
    assert need.min_compute_capability == (7, 5) and need.min_driver == (580, 65, 6)
    wanted = need.restrict(SliceRequest(SliceKind.GPU))
    # the slice rule: only the T4 (a major-only comparison took all three)
    assert [s.device_uuid for s in lab.slices if wanted.matches(s)] == ["GPU-t4"]
    # the words: each short device named with the fact it lacks, and only that one
    servable, matching, problems = images.gate_report(need, SliceRequest(SliceKind.GPU), lab.slices)
    assert (servable, matching) == (1, 3)
    [v100] = [p for p in problems if "V100" in p]
    assert "compute capability 7.0" in v100 and "driver" not in v100.split("it has")[1]
    [l4] = [p for p in problems if "NVIDIA L4" in p]
    assert "driver 580.60" in l4 and "compute capability" not in l4.split("it has")[1]
    # the ledger's claim (integer keys in SQL) agrees: the T4, then nothing
    ledger = Ledger(make_url("sqlite", tmp_path))
    try:
        ledger.sync_inventory(lab)
        first = ledger.claim(wanted, user="ann", profile="pytorch")
        assert first.slice.device_uuid == "GPU-t4"
        with pytest.raises(NoFreeSlice):
            ledger.claim(wanted, user="bob", profile="pytorch")
    finally:
        ledger.close()


#: A cu126 build's newest architecture is sm_90 and it carries no PTX: Hopper (9.0) runs it,
#: Blackwell (10.0, 12.0) cannot; an sm_80-only build runs on the later Ampere/Ada minors (8.6,
#: 8.9: a cubin runs on later minors of its major) but not on Hopper.
TOP_LAB = [
    {"uuid": f"GPU-{cc}", "index": i, "name": name, "memory": "24GiB", "compute_capability": cc,
     "driver_version": "580.95.05"}
    for i, (name, cc) in enumerate([("NVIDIA A100", "8.0"), ("NVIDIA A40", "8.6"),
                                    ("NVIDIA L4", "8.9"), ("NVIDIA H100", "9.0"),
                                    ("NVIDIA B200", "10.0"), ("NVIDIA RTX PRO 6000", "12.0")])
]  # fmt: skip


@pytest.mark.parametrize(
    ("top", "runs_on"),
    [
        pytest.param("9.0", ["8.0", "8.6", "8.9", "9.0"], id="sm_90-stops-before-blackwell"),
        pytest.param("8.0", ["8.0", "8.6", "8.9"], id="sm_80-runs-on-later-minors-of-8"),
        pytest.param("", ["8.0", "8.6", "8.9", "9.0", "10.0", "12.0"], id="no-maximum"),
    ],
)
def test_the_gate_compares_the_maximum_by_major_in_memory_in_its_words_and_in_the_ledger(
    tmp_path, top, runs_on
):
    from ledger_support import make_url

    from jupyterhub_gpulab.ledger import Ledger, NoFreeSlice

    lab = load_declared(TOP_LAB)
    labels = {**cuda13_labels(), images.LABEL_MIN_CC: "8.0", images.LABEL_MAX_CC: top}
    need = images.requirements_from_labels("img", labels)
    wanted = need.restrict(SliceRequest(SliceKind.GPU))
    # the slice rule: 12.0 is above 9.0 as numbers (as text "12.0" < "9.0")
    assert [s.device_uuid for s in lab.slices if wanted.matches(s)] == [f"GPU-{c}" for c in runs_on]
    _servable, _matching, problems = images.gate_report(
        need, SliceRequest(SliceKind.GPU), lab.slices
    )
    assert len(problems) == len(TOP_LAB) - len(runs_on)
    for p in problems:
        assert f"compute capability 8.0 to {top[:-2]}.x (built up to sm_{top.replace('.', '')}" in p
    # the ledger's claim (integer keys in SQL) agrees: the same devices, then nothing
    ledger = Ledger(make_url("sqlite", tmp_path))
    try:
        ledger.sync_inventory(lab)
        got = {ledger.claim(wanted, user=f"u{i}", profile="p").slice.device_uuid
               for i in range(len(runs_on))}  # fmt: skip
        assert got == {f"GPU-{c}" for c in runs_on}
        with pytest.raises(NoFreeSlice):
            ledger.claim(wanted, user="late", profile="p")
    finally:
        ledger.close()


def test_a_maximum_label_reads_back_and_a_bad_one_is_named():
    need = images.requirements_from_labels("img", {images.LABEL_MAX_CC: "9.0"})
    assert need.max_compute_capability == (9, 0) and need.needs_gpu_facts
    assert need.restrict(SliceRequest(SliceKind.GPU)).max_compute_capability == (9, 0)
    assert images.requirements_from_labels("old", cuda13_labels()).max_compute_capability is None
    for bad in ("nine", "9"):
        with pytest.raises(ValueError, match="cuda.max-compute-capability"):
            images.requirements_from_labels("img", {images.LABEL_MAX_CC: bad})

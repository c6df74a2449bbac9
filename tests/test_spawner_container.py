"""What a container gets for its slice (``spawner/container.py``): the GPU it sees, the caps of a
shared seat, the Docker device request, labels, and telling a missing GPU runtime from other
start failures. Slices come from a declared inventory, as on a lab host."""

from __future__ import annotations

import pytest
from ledger_support import LAB

from jupyterhub_gpulab.inventory import SliceKind, load_declared
from jupyterhub_gpulab.spawner.container import (
    ATTACH_MODES,
    LABEL_ALLOCATION,
    LABEL_LAB,
    LABEL_LAB_NAME,
    LABEL_NODE,
    LABEL_PROFILE,
    LABEL_SERVER,
    LABEL_SLICE,
    LABEL_USER,
    device_requests,
    is_gpu_runtime_missing,
    labels,
    merge_env,
    slice_env,
)

SLICES = load_declared(LAB).slice_by_id()
WHOLE = SLICES["GPU-a40-0001"]
MIG = SLICES["MIG-a100-1g-0"]
SEAT = SLICES["GPU-t4s-0004/seat-1"]
BY_NAME = {"whole": WHOLE, "mig": MIG, "seat": SEAT, "cpu": None}


def test_lab_slices_are_what_the_tests_assume():
    assert (WHOLE.kind, MIG.kind, SEAT.kind) == (SliceKind.GPU, SliceKind.MIG, SliceKind.SHARED)
    assert SEAT.memory_bytes == 7 * 2**30 // 2
    assert SEAT.share == 0.25


# -- environment --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("which", "visible", "isolation"),
    [
        pytest.param("whole", "GPU-a40-0001", "hard", id="whole-gpu"),
        pytest.param("mig", "MIG-a100-1g-0", "hard", id="mig"),
        pytest.param("seat", "GPU-t4s-0004", "soft", id="shared-seat"),
    ],
)
def test_a_container_sees_exactly_its_slices_device(which, visible, isolation):
    env = slice_env(BY_NAME[which])
    assert env["NVIDIA_VISIBLE_DEVICES"] == visible
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    assert env["GPULAB_SLICE"] == BY_NAME[which].id
    assert env["GPULAB_SLICE_KIND"] == BY_NAME[which].kind.value
    assert env["GPULAB_ISOLATION"] == isolation
    assert not any(k.startswith("CUDA_MPS_") for k in env)


@pytest.mark.parametrize("which", ["whole", "mig"])
def test_whole_gpus_and_mig_get_no_seat_caps_even_with_mps(which):
    env = slice_env(BY_NAME[which], mps=True)
    assert not any(k.startswith("CUDA_MPS_") for k in env)
    assert "GPULAB_SEAT_MEMORY_BYTES" not in env
    assert env["GPULAB_ISOLATION"] == "hard"


def test_a_cpu_only_container_sees_no_gpu():
    env = slice_env(None, mps=True)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert env["GPULAB_ISOLATION"] == "none"
    assert not any(k.startswith("CUDA_") for k in env)


def test_a_seat_without_mps_has_soft_caps_the_frameworks_honour():
    env = slice_env(SEAT, mps=False)
    assert env["GPULAB_SEAT_MEMORY_BYTES"] == str(7 * 2**30 // 2)
    assert env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert "expandable_segments:True" in env["PYTORCH_CUDA_ALLOC_CONF"]
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in env
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in env
    assert env["GPULAB_ISOLATION"] == "soft"


def test_a_seat_with_mps_is_capped_in_memory_and_compute():
    env = slice_env(SEAT, mps=True)
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=3584M"  # device 0 of what it sees
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert env["GPULAB_ISOLATION"] == "mps"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-t4s-0004"


@pytest.mark.parametrize(
    ("seats", "per_seat", "share", "limit", "percent"),
    [
        pytest.param(2, "7GiB", 0.5, "0=7168M", "50", id="halves"),
        pytest.param(3, "1536MiB", 1 / 3, "0=1536M", "33", id="thirds"),
        pytest.param(8, "1GiB", 0.001, "0=1024M", "1", id="tiny-share-still-gets-1-percent"),
    ],
)
def test_mps_caps_follow_the_declared_seat(seats, per_seat, share, limit, percent):
    device = {
        "uuid": "GPU-t4x-0009",
        "name": "Tesla T4",
        "memory": "16GiB",
        "shared": {"seats": seats, "memory_per_seat": per_seat, "compute_share": share},
    }
    seat = load_declared([device]).slices[0]
    env = slice_env(seat, mps=True)
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == limit
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == percent


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("NVIDIA_VISIBLE_DEVICES", id="nvidia-visible-devices"),
        pytest.param("nvidia_visible_devices", id="lowercase"),
        pytest.param("CUDA_VISIBLE_DEVICES", id="cuda-visible-devices"),
        pytest.param("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", id="mps-memory"),
        pytest.param("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", id="mps-threads"),
        pytest.param("CUDA_MPS_PIPE_DIRECTORY", id="mps-pipe"),
        pytest.param("NVIDIA_MIG_CONFIG_DEVICES", id="mig-config"),
        pytest.param("NVIDIA_MIG_MONITOR_DEVICES", id="mig-monitor"),
    ],
)
@pytest.mark.parametrize("which", ["whole", "mig", "seat", "cpu"])
def test_profile_or_user_env_can_never_change_the_slice(name, which):
    protected = slice_env(BY_NAME[which], mps=True)
    profile = {name: "all", "OMP_NUM_THREADS": "4"}
    user = {name: "0,1,2,3", "MY_VAR": "x"}
    env = merge_env(profile, user, protected=protected)
    assert env.get(name) == protected.get(name), f"{name} from a profile/user survived"
    assert env["NVIDIA_VISIBLE_DEVICES"] == protected["NVIDIA_VISIBLE_DEVICES"]
    assert "all" not in env.values()
    assert "0,1,2,3" not in env.values()
    assert env["OMP_NUM_THREADS"] == "4"
    assert env["MY_VAR"] == "x"


def test_later_layers_win_for_ordinary_variables_and_gpulab_wins_over_all():
    protected = slice_env(SEAT)
    env = merge_env(
        {"A": "profile", "B": "profile", "GPULAB_ISOLATION": "hard"},
        {"B": "user"},
        protected=protected,
    )
    assert env["A"] == "profile"
    assert env["B"] == "user"
    assert env["GPULAB_ISOLATION"] == "soft"
    assert {k: v for k, v in env.items() if k in protected} == protected


# -- Docker device requests ---------------------------------------------------------------------


@pytest.mark.parametrize("which", ["whole", "mig", "seat"])
def test_device_request_names_the_one_device_and_never_a_count(which):
    s = BY_NAME[which]
    (req,) = device_requests(s, "device_request")
    assert req == {"Driver": "nvidia", "DeviceIDs": [s.visible_id], "Capabilities": [["gpu"]]}
    assert "Count" not in req  # Count -1 would hand over every GPU on the host


@pytest.mark.parametrize("which", ["whole", "mig", "seat"])
def test_cdi_request_names_the_device_by_uuid(which):
    s = BY_NAME[which]
    assert device_requests(s, "cdi") == [
        {"Driver": "cdi", "DeviceIDs": [f"nvidia.com/gpu={s.visible_id}"]}
    ]


@pytest.mark.parametrize("which", ["whole", "mig", "seat", "cpu"])
def test_env_mode_requests_no_device(which):
    assert device_requests(BY_NAME[which], "env") == []


@pytest.mark.parametrize("mode", ATTACH_MODES)
def test_a_cpu_only_container_requests_no_device_in_any_mode(mode):
    assert device_requests(None, mode) == []


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param("nvidia", id="runtime-name"),
        pytest.param("DEVICE_REQUEST", id="uppercase"),
        pytest.param("", id="empty"),
    ],
)
@pytest.mark.parametrize("which", ["whole", "cpu"])
def test_an_unknown_attach_mode_is_refused_naming_the_modes(mode, which):
    with pytest.raises(ValueError) as e:
        device_requests(BY_NAME[which], mode)
    for known in ("device_request", "cdi", "env"):
        assert known in str(e.value)
    assert repr(mode) in str(e.value)


# -- labels -------------------------------------------------------------------------------------


def test_labels_tie_a_gpu_container_to_its_allocation():
    out = labels(
        allocation_id=42,
        user="alice@uni.edu",
        server_name="lab",
        profile="pytorch-mig",
        slice_id=MIG.id,
        node="gpu01",
        lab="0b5e1c1e-7a52-4c0e-9d25-5a1f6e8f2a10",
        lab_name="staging",
    )
    assert out == {
        LABEL_LAB: "0b5e1c1e-7a52-4c0e-9d25-5a1f6e8f2a10",
        LABEL_LAB_NAME: "staging",
        LABEL_ALLOCATION: "42",
        LABEL_USER: "alice@uni.edu",
        LABEL_SERVER: "lab",
        LABEL_PROFILE: "pytorch-mig",
        LABEL_SLICE: "MIG-a100-1g-0",
        LABEL_NODE: "gpu01",
    }
    assert all(isinstance(v, str) for v in out.values())


def test_a_cpu_only_container_has_no_allocation_or_slice_label():
    out = labels(
        allocation_id=None,
        user="bob",
        server_name="",
        profile="cpu",
        slice_id=None,
        node="n",
        lab="L",
    )
    assert out[LABEL_LAB] == "L" and LABEL_LAB_NAME not in out
    assert LABEL_ALLOCATION not in out
    assert LABEL_SLICE not in out
    assert out[LABEL_SERVER] == ""
    assert out[LABEL_USER] == "bob"


def test_allocation_zero_is_still_labelled():
    out = labels(
        allocation_id=0, user="u", server_name="", profile="p", slice_id="s", node="n", lab="L"
    )
    assert out[LABEL_ALLOCATION] == "0"


# -- a missing GPU runtime vs any other start failure -------------------------------------------


@pytest.mark.parametrize(
    ("text", "missing"),
    [
        pytest.param(
            "500 Server Error for http+docker://localhost/v1.47/containers/3f2a/start: Internal "
            'Server Error ("could not select device driver "nvidia" with capabilities: [[gpu]]")',
            True,
            id="no-nvidia-container-toolkit",
        ),
        pytest.param(
            'Error response from daemon: could not select device driver "cdi" with '
            "capabilities: []",
            True,
            id="no-cdi-driver",
        ),
        pytest.param(
            "Error response from daemon: unknown or invalid runtime name: nvidia",
            True,
            id="no-nvidia-runtime",
        ),
        pytest.param(
            "failed to create task for container: failed to create shim task: OCI runtime "
            "create failed: runc create failed: unable to start container process: error during "
            "container init: error running hook #0: error running hook: exit status 1, stdout: , "
            "stderr: Auto-detected mode as 'legacy'\nnvidia-container-cli: initialization error: "
            "nvml error: driver not loaded: unknown",
            True,
            id="driver-not-loaded",
        ),
        pytest.param(
            "Error response from daemon: failed to inject CDI devices: unresolvable CDI devices "
            "nvidia.com/gpu=GPU-a40-0001",
            True,
            id="no-cdi-spec",
        ),
        pytest.param(
            '404 Client Error for http+docker://localhost/v1.47/images/create: Not Found ("No '
            'such image: gpulab/singleuser:6.1.1")',
            False,
            id="no-such-image",
        ),
        pytest.param(
            "No such image: nvidia/cuda:12.4.1-base-ubuntu22.04",
            False,
            id="no-such-nvidia-image",
        ),
        pytest.param(
            "driver failed programming external connectivity on endpoint jupyter-alice "
            "(9c1e): Bind for 0.0.0.0:8888 failed: port is already allocated",
            False,
            id="port-already-allocated",
        ),
        pytest.param(
            'Conflict ("The container name "/jupyter-alice" is already in use")',
            False,
            id="name-conflict",
        ),
        pytest.param("", False, id="empty"),
    ],
)
def test_a_missing_gpu_runtime_is_told_apart_from_other_failures(text, missing):
    assert is_gpu_runtime_missing(text) is missing

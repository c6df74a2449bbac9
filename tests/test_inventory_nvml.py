"""The inventory NVML reports: devices, MIG devices, vGPU guests, shared seats, missing drivers,
devices that vanish mid-scan, and utilisation samples. NVML is the fake in ``fake_nvml.py``."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pynvml
import pytest
from fake_nvml import (
    A40_UUID,
    A100_MIGS,
    A100_UUID,
    H100_UUID,
    P40_UUID,
    FakeGpu,
    FakeNVML,
    GiB,
    MiB,
    a100_mig_gpu,
)

from jupyterhub_gpulab.inventory import (
    InventoryError,
    SharedSettings,
    SliceKind,
    SliceRequest,
    Utilization,
    discover,
    load_inventory,
    sample_utilization,
)
from jupyterhub_gpulab.inventory.slices import mig_profile_name, vgpu_type_from_name

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "jupyterhub_gpulab"


def kinds(inventory):
    return [(s.id, s.kind) for s in inventory.slices]


# -- devices and slices ---------------------------------------------------------------------------


def test_p40_without_mig_is_one_whole_gpu():
    nvml = FakeNVML.p40()
    inv = discover(nvml=nvml)

    assert inv.source == "nvml"
    assert inv.warnings == ()
    (device,) = inv.devices
    assert (device.uuid, device.index, device.name) == (P40_UUID, 0, "Tesla P40")
    assert device.memory_bytes == 24 * GiB
    assert device.compute_capability == (6, 1)
    assert device.mig_enabled is False
    assert device.vgpu_type is None
    (s,) = inv.slices
    assert (s.id, s.kind, s.visible_id, s.memory_bytes, s.share) == (
        P40_UUID,
        SliceKind.GPU,
        P40_UUID,
        24 * GiB,
        1.0,
    )
    assert SliceRequest(kind=SliceKind.GPU, min_memory_bytes=16 * GiB).matches(s)


def test_a100_in_mig_mode_offers_only_its_mig_devices():
    inv = discover(nvml=FakeNVML.a100_mig_mixed())

    (device,) = inv.devices
    assert device.mig_enabled is True
    assert all(s.kind is SliceKind.MIG for s in inv.slices)
    assert A100_UUID not in inv.slice_by_id()
    assert [(s.id, s.mig_profile) for s in inv.slices] == A100_MIGS
    assert [s.visible_id for s in inv.slices] == [uuid for uuid, _ in A100_MIGS]
    assert [s.memory_bytes for s in inv.slices] == [19968 * MiB, 9856 * MiB, 4864 * MiB, 4864 * MiB]
    assert [s.share for s in inv.slices] == pytest.approx([3 / 7, 2 / 7, 1 / 7, 1 / 7])
    assert all(s.device_uuid == A100_UUID for s in inv.slices)
    assert [s.rank for s in inv.slices] == sorted(s.rank for s in inv.slices)
    assert inv.slices[2].describe() == "MIG 1g.5gb on GPU 0 (NVIDIA A100-SXM4-40GB)"
    want = SliceRequest(kind=SliceKind.MIG, mig_profile="1g.5gb")
    assert [s.id for s in inv.slices if want.matches(s)] == [uuid for uuid, _ in A100_MIGS[2:]]


def test_mixed_lab_lists_every_device_and_ranks_whole_gpus_best_fit_first(fake_nvml):
    inv = discover(nvml=fake_nvml)

    assert [d.name for d in inv.devices] == [
        "Tesla P40",
        "NVIDIA A40",
        "NVIDIA A100-SXM4-40GB",
        "NVIDIA H100 80GB HBM3",
    ]
    whole = sorted((s for s in inv.slices if s.kind is SliceKind.GPU), key=lambda s: s.rank)
    assert [s.id for s in whole] == [P40_UUID, A40_UUID, H100_UUID]  # smallest memory first
    assert inv.device_by_uuid()[H100_UUID].mig_enabled is False  # MIG capable, disabled
    assert len([s for s in inv.slices if s.kind is SliceKind.MIG]) == 4
    assert inv.warnings == ()


def test_best_fit_rank_prefers_smaller_memory_then_lower_index():
    small, big_a, big_b = (
        FakeGpu("GPU-00000000-0000-4000-8000-0000000000c2", "NVIDIA A40", 48 * GiB),
        FakeGpu("GPU-00000000-0000-4000-8000-0000000000c0", "NVIDIA A40", 48 * GiB),
        FakeGpu("GPU-00000000-0000-4000-8000-0000000000c1", "Tesla T4", 16 * GiB),
    )
    inv = discover(nvml=FakeNVML([small, big_a, big_b]))
    order = [s.device_index for s in sorted(inv.slices, key=lambda s: s.rank)]
    assert order == [2, 0, 1]


def test_node_is_stamped_on_devices_and_slices(fake_nvml):
    inv = discover(node="gpu-host-1", nvml=fake_nvml)
    assert {d.node for d in inv.devices} == {"gpu-host-1"}
    assert {s.node for s in inv.slices} == {"gpu-host-1"}


def test_old_pynvml_bytes_names_give_the_same_inventory():
    assert discover(nvml=FakeNVML.mixed_lab(bytes_strings=True)) == discover(
        nvml=FakeNVML.mixed_lab()
    )


def test_vgpu_guest_is_a_device_like_any_other():
    guest = FakeGpu("GPU-9c1d0e2f-0000-4000-8000-00000000001q", "GRID P40-1Q", 1 * GiB, (6, 1))
    inv = discover(nvml=FakeNVML([guest]))
    (device,) = inv.devices
    assert device.vgpu_type == "P40-1Q"
    (s,) = inv.slices
    assert (s.kind, s.visible_id, s.memory_bytes) == (SliceKind.GPU, guest.uuid, GiB)


@pytest.mark.parametrize(
    ("name", "vgpu_type"),
    [
        ("GRID P40-1Q", "P40-1Q"),
        ("GRID T4-16C", "T4-16C"),
        ("NVIDIA A40-48Q", "A40-48Q"),
        ("GRID A100-1-5C", "A100-1-5C"),
        ("GRID M60-0B", "M60-0B"),
        ("Tesla P40", None),
        ("NVIDIA A100-SXM4-40GB", None),
        ("NVIDIA A100-PCIE-40GB", None),
        ("NVIDIA H100 80GB HBM3", None),
        ("NVIDIA GeForce RTX 3090", None),
    ],
)
def test_vgpu_type_is_read_from_guest_names_only(name, vgpu_type):
    assert vgpu_type_from_name(name) == vgpu_type


# -- MIG profile names ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("g", "memory_mb", "device_mib", "name"),
    [
        # A100-SXM4-40GB (nvidia-smi mig -lgip)
        (1, 4864, 40960, "1g.5gb"),
        (1, 9856, 40960, "1g.10gb"),
        (2, 9856, 40960, "2g.10gb"),
        (3, 19968, 40960, "3g.20gb"),
        (4, 19968, 40960, "4g.20gb"),
        (7, 40192, 40960, "7g.40gb"),
        # A100-SXM4-80GB
        (1, 9856, 81920, "1g.10gb"),
        (1, 19968, 81920, "1g.20gb"),
        (3, 40192, 81920, "3g.40gb"),
        (7, 80384, 81920, "7g.80gb"),
        # H100 80GB reports 81559 MiB: rounded up to 80 GiB before naming
        (1, 9984, 81559, "1g.10gb"),
        (7, 80384, 81559, "7g.80gb"),
        # H200 (140.4 GiB -> 141): 4/8 of 141 = 70.5 rounds half *up*
        (1, 16896, 143771, "1g.18gb"),
        (2, 33792, 143771, "2g.35gb"),
        (3, 69120, 143771, "3g.71gb"),
        (7, 138752, 143771, "7g.141gb"),
        # A30 24GB
        (1, 5836, 24576, "1g.6gb"),
        (2, 11842, 24576, "2g.12gb"),
        (4, 24096, 24576, "4g.24gb"),
    ],
)
def test_mig_profile_names_follow_nvidia_rounding(g, memory_mb, device_mib, name):
    assert mig_profile_name(g, memory_mb, device_mib * MiB) == name


def test_a100_80gb_one_slice_is_named_1g_10gb_from_nvml():
    nvml = FakeNVML.a100_80gb_mig([("MIG-aaaa", "1g.10gb"), ("MIG-bbbb", "3g.40gb")])
    assert [s.mig_profile for s in discover(nvml=nvml).slices] == ["1g.10gb", "3g.40gb"]


def test_h200_half_way_memory_rounds_up_like_nvidia_smi():
    nvml = FakeNVML.h200_mig([("MIG-aaaa", "3g.71gb"), ("MIG-bbbb", "4g.71gb")])
    inv = discover(nvml=nvml)
    assert [s.mig_profile for s in inv.slices] == ["3g.71gb", "4g.71gb"]
    assert [s.share for s in inv.slices] == pytest.approx([3 / 7, 4 / 7])


def test_media_extension_instance_keeps_its_plus_me_name():
    nvml = FakeNVML.a100_mig_mixed()
    gpu = nvml.gpus[0]
    gpu.migs[2].profile_id = 20  # the 1g.5gb+me GPU instance profile
    assert [s.mig_profile for s in discover(nvml=nvml).slices][2] == "1g.5gb+me"


def test_mig_profiles_are_read_from_attributes_when_gpu_instances_are_not_readable():
    nvml = FakeNVML.a100_mig_mixed()
    nvml.gpus[0].gi_readable = False  # no access to the MIG monitor capability
    inv = discover(nvml=nvml)
    assert [(s.id, s.mig_profile) for s in inv.slices] == A100_MIGS
    assert inv.warnings == ()


def test_mig_share_uses_the_gpus_largest_instance_not_its_name():
    nvml = FakeNVML.a100_mig_mixed()
    gpu = nvml.gpus[0]
    gpu.profiles = [p for p in gpu.profiles if p.slice_count <= 4]  # a 4-slice GPU, like an A30
    inv = discover(nvml=nvml)
    assert inv.slice_by_id()[A100_MIGS[0][0]].share == pytest.approx(3 / 4)


def test_mig_enabled_gpu_without_mig_devices_offers_nothing_and_says_so():
    nvml = FakeNVML.a100_mig_mixed()
    nvml.gpus[0].migs = []
    inv = discover(nvml=nvml)
    assert len(inv.devices) == 1
    assert inv.slices == ()
    (warning,) = inv.warnings
    assert "no MIG devices" in warning and "nvidia-smi mig" in warning


def test_pending_mig_mode_change_is_reported():
    nvml = FakeNVML.mixed_lab()
    nvml.gpus[3].mig_mode = (pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_ENABLE)
    inv = discover(nvml=nvml)
    assert inv.device_by_uuid()[H100_UUID].mig_enabled is False
    assert H100_UUID in inv.slice_by_id()
    (warning,) = inv.warnings
    assert "GPU 3" in warning and "enabled after a GPU reset" in warning


def test_one_unreadable_mig_device_is_skipped_and_the_rest_kept():
    class OneBadMig(FakeNVML):
        def nvmlDeviceGetUUID(self, handle):
            if handle.mig is not None and handle.mig.position == 1:
                raise pynvml.NVMLError_Unknown()
            return super().nvmlDeviceGetUUID(handle)

    inv = discover(nvml=OneBadMig([a100_mig_gpu()]))
    assert [s.id for s in inv.slices] == [A100_MIGS[0][0], A100_MIGS[2][0], A100_MIGS[3][0]]
    (warning,) = inv.warnings
    assert "MIG device 1" in warning and "skipped" in warning


# -- shared seats ---------------------------------------------------------------------------------


def test_shared_device_is_offered_as_seats():
    settings = SharedSettings(seats=4, memory_bytes=8 * GiB, compute_share=0.25)
    inv = discover(nvml=FakeNVML.mixed_lab(), shared={A40_UUID: settings})

    seats = [s for s in inv.slices if s.device_uuid == A40_UUID]
    assert [s.id for s in seats] == [f"{A40_UUID}/seat-{n}" for n in range(4)]
    assert {s.kind for s in seats} == {SliceKind.SHARED}
    assert {s.visible_id for s in seats} == {A40_UUID}
    assert {(s.memory_bytes, s.share, s.seats) for s in seats} == {(8 * GiB, 0.25, 4)}
    assert [s.rank for s in seats] == [1000, 1001, 1002, 1003]  # pack: device, then seat
    assert seats[0].isolation == "soft"
    assert A40_UUID not in inv.slice_by_id()  # no whole slice beside the seats
    assert inv.warnings == ()


def test_seats_that_do_not_fit_fall_back_to_a_whole_gpu_with_a_warning():
    settings = SharedSettings(seats=4, memory_bytes=16 * GiB, compute_share=0.25)
    inv = discover(nvml=FakeNVML.mixed_lab(), shared={A40_UUID: settings})
    assert inv.slice_by_id()[A40_UUID].kind is SliceKind.GPU
    (warning,) = inv.warnings
    assert A40_UUID in warning and "exceeds" in warning and "at most 2 seats" in warning


def test_shared_settings_on_a_mig_gpu_or_an_absent_gpu_are_reported():
    settings = SharedSettings(seats=2, memory_bytes=4 * GiB, compute_share=0.5)
    absent = "GPU-00000000-0000-4000-8000-00000000dead"
    inv = discover(nvml=FakeNVML.mixed_lab(), shared={A100_UUID: settings, absent: settings})
    assert len([s for s in inv.slices if s.kind is SliceKind.MIG]) == 4
    assert not [s for s in inv.slices if s.kind is SliceKind.SHARED]
    assert len(inv.warnings) == 2
    assert any("MIG mode" in w and A100_UUID in w for w in inv.warnings)
    assert any(absent in w and "nvidia-smi -L" in w for w in inv.warnings)


# -- no driver, vanishing devices -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nvml", "says"),
    [
        pytest.param(FakeNVML.library_missing(), "libnvidia-ml.so.1", id="library-not-found"),
        pytest.param(FakeNVML.driver_not_loaded(), "driver is not loaded", id="driver-not-loaded"),
    ],
)
def test_host_without_driver_has_no_gpus_and_one_clear_warning(nvml, says):
    inv = discover(nvml=nvml)
    assert (inv.devices, inv.slices, inv.source) == ((), (), "none")
    (warning,) = inv.warnings
    assert says in warning
    assert "CPU profiles still work" in warning
    assert "c.GPULab.inventory" in warning


@pytest.mark.parametrize("error", [pynvml.NVMLError_Uninitialized, pynvml.NVMLError_Unknown])
def test_nvml_failing_as_a_whole_mid_scan_gives_no_gpus_and_one_warning(error):
    class Fails(FakeNVML):
        def nvmlDeviceGetCount(self):
            raise error()

    nvml = Fails.mixed_lab()
    inv = discover(nvml=nvml)
    assert (inv.devices, inv.source) == ((), "none")
    (warning,) = inv.warnings
    assert error.__name__ in warning and "CPU profiles still work" in warning
    assert nvml.refcount == 0


def test_missing_pynvml_package_gives_no_gpus_and_one_warning(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    inv = discover()
    assert (inv.devices, inv.source) == ((), "none")
    (warning,) = inv.warnings
    assert "nvidia-ml-py" in warning and "CPU profiles still work" in warning


def test_real_pynvml_on_a_host_without_the_driver():
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this host has an NVIDIA driver")
    inv = discover()
    assert inv.source == "none"
    (warning,) = inv.warnings
    assert "libnvidia-ml.so.1" in warning


def test_device_vanishing_between_two_reads_is_skipped_and_the_rest_kept():
    nvml = FakeNVML.mixed_lab().vanish_after(2, index=1)  # handle and UUID, then lost
    inv = discover(nvml=nvml)
    assert [d.index for d in inv.devices] == [0, 2, 3]
    assert A40_UUID not in {s.device_uuid for s in inv.slices}
    (warning,) = inv.warnings
    assert f"GPU 1 ({A40_UUID})" in warning and "GpuIsLost" in warning
    assert nvml.refcount == 0


def test_device_lost_before_its_uuid_is_named_by_index():
    inv = discover(nvml=FakeNVML.mixed_lab().vanish_after(0, index=0))
    assert [d.index for d in inv.devices] == [1, 2, 3]
    (warning,) = inv.warnings
    assert warning.startswith("GPU 0 vanished")


@pytest.mark.parametrize(
    "calls",
    [
        pytest.param(12, id="lost-reading-its-profiles"),
        pytest.param(33, id="lost-after-its-first-mig-device"),
    ],
)
def test_mig_gpu_lost_mid_scan_is_skipped_whole_not_half(calls):
    nvml = FakeNVML.mixed_lab().vanish_after(calls, index=2)
    inv = discover(nvml=nvml)
    assert A100_UUID not in {s.device_uuid for s in inv.slices}
    assert [d.index for d in inv.devices] == [0, 1, 3]
    (warning,) = inv.warnings
    assert "GPU 2" in warning


def test_every_scan_shuts_nvml_down(fake_nvml):
    discover(nvml=fake_nvml)
    discover(nvml=fake_nvml)
    assert fake_nvml.refcount == 0


# -- utilisation ----------------------------------------------------------------------------------


def test_utilization_per_slice(fake_nvml):
    settings = SharedSettings(seats=2, memory_bytes=8 * GiB, compute_share=0.5)
    inv = discover(nvml=fake_nvml, shared={A40_UUID: settings})
    fake_nvml.set_utilization(P40_UUID, gpu_percent=40, memory_used=2 * GiB)
    fake_nvml.set_utilization(A40_UUID, gpu_percent=75, memory_used=10 * GiB)
    fake_nvml.set_utilization(A100_MIGS[0][0], memory_used=3 * GiB)
    fake_nvml.init_calls = 0

    sample = sample_utilization(inv, nvml=fake_nvml)

    assert set(sample) == set(inv.slice_by_id())
    assert sample[P40_UUID] == Utilization(gpu_percent=40.0, memory_used_bytes=2 * GiB)
    # seats report their device's figures
    assert (
        sample[f"{A40_UUID}/seat-0"] == sample[f"{A40_UUID}/seat-1"] == Utilization(75.0, 10 * GiB)
    )
    # MIG devices have memory figures but no utilisation rate
    assert sample[A100_MIGS[0][0]] == Utilization(gpu_percent=None, memory_used_bytes=3 * GiB)
    assert (fake_nvml.init_calls, fake_nvml.refcount) == (1, 0)


def test_utilization_of_a_vanished_device_is_unknown(fake_nvml):
    inv = discover(nvml=fake_nvml)
    fake_nvml.vanish_after(0, index=0)
    sample = sample_utilization(inv, nvml=fake_nvml)
    assert sample[P40_UUID] == Utilization(None, None)
    assert sample[A40_UUID].gpu_percent == 0.0


def test_utilization_without_nvml_is_unknown_for_every_slice(fake_nvml):
    inv = discover(nvml=fake_nvml)
    sample = sample_utilization(inv, nvml=FakeNVML.library_missing())
    assert set(sample.values()) == {Utilization(None, None)}
    assert len(sample) == len(inv.slices)


# -- choosing the source, import cost -------------------------------------------------------------

DECLARED = [
    {"uuid": "GPU-d0000000-0000-4000-8000-000000000001", "name": "NVIDIA A40", "memory": "48GiB"}
]


def test_load_inventory_auto_prefers_a_declared_inventory(fake_nvml):
    assert load_inventory("auto", DECLARED, "local", nvml=fake_nvml).source == "declared"
    assert load_inventory("auto", [], "local", nvml=fake_nvml).source == "nvml"
    assert load_inventory("auto", None, "local", nvml=fake_nvml).source == "nvml"
    assert load_inventory("nvml", DECLARED, "local", nvml=fake_nvml).source == "nvml"
    assert load_inventory("declared", DECLARED, "local", nvml=fake_nvml).source == "declared"


def test_load_inventory_passes_shared_settings_to_nvml(fake_nvml):
    settings = SharedSettings(seats=2, memory_bytes=8 * GiB, compute_share=0.5)
    inv = load_inventory("nvml", None, "local", nvml=fake_nvml, shared={A40_UUID: settings})
    assert f"{A40_UUID}/seat-1" in inv.slice_by_id()


@pytest.mark.parametrize(
    ("source", "declared", "says"),
    [
        ("declared", None, "c.GPULab.inventory is empty"),
        ("declared", [], "c.GPULab.inventory is empty"),
        ("NVML", None, "use one of auto, nvml, declared"),
    ],
)
def test_load_inventory_refuses_impossible_sources(source, declared, says):
    with pytest.raises(InventoryError, match=says) as info:
        load_inventory(source, declared, "local", nvml=FakeNVML.library_missing())
    assert isinstance(info.value, ValueError)


def test_importing_the_inventory_does_not_import_pynvml():
    code = "import sys, jupyterhub_gpulab.inventory; assert 'pynvml' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_only_the_nvml_calls_module_imports_pynvml():
    importers = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "import pynvml" in path.read_text() or "from pynvml" in path.read_text()
    }
    assert importers == {"inventory/nvml_calls.py"}

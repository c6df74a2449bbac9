"""A declared inventory (``c.GPULab.inventory``): what it builds, that it matches NVML for the
same hardware, and that every mistake is reported at load, naming the entry and the fix."""

from __future__ import annotations

import pytest
from fake_nvml import A40_UUID, A100_MIGS, A100_UUID, H100_UUID, P40_UUID, FakeNVML, GiB, MiB

from jupyterhub_gpulab.inventory import (
    InventoryError,
    SharedSettings,
    SliceKind,
    discover,
    load_declared,
    load_shared,
)

T4 = "GPU-7f4e2d1c-0000-4000-8000-0000000000t4"
GRID = "GPU-9c1d0e2f-0000-4000-8000-00000000001q"

EXAMPLE = [
    {
        "uuid": A100_UUID,
        "index": 0,
        "name": "NVIDIA A100-SXM4-40GB",
        "memory": "40GiB",
        "compute_capability": "8.0",
        "mig": [{"uuid": u, "profile": p} for u, p in A100_MIGS],
    },
    {"uuid": A40_UUID, "index": 1, "name": "NVIDIA A40", "memory": "48GiB"},
    {
        "uuid": T4,
        "index": 2,
        "name": "Tesla T4",
        "memory": "16GiB",
        "shared": {"seats": 4, "memory_per_seat": "3.5GiB", "compute_share": 0.25},
    },
    {"uuid": GRID, "index": 3, "name": "GRID P40-1Q", "memory": "1GiB", "vgpu_type": "P40-1Q"},
]


def test_the_documented_example_loads():
    inv = load_declared(EXAMPLE, node="lab-1")

    assert inv.source == "declared"
    assert inv.warnings == ()
    assert [d.index for d in inv.devices] == [0, 1, 2, 3]
    assert {s.node for s in inv.slices} == {"lab-1"}
    a100 = inv.device_by_uuid()[A100_UUID]
    assert (a100.mig_enabled, a100.compute_capability, a100.memory_bytes) == (
        True,
        (8, 0),
        40 * GiB,
    )
    by_id = inv.slice_by_id()
    mig = [s for s in inv.slices if s.kind is SliceKind.MIG]
    assert [(s.id, s.mig_profile) for s in mig] == A100_MIGS
    assert by_id[A100_MIGS[0][0]].memory_bytes == 20 * GiB  # from the profile name
    assert by_id[A100_MIGS[0][0]].share == pytest.approx(3 / 7)
    assert by_id[A40_UUID].kind is SliceKind.GPU
    seats = [s for s in inv.slices if s.kind is SliceKind.SHARED]
    assert [s.id for s in seats] == [f"{T4}/seat-{n}" for n in range(4)]
    assert {(s.memory_bytes, s.share, s.visible_id) for s in seats} == {(7 * GiB // 2, 0.25, T4)}
    assert inv.device_by_uuid()[GRID].vgpu_type == "P40-1Q"
    assert by_id[GRID].kind is SliceKind.GPU


def test_identical_hardware_gives_identical_slices_from_nvml_and_from_config():
    nvml_inv = discover(nvml=FakeNVML.mixed_lab())
    memory_mib = {"3g.20gb": 19968, "2g.10gb": 9856, "1g.5gb": 4864}
    declared = [
        {"uuid": P40_UUID, "index": 0, "name": "Tesla P40", "memory": "24GiB",
         "compute_capability": "6.1", "driver_version": "580.95.05"},
        {"uuid": A40_UUID, "index": 1, "name": "NVIDIA A40", "memory": "46068MiB",
         "compute_capability": [8, 6], "driver_version": "580.95.05"},
        {"uuid": A100_UUID, "index": 2, "name": "NVIDIA A100-SXM4-40GB", "memory": "40960MiB",
         "compute_capability": "8.0", "driver_version": "580.95.05",
         "mig": [{"uuid": u, "profile": p, "memory": f"{memory_mib[p]}MiB"} for u, p in A100_MIGS]},
        {"uuid": H100_UUID, "index": 3, "name": "NVIDIA H100 80GB HBM3", "memory": "81559MiB",
         "compute_capability": "9.0", "driver_version": "580.95.05"},
    ]  # fmt: skip

    declared_inv = load_declared(declared)

    assert declared_inv.slices == nvml_inv.slices
    assert declared_inv.devices == nvml_inv.devices


def test_identical_shared_seats_from_nvml_and_from_config():
    settings = {A40_UUID: {"seats": 3, "memory_per_seat": "12GiB", "compute_share": 0.3}}
    nvml_inv = discover(nvml=FakeNVML.mixed_lab(), shared=load_shared(settings))
    declared = [
        {"uuid": A40_UUID, "index": 1, "name": "NVIDIA A40", "memory": "46068MiB",
         "compute_capability": "8.6", "driver_version": "580.95.05", "shared": settings[A40_UUID]},
    ]  # fmt: skip
    seats = [s for s in nvml_inv.slices if s.device_uuid == A40_UUID]
    assert load_declared(declared).slices == tuple(seats)


def test_declared_mig_memory_defaults_to_the_profile_name_in_gib():
    inv = load_declared(EXAMPLE[:1])
    assert [s.memory_bytes for s in inv.slices] == [20 * GiB, 10 * GiB, 5 * GiB, 5 * GiB]


def test_defaults_index_vgpu_type_and_compute_share():
    inv = load_declared(
        [
            {"uuid": GRID, "name": "GRID P40-1Q", "memory": "1GiB"},
            {
                "uuid": T4,
                "name": "Tesla T4",
                "memory": "16GiB",
                "shared": {"seats": 4, "memory_per_seat": "4GiB"},
            },
        ]
    )
    assert [d.index for d in inv.devices] == [0, 1]  # position in the list
    assert inv.device_by_uuid()[GRID].vgpu_type == "P40-1Q"  # read from the name
    assert {s.share for s in inv.slices if s.kind is SliceKind.SHARED} == {0.25}  # 1 / seats


def test_a30_with_four_compute_slices():
    a30 = {
        "uuid": "GPU-a3000000-0000-4000-8000-000000000030",
        "name": "NVIDIA A30",
        "memory": "24GiB",
        "mig_compute_slices": 4,
        "mig": [{"uuid": "MIG-a", "profile": "2g.12gb"}, {"uuid": "MIG-b", "profile": "1g.6gb"}],
    }
    assert [s.share for s in load_declared([a30]).slices] == [0.5, 0.25]


@pytest.mark.parametrize("memory", ["141GiB", "143771MiB"])
def test_h200_full_mig_layout_fits_despite_rounded_names(memory):
    h200 = {
        "uuid": "GPU-0b200b20-0000-4000-8000-000000000141",
        "name": "NVIDIA H200",
        "memory": memory,
        "mig": [{"uuid": "MIG-a", "profile": "3g.71gb"}, {"uuid": "MIG-b", "profile": "4g.71gb"}],
    }
    assert len(load_declared([h200]).slices) == 2


def test_an_empty_declared_inventory_has_no_gpus():
    inv = load_declared([])
    assert (inv.devices, inv.slices, inv.source) == ((), (), "declared")


# -- mistakes ---------------------------------------------------------------------------------------


def gpu(**extra):
    return {"uuid": "GPU-aaaa", "name": "NVIDIA A100-SXM4-40GB", "memory": "40GiB", **extra}


def t4(**shared):
    return {"uuid": "GPU-cccc", "name": "Tesla T4", "memory": "16GiB", "shared": shared}


BAD = [
    pytest.param(
        [gpu(memroy="40GiB")],
        ["inventory[0] (GPU-aaaa)", "unknown key 'memroy'", "did you mean 'memory'",
         "allowed keys: uuid, index, name, memory"],
        id="unknown-key",
    ),
    pytest.param(
        [{"name": "NVIDIA A40", "memory": "48GiB"}],
        ["inventory[0]:", 'missing "uuid"', "nvidia-smi -L"],
        id="missing-uuid",
    ),
    pytest.param(
        [{"uuid": "GPU-aaaa", "memory": "48GiB"}],
        ["inventory[0] (GPU-aaaa)", 'missing "name"', "NVIDIA A100-SXM4-40GB"],
        id="missing-name",
    ),
    pytest.param(
        [{"uuid": "GPU-aaaa", "name": "NVIDIA A40"}],
        ["inventory[0] (GPU-aaaa)", 'missing "memory"', "'40GiB'"],
        id="missing-memory",
    ),
    pytest.param(
        [gpu(uuid="0000:3b:00.0")],
        ["inventory[0] (0000:3b:00.0)", "must start with 'GPU-'", "nvidia-smi -L"],
        id="uuid-not-gpu",
    ),
    pytest.param(
        [gpu(uuid="MIG-bbbb")],
        ["inventory[0] (MIG-bbbb)", "must start with 'GPU-'", '"mig" list of its GPU'],
        id="mig-uuid-as-device",
    ),
    pytest.param(
        [gpu(index=0), gpu(index=1)],
        ["inventory[1] (GPU-aaaa)", "duplicate UUID GPU-aaaa", "also used by inventory[0]"],
        id="duplicate-device-uuid",
    ),
    pytest.param(
        [gpu(mig=[{"uuid": "MIG-1", "profile": "1g.5gb"}, {"uuid": "MIG-1", "profile": "1g.5gb"}])],
        ["inventory[0] (GPU-aaaa) mig[1] (MIG-1)", "duplicate UUID MIG-1",
         "also used by inventory[0] (GPU-aaaa) mig[0]"],
        id="duplicate-mig-uuid",
    ),
    pytest.param(
        [gpu(mig=[{"uuid": "MIG-GPU-8a3f0c1e-2b4d-4c6e-9f10-a1b2c3d4e5f6/1/0", "profile": "3g.20gb"}])],
        ["inventory[0] (GPU-aaaa) mig[0]", "old MIG-GPU-<uuid>/<gi>/<ci> form",
         "use the MIG-<uuid> form shown by `nvidia-smi -L`"],
        id="old-mig-uuid-form",
    ),
    pytest.param(
        [gpu(mig=[{"uuid": "MIG-1", "profile": "1g5gb"}])],
        ["inventory[0] (GPU-aaaa) mig[0] (MIG-1)", "profile '1g5gb'", "must look like '1g.10gb'"],
        id="bad-mig-profile",
    ),
    pytest.param(
        [gpu(mig=[{"uuid": "MIG-1"}])],
        ["mig[0] (MIG-1)", "profile None", "must look like '1g.10gb'"],
        id="missing-mig-profile",
    ),
    pytest.param(
        [gpu(mig=[{"uuid": "MIG-1", "profile": "4g.20gb"}, {"uuid": "MIG-2", "profile": "4g.20gb"}])],
        ["inventory[0] (GPU-aaaa)", "use 8 compute slices but the GPU has 7", "remove MIG entries"],
        id="mig-compute-over",
    ),
    pytest.param(
        [gpu(mig=[{"uuid": f"MIG-{n}", "profile": "1g.5gb"} for n in range(8)])],
        ["inventory[0] (GPU-aaaa)", "use 8 compute slices but the GPU has 7"],
        id="eight-1g-on-a-seven-slice-gpu",
    ),
    pytest.param(
        [gpu(mig=[{"uuid": "MIG-1", "profile": "3g.20gb"}, {"uuid": "MIG-2", "profile": "3g.20gb"},
                  {"uuid": "MIG-3", "profile": "1g.5gb"}])],
        ["inventory[0] (GPU-aaaa)", "need 45 GB", "9/8 of the memory of a 40 GiB GPU",
         'remove MIG entries or correct "memory"'],
        id="mig-memory-over",
    ),
    pytest.param(
        [gpu(mig_compute_slices=4, mig=[{"uuid": "MIG-1", "profile": "4g.20gb"},
                                        {"uuid": "MIG-2", "profile": "1g.5gb"}])],
        ["use 5 compute slices but the GPU has 4"],
        id="mig-compute-over-on-a30",
    ),
    pytest.param(
        [t4(seats=5, memory_per_seat="4GiB", compute_share=0.2)],
        ["inventory[0] (GPU-cccc)", "5 seats × 4 GiB = 20 GiB exceeds the device's 16 GiB",
         "use at most 4 seats or at most 3.2 GiB per seat"],
        id="seats-over-memory",
    ),
    pytest.param(
        [t4(seats=4, memory_per_seat="4GiB", compute_share=0)],
        ["inventory[0] (GPU-cccc) shared", "compute_share 0 must be a number in (0, 1]"],
        id="compute-share-zero",
    ),
    pytest.param(
        [t4(seats=4, memory_per_seat="4GiB", compute_share=1.5)],
        ["inventory[0] (GPU-cccc) shared", "compute_share 1.5", "(0, 1]"],
        id="compute-share-above-one",
    ),
    pytest.param(
        [t4(seats=4, memory_per_seat="4GiB", compute_share="25%")],
        ["compute_share '25%'", "e.g. 0.25"],
        id="compute-share-not-a-number",
    ),
    pytest.param(
        [t4(seats=0, memory_per_seat="4GiB")],
        ["inventory[0] (GPU-cccc) shared", "seats 0 must be a whole number >= 1"],
        id="zero-seats",
    ),
    pytest.param(
        [t4(seats=4)],
        ["inventory[0] (GPU-cccc) shared", 'missing "memory_per_seat"', "'4GiB'"],
        id="missing-memory-per-seat",
    ),
    pytest.param(
        [t4(seats=4, memory_per_seat="4GiB", mps=True)],
        ["inventory[0] (GPU-cccc) shared", "unknown key 'mps'",
         "allowed keys: seats, memory_per_seat, compute_share"],
        id="unknown-shared-key",
    ),
    pytest.param(
        [gpu(memory="40 gigs")],
        ["inventory[0] (GPU-aaaa)", "unknown unit 'gigs'", "'10GiB'"],
        id="unknown-memory-unit",
    ),
    pytest.param(
        [t4(seats=2, memory_per_seat="4 GiBs")],
        ["inventory[0] (GPU-cccc) shared", "unknown unit 'GiBs'"],
        id="unknown-seat-memory-unit",
    ),
    pytest.param(
        [gpu(mig=[{"uuid": "MIG-1", "profile": "1g.5gb", "memory": "5 gigs"}])],
        ["mig[0] (MIG-1)", "unknown unit 'gigs'"],
        id="unknown-mig-memory-unit",
    ),
    pytest.param(
        [gpu(mig=[], shared={"seats": 2, "memory_per_seat": "4GiB"})],
        ["inventory[0] (GPU-aaaa)", 'both "mig" and "shared"', "remove one of them"],
        id="mig-and-shared",
    ),
    pytest.param(
        [gpu(index=0), gpu(uuid="GPU-bbbb", index=0)],
        ["inventory[1] (GPU-bbbb)", "index 0 is also used by inventory[0] (GPU-aaaa)",
         "give each GPU its own index"],
        id="duplicate-index",
    ),
    pytest.param(
        [gpu(index=-1)],
        ["inventory[0] (GPU-aaaa)", "index -1 must be a whole number >= 0"],
        id="negative-index",
    ),
    pytest.param(
        [gpu(compute_capability="Ampere")],
        ["inventory[0] (GPU-aaaa)", "compute_capability 'Ampere'", "'8.0'"],
        id="bad-compute-capability",
    ),
    pytest.param(
        ["GPU-aaaa"],
        ["inventory[0]:", "must be a dict such as"],
        id="entry-not-a-dict",
    ),
    pytest.param(
        [gpu(mig={"uuid": "MIG-1", "profile": "1g.5gb"})],
        ["inventory[0] (GPU-aaaa)", '"mig" must be a list'],
        id="mig-not-a-list",
    ),
    pytest.param(
        {"uuid": "GPU-aaaa"},
        ["c.GPULab.inventory must be a list of device dicts, got dict"],
        id="not-a-list",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "says"), BAD)
def test_bad_inventory_is_refused_naming_the_entry_and_the_fix(spec, says):
    with pytest.raises(InventoryError) as info:
        load_declared(spec)
    error = info.value
    assert isinstance(error, ValueError)
    (line,) = error.errors
    for part in says:
        assert part in line
    assert line in str(error)


def test_every_problem_is_reported_at_once():
    spec = [
        gpu(index=0, memroy="1"),
        {"uuid": "GPU-bbbb", "index": 0, "name": "Tesla T4", "memory": "16GiB"},
        gpu(uuid="GPU-cccc", index=2, mig=[{"uuid": "MIG-GPU-aaaa/1/0", "profile": "1g.5gb"}]),
    ]
    with pytest.raises(InventoryError) as info:
        load_declared(spec)
    errors = info.value.errors
    assert len(errors) == 3
    assert errors[0].startswith("inventory[0] (GPU-aaaa): unknown key 'memroy'")
    assert errors[1].startswith("inventory[1] (GPU-bbbb): index 0")
    assert errors[2].startswith("inventory[2] (GPU-cccc) mig[0] (MIG-GPU-aaaa/1/0)")
    assert str(info.value).splitlines()[0] == "invalid GPU inventory (3 problems):"


def test_load_shared_builds_settings_for_nvml_devices():
    settings = load_shared({A40_UUID: {"seats": 4, "memory_per_seat": "8GiB"}})
    assert settings == {A40_UUID: SharedSettings(seats=4, memory_bytes=8 * GiB, compute_share=0.25)}


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"0": {"seats": 2, "memory_per_seat": "4GiB"}}, "shared['0']: the key must be a GPU UUID"),
        ({A40_UUID: {"seats": 2, "memory_per_seat": 4 * MiB, "share": 0.5}}, "unknown key 'share'"),
        ({A40_UUID: {"seats": 2}}, f"shared['{A40_UUID}'] shared: missing \"memory_per_seat\""),
        ([A40_UUID], "must be a dict"),
    ],
)
def test_load_shared_refuses_bad_settings(spec, says):
    with pytest.raises(InventoryError) as info:
        load_shared(spec)
    assert any(says in e for e in info.value.errors)

"""The spawn form's rows and the course page say what holds a shared seat's cap in the words of
the admin page, My GPU and the status bar ("framework-capped, host-enforced" or "soft"), decided
by one function (``inventory.model.seat_check``) from what the lab's inventory says before a seat
is taken. Engine-free: a declared inventory, an image's labels from a stand-in engine."""

from __future__ import annotations

import pytest

from jupyterhub_gpulab.inventory.declared import load_declared
from jupyterhub_gpulab.inventory.model import HOST_ENFORCED, SOFT, Inventory, seat_check
from jupyterhub_gpulab.lab import images
from jupyterhub_gpulab.lab.profiles import load_profiles
from jupyterhub_gpulab.service.imageneeds import ImageNeeds
from jupyterhub_gpulab.service.web import seatview
from jupyterhub_gpulab.spawner.form import form_rows, render_form

pytestmark = pytest.mark.unit

T4 = {"uuid": "GPU-t4", "index": 0, "name": "Tesla T4", "memory": "16GiB",
      "shared": {"seats": 4, "memory_per_seat": "4GiB"}}  # fmt: skip
#: A vGPU guest: NVML lists no process's memory there, so only the framework hook holds a seat.
VGPU = {**T4, "uuid": "GPU-v", "index": 1, "name": "GRID T4-16Q", "vgpu_type": "T4-16Q"}
PROFILES = load_profiles(
    [{"slug": "seat", "display_name": "Seat", "image": "capped", "slice": {"kind": "shared"}},
     {"slug": "gpu", "display_name": "GPU", "image": "capped", "slice": {"kind": "gpu"}},
     {"slug": "cpu", "display_name": "CPU", "image": "capped"}]
)  # fmt: skip


def rows(inventory: Inventory | None, framework_cap: bool):
    return {
        r.slug: r
        for r in form_rows(
            PROFILES,
            lambda req: (4, 4),
            preselect=None,
            inventory=inventory,
            image_gate=lambda p: (p.slice, None, framework_cap),
        )  # fmt: skip
    }


def test_the_pages_words_come_from_the_one_function():
    assert (seat_check("shared", True), seat_check("shared", False)) == (HOST_ENFORCED, SOFT)
    assert seat_check("gpu", True) is None and seat_check(None, True) is None
    assert (seatview.HOST_ENFORCED, seatview.SOFT) == (HOST_ENFORCED, SOFT)
    assert HOST_ENFORCED == "framework-capped, host-enforced"


def test_a_form_row_of_seats_says_host_enforced_only_where_the_host_checks_a_capped_image():
    here = load_declared([T4])
    got = rows(here, framework_cap=True)
    assert got["seat"].seat_check == HOST_ENFORCED
    assert got["gpu"].seat_check is None and got["cpu"].seat_check is None
    html = render_form(list(got.values()), None)
    assert f'data-check="{HOST_ENFORCED}"' in html and f"seat cap: {HOST_ENFORCED}" in html
    # an image without the framework hook, a vGPU guest, or one soft seat among them: soft
    assert rows(here, framework_cap=False)["seat"].seat_check == SOFT
    assert rows(load_declared([VGPU]), framework_cap=True)["seat"].seat_check == SOFT
    assert rows(load_declared([T4, VGPU]), framework_cap=True)["seat"].seat_check == SOFT
    # seats on another node: the service's guard does not read them yet
    elsewhere = load_declared([T4], node="gpu-node-2")
    assert rows(elsewhere, framework_cap=True)["seat"].seat_check == SOFT
    assert rows(None, framework_cap=True)["seat"].seat_check == SOFT


class Engine:
    def __init__(self, labels):
        self.labels = labels

    def image_labels(self, image):
        return self.labels[image]


def test_the_course_page_says_what_the_form_says_of_its_profile():
    capped = {images.LABEL_SEAT_CAP: "framework"}
    needs = ImageNeeds(lambda: Engine({"capped": capped}))
    seat, gpu, _cpu = PROFILES
    assert needs.seat_check(seat, load_declared([T4])) == HOST_ENFORCED
    assert needs.seat_check(seat, load_declared([VGPU])) == SOFT
    assert needs.seat_check(gpu, load_declared([T4])) is None
    plain = ImageNeeds(lambda: Engine({"capped": {}}))
    assert plain.seat_check(seat, load_declared([T4])) == SOFT
    assert rows(load_declared([T4]), True)["seat"].seat_check == needs.seat_check(
        seat, load_declared([T4])
    )

"""dcgm-exporter's job-mapping files follow the ledger's claims and releases, read as
dcgm-exporter reads them (``dcgm_support.dcgm_read``)."""

from __future__ import annotations

import threading

import pytest
from dcgm_support import dcgm_read

from jupyterhub_gpulab.inventory import SliceKind, SliceRequest, discover, gpu_instance_ids
from jupyterhub_gpulab.ledger import Ledger
from jupyterhub_gpulab.ledger.jobmap import JobMap, job_id

A40 = SliceRequest(kind=SliceKind.GPU, model="A40")
P40 = SliceRequest(kind=SliceKind.GPU, model="P40")
MIG_1G = SliceRequest(kind=SliceKind.MIG, mig_profile="1g.5gb")


@pytest.fixture
def lab(tmp_path, fake_nvml):
    """A ledger over the fake mixed lab (P40 0, A40 1, A100 2 in MIG mode, H100 3) and a job map."""
    ledger = Ledger(f"sqlite:///{tmp_path / 'gpulab.sqlite'}")
    inventory = discover(node="n1", nvml=fake_nvml)
    ledger.sync_inventory(inventory, node="n1")
    folder = tmp_path / "dcgm-job-map"
    jobmap = JobMap(folder, ledger, "n1", lambda uuids: gpu_instance_ids(uuids, fake_nvml))
    jobmap.sync()
    ledger.listeners.append(jobmap)
    yield ledger, folder, inventory
    ledger.close()


def claim(ledger, request, user, server=""):
    return ledger.claim(request, user=user, profile="p", server_name=server, node="n1")


def test_a_claim_names_its_holder_in_the_gpus_file_before_it_returns_and_a_release_removes_it(lab):
    ledger, folder, _ = lab
    assert dcgm_read(folder) == {}
    ann = claim(ledger, A40, "ann")
    assert dcgm_read(folder) == {"1": ["ann"]}
    bob = claim(ledger, P40, "bob", "big-run")
    assert dcgm_read(folder) == {"0": ["bob/big-run"], "1": ["ann"]}
    assert ledger.release(ann.allocation.id, "stopped")
    assert dcgm_read(folder) == {"0": ["bob/big-run"]}
    assert ledger.release(bob.allocation.id, "stopped")
    assert dcgm_read(folder) == {}
    # nothing else was left in the folder that dcgm-exporter could mistake for a GPU
    assert {p.name for p in folder.iterdir()} == {".gpulab.lock"}


def test_mig_instances_are_named_by_gpu_index_and_gpu_instance_id(lab, fake_nvml):
    ledger, folder, inventory = lab
    first = claim(ledger, MIG_1G, "ann")
    second = claim(ledger, MIG_1G, "cat", "x")
    fake_nvml.nvmlInit()
    try:
        gi = {
            uuid: fake_nvml.nvmlDeviceGetGpuInstanceId(fake_nvml.nvmlDeviceGetHandleByUUID(uuid))
            for uuid in (first.slice.visible_id, second.slice.visible_id)
        }
    finally:
        fake_nvml.nvmlShutdown()
    assert len(set(gi.values())) == 2
    assert dcgm_read(folder) == {
        f"2.{gi[first.slice.visible_id]}": ["ann"],
        f"2.{gi[second.slice.visible_id]}": ["cat/x"],
    }
    ledger.release(first.allocation.id, "culled:gpu-idle")
    assert dcgm_read(folder) == {f"2.{gi[second.slice.visible_id]}": ["cat/x"]}


def test_shared_seats_list_every_holder_of_the_gpu(tmp_path):
    from ledger_support import lab_inventory

    ledger = Ledger(f"sqlite:///{tmp_path / 'gpulab.sqlite'}")
    ledger.sync_inventory(lab_inventory(), node="local")
    folder = tmp_path / "map"
    jobmap = JobMap(folder, ledger, "local")
    ledger.listeners.append(jobmap)
    seat = SliceRequest(kind=SliceKind.SHARED)
    try:
        a = claim_local(ledger, seat, "ann")
        claim_local(ledger, seat, "bob")
        assert dcgm_read(folder) == {"4": ["ann", "bob"]}
        ledger.release(a.allocation.id, "stopped")
        assert dcgm_read(folder) == {"4": ["bob"]}
        # MIG instances of a declared lab have no GPU instance id: no file, the claim still works
        claim_local(ledger, SliceRequest(kind=SliceKind.MIG, mig_profile="1g.5gb"), "cat")
        assert dcgm_read(folder) == {"4": ["bob"]}
    finally:
        ledger.close()


def claim_local(ledger, request, user):
    return ledger.claim(request, user=user, profile="p")


def test_sync_repairs_files_written_by_no_one_or_left_stale(lab):
    ledger, folder, _ = lab
    claim(ledger, A40, "ann")
    (folder / "1").write_text("someone-else\n")
    (folder / "0").write_text("stale\n")
    (folder / "notes.txt").write_text("not ours")
    JobMap(folder, ledger, "n1").sync()
    assert dcgm_read(folder) == {"1": ["ann"]}
    assert (folder / "notes.txt").read_text() == "not ours"


def test_two_processes_writing_the_same_folder_end_in_the_ledgers_state(lab, fake_nvml):
    """The hub claims while the service releases: each rewrites under the lock after its commit."""
    ledger, folder, _ = lab
    other = Ledger(str(ledger.engine.url))
    other.listeners.append(JobMap(folder, other, "n1"))
    held = [claim(ledger, A40, "ann"), claim(ledger, P40, "bob")]

    def churn(led, request, user):
        for _ in range(15):
            c = claim(led, request, user)
            led.release(c.allocation.id, "stopped")

    ledger.release(held[0].allocation.id, "stopped")
    ledger.release(held[1].allocation.id, "stopped")
    threads = [
        threading.Thread(target=churn, args=(ledger, A40, "ann")),
        threading.Thread(target=churn, args=(other, P40, "bob")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    final = claim(other, A40, "dan")
    assert dcgm_read(folder) == {"1": ["dan"]}
    other.release(final.allocation.id, "stopped")
    assert dcgm_read(folder) == {}
    other.close()


def test_a_folder_that_cannot_be_written_never_fails_a_claim(tmp_path, lab, caplog):
    ledger, _, _ = lab
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the folder should be")
    ledger.listeners.append(JobMap(blocked, ledger, "n1"))
    c = claim(ledger, A40, "ann")
    assert c.slice.device_name == "NVIDIA A40"
    assert ledger.release(c.allocation.id, "stopped")
    assert "listener" in caplog.text


def test_job_ids_are_one_line_each():
    assert job_id("ann") == "ann"
    assert job_id("ann", "gpu") == "ann/gpu"
    assert "\n" not in job_id("ann", "a\nb") and job_id("ann", "a\nb") == "ann/a\\nb"

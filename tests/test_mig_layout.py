"""Re-laying a MIG GPU between layouts (issue 22, lever 3a): ``gpulab mig-layout`` against the fake
NVML (``fake_nvml_mig.py``) and a SQLite ledger. The ledger must match NVML after each run, hold
no allocation on a destroyed MIG instance, and an NVML refusal is reported, not retried."""

from __future__ import annotations

import argparse

import pynvml
import pytest
from fake_nvml import FakeNVML
from miglayout_support import ledger_matches_nvml

import jupyterhub_gpulab.cli.miglayout as miglayout_cli
from jupyterhub_gpulab.cli import build_parser
from jupyterhub_gpulab.cli.miglayout import DRAIN_REASON, EXIT, cmd_mig_layout
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest, discover
from jupyterhub_gpulab.inventory.miglayout import (
    Instance,
    LayoutError,
    Profile,
    parse_layout,
    plan,
)
from jupyterhub_gpulab.ledger import Ledger

pytestmark = pytest.mark.unit

CLASS, RESEARCH = "7x1g.10gb", "2x3g.40gb"


@pytest.fixture
def lab(tmp_path):
    """``(fake NVML with one H100 as 7 × 1g.10gb, its GPU UUID, config path, ledger)``."""
    nvml = FakeNVML.h100_mig_lab(1)
    config = tmp_path / "jupyterhub_config.py"
    config.write_text(
        "c = get_config()  # noqa: F821\n"
        f"c.GPULab.db_url = 'sqlite:///{tmp_path / 'gpulab.sqlite'}'\n"
        "c.GPULab.inventory_source = 'nvml'\n"
        "c.GPULab.node_name = 'gpu1'\n"
    )
    ledger = Ledger(f"sqlite:///{tmp_path / 'gpulab.sqlite'}")
    ledger.sync_inventory(discover(node="gpu1", nvml=nvml), node="gpu1")
    yield nvml, nvml.gpus[0].uuid, config, ledger
    ledger.close()


def run(config, uuid, layout, nvml, wait=0.0):
    return cmd_mig_layout(
        argparse.Namespace(config=str(config), gpu=uuid, layout=layout, wait=wait), nvml=nvml
    )


def drained(ledger, uuid):
    return next(d for d in ledger.devices() if d["uuid"] == uuid)["drained"]


def claim(ledger, user="alice"):
    return ledger.claim(
        SliceRequest(kind=SliceKind.MIG, mig_profile="1g.10gb"), user=user, profile="mig"
    )


# -- the round trip ---------------------------------------------------------------------------------


def test_class_to_research_to_class_keeps_the_ledger_matching_nvml(lab, capsys):
    nvml, uuid, config, ledger = lab
    assert run(config, uuid, RESEARCH, nvml) == EXIT["done"]
    assert ledger_matches_nvml(ledger, nvml, uuid) == ["3g.40gb", "3g.40gb"]
    assert not drained(ledger, uuid)
    assert "is now 2x3g.40gb" in capsys.readouterr().out

    assert run(config, uuid, CLASS, nvml) == EXIT["done"]
    assert ledger_matches_nvml(ledger, nvml, uuid) == ["1g.10gb"] * 7
    assert not drained(ledger, uuid)
    assert claim(ledger).slice.mig_profile == "1g.10gb"  # the new instances are handed out

    assert run(config, uuid, "1x7g.80gb", nvml) == EXIT["refused"]  # that allocation holds it


def test_running_it_again_changes_nothing(lab, capsys):
    nvml, uuid, config, ledger = lab
    before = ledger_matches_nvml(ledger, nvml, uuid)
    ids = {m.uuid for m in nvml.gpus[0].migs}
    assert run(config, uuid, CLASS, nvml) == EXIT["done"]
    assert {m.uuid for m in nvml.gpus[0].migs} == ids  # no instance destroyed and re-made
    assert ledger_matches_nvml(ledger, nvml, uuid) == before
    assert "already is 7x1g.10gb" in capsys.readouterr().out


# -- refusals -------------------------------------------------------------------------------------


def test_an_open_allocation_is_refused_naming_its_holder(lab, capsys):
    nvml, uuid, config, ledger = lab
    held = claim(ledger, "alice")
    assert run(config, uuid, RESEARCH, nvml) == EXIT["refused"]
    err = capsys.readouterr().err
    assert "alice's server 'default'" in err and held.slice.id in err and "--wait" in err
    assert len(nvml.gpus[0].migs) == 7  # NVML untouched
    assert not drained(ledger, uuid)  # back as it was


def test_wait_drains_then_proceeds_once_the_holder_stops(lab, monkeypatch):
    nvml, uuid, config, ledger = lab
    held = claim(ledger, "alice")

    def sleep(_s):  # the holder's server stops while we wait
        assert drained(ledger, uuid)  # nothing new lands on it meanwhile
        ledger.release(held.allocation.id, "stopped")

    orig = miglayout_cli.relay
    monkeypatch.setattr(miglayout_cli, "relay", lambda *a, **kw: orig(*a, **kw, sleep=sleep))
    assert run(config, uuid, RESEARCH, nvml, wait=30) == EXIT["done"]
    assert ledger_matches_nvml(ledger, nvml, uuid) == ["3g.40gb", "3g.40gb"]


def test_nvml_in_use_is_reported_not_retried(lab, capsys):
    nvml, uuid, config, ledger = lab
    busy = nvml.gpus[0].migs[3]
    nvml.start_process(busy.uuid, 4242)  # a process the ledger does not know of
    assert run(config, uuid, RESEARCH, nvml) == EXIT["refused"]
    err = capsys.readouterr().err
    assert "in use" in err and "nvidia-smi" in err
    assert busy in nvml.gpus[0].migs  # its instance is still there
    ledger_matches_nvml(ledger, nvml, uuid)
    busy.pids.clear()
    assert run(config, uuid, RESEARCH, nvml) == EXIT["done"]  # the GPU was left to repair
    assert ledger_matches_nvml(ledger, nvml, uuid) == ["3g.40gb", "3g.40gb"]


def test_mig_mode_off_is_refused_and_mode_never_changed(tmp_path, capsys):
    nvml = FakeNVML.mixed_lab()
    h100 = nvml.gpus[3]
    config = tmp_path / "c.py"
    config.write_text(
        "c = get_config()  # noqa: F821\n"
        f"c.GPULab.db_url = 'sqlite:///{tmp_path / 'l.sqlite'}'\nc.GPULab.node_name = 'gpu1'\n"
    )
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    try:
        assert run(config, h100.uuid, "1x7g.80gb", nvml) == EXIT["refused"]
        assert "MIG mode is off" in capsys.readouterr().err
        assert h100.mig_mode == (pynvml.NVML_DEVICE_MIG_DISABLE,) * 2
        assert not drained(ledger, h100.uuid)
    finally:
        ledger.close()


def test_not_root_is_refused_saying_so(lab, capsys):
    nvml, uuid, config, ledger = lab
    nvml.gpus[0].root = False
    assert run(config, uuid, RESEARCH, nvml) == EXIT["refused"]
    assert "needs root" in capsys.readouterr().err
    assert len(nvml.gpus[0].migs) == 7


def test_a_declared_inventory_is_refused_saying_so(tmp_path, capsys):
    config = tmp_path / "c.py"
    config.write_text(
        "c = get_config()  # noqa: F821\n"
        f"c.GPULab.db_url = 'sqlite:///{tmp_path / 'l.sqlite'}'\n"
        "c.GPULab.inventory = [{'uuid': 'GPU-1', 'index': 0, 'name': 'A100', 'memory': '80GiB',"
        " 'mig': [{'uuid': 'MIG-1', 'profile': '3g.40gb'}]}]\n"
    )
    Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}").close()
    assert run(config, "GPU-1", RESEARCH, FakeNVML.h100_mig_lab(1)) == EXIT["refused"]
    assert "declared in c.GPULab.inventory" in capsys.readouterr().err


def test_a_profile_the_gpu_lacks_names_the_valid_ones(lab, capsys):
    nvml, uuid, config, ledger = lab
    assert run(config, uuid, "2x3g.20gb", nvml) == EXIT["usage"]
    assert "3g.40gb" in capsys.readouterr().err and len(nvml.gpus[0].migs) == 7
    with pytest.raises(LayoutError, match="COUNTxPROFILE"):
        parse_layout("seven small ones")
    assert parse_layout("1x4g.40gb, 1x3g.40gb") == ["4g.40gb", "3g.40gb"]


# -- a kill part way --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call", ["nvmlDeviceCreateGpuInstanceWithPlacement", "nvmlGpuInstanceCreateComputeInstance"]
)
def test_a_kill_after_the_destroys_is_finished_by_the_next_run(lab, call, capsys):
    nvml, uuid, config, ledger = lab
    nvml.fail_next(call, KeyboardInterrupt())  # the run dies after destroying the class layout
    with pytest.raises(KeyboardInterrupt):
        run(config, uuid, RESEARCH, nvml)
    assert drained(ledger, uuid)  # a killed run leaves it drained: nothing lands on it
    reason = next(d for d in ledger.devices() if d["uuid"] == uuid)["drain_reason"]
    assert reason.startswith(DRAIN_REASON)
    assert run(config, uuid, RESEARCH, nvml) == EXIT["done"]
    assert ledger_matches_nvml(ledger, nvml, uuid) == ["3g.40gb", "3g.40gb"]
    assert not drained(ledger, uuid) and not nvml.gpus[0].empty_gis


def test_a_failure_part_way_syncs_the_ledger_and_says_run_again(lab, capsys):
    nvml, uuid, config, ledger = lab
    nvml.fail_next("nvmlGpuInstanceCreateComputeInstance", pynvml.NVMLError_Unknown())
    assert run(config, uuid, RESEARCH, nvml) == EXIT["partial"]
    assert "run the same command again" in capsys.readouterr().err
    ledger_matches_nvml(ledger, nvml, uuid)  # the destroyed 1g.10gb instances are gone
    assert drained(ledger, uuid)
    assert run(config, uuid, RESEARCH, nvml) == EXIT["done"]
    assert ledger_matches_nvml(ledger, nvml, uuid) == ["3g.40gb", "3g.40gb"]


# -- the plan and the command line --------------------------------------------------------------------

H100 = {
    "1g.10gb": Profile("1g.10gb", 19, 1, 7, (0, 1, 2, 3, 4, 5, 6), 1),
    "3g.40gb": Profile("3g.40gb", 9, 3, 2, (0, 4), 4),
    "4g.40gb": Profile("4g.40gb", 5, 4, 1, (0,), 4),
}


def test_plan_keeps_what_fits_and_lays_out_again_what_does_not():
    cur = [Instance("1g.10gb", i + 1, i, cis=["ci"], complete=True) for i in range(7)]
    p = plan(cur, ["3g.40gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"], H100)
    assert [i.start for i in p.destroy] == [4, 5, 6] and p.create == [("3g.40gb", 4)]
    p = plan(cur[:1], ["4g.40gb", "3g.40gb"], H100)  # the 1g at 0 is in the 4g's way
    assert len(p.destroy) == 1 and p.create == [("4g.40gb", 0), ("3g.40gb", 4)]
    half = [Instance("3g.40gb", 1, 0, cis=[], complete=False)]  # killed before its CI
    p = plan(half, ["3g.40gb", "3g.40gb"], H100)
    assert p.finish == half and p.create == [("3g.40gb", 4)] and not p.destroy


def test_the_command_line_parses_mig_layout():
    args = build_parser().parse_args(["mig-layout", "-f", "c.py", "GPU-1", CLASS, "--wait", "60"])
    assert (args.gpu, args.layout, args.wait, args.func) == ("GPU-1", CLASS, 60.0, cmd_mig_layout)


def test_the_gpu_checks_round_trip_lays_out_and_back_and_reads_each(lab):
    """scripts/gpu-check.sh's opt-in layout check (GPU_CHECK_MIG_LAYOUT): to the research layout
    and back to the class layout, each read back from NVML."""
    from jupyterhub_gpulab.inventory.miglayout import LayoutRefused, round_trip

    nvml, uuid, _config, _ledger = lab
    out = round_trip(nvml, uuid, RESEARCH)
    assert out == {"before": CLASS, "during": RESEARCH, "after": CLASS, "ok": True}
    assert sorted(s.mig_profile for s in discover(node="gpu1", nvml=nvml).slices) == ["1g.10gb"] * 7
    nvml.start_process(nvml.gpus[0].migs[0].uuid, 4242)  # someone's process: refused, not forced
    with pytest.raises(LayoutRefused, match="in use"):
        round_trip(nvml, uuid, RESEARCH)

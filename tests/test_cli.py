"""The ``gpulab`` command as an admin runs it: look at the inventory, check a config (every error
at once), list allocations, upgrade the ledger. Called in-process through ``cli.main``; one test
runs the installed console script to prove the entry point and its exit status."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest
from cli_support import IMG, PROFILES, write_config
from ledger_support import LAB

from jupyterhub_gpulab.cli import main
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest, load_declared
from jupyterhub_gpulab.ledger import Ledger, db

REPO_CONFIG = Path(__file__).resolve().parents[1] / "jupyterhub_config.py"


@pytest.fixture
def db_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'gpulab.sqlite'}"


@pytest.fixture
def lab_config(tmp_path, db_url) -> Path:
    """A config declaring the test lab (tests/ledger_support.py LAB) with three profiles."""
    return write_config(
        tmp_path,
        f"c.GPULab.db_url = {db_url!r}\n"
        'c.GPULab.node_name = "gpu01"\n'
        f"c.GPULab.inventory = {LAB!r}\n"
        f"c.GPULab.profiles = {PROFILES!r}\n"
        'c.GPULab.group_policies = {"students": {"profiles": ["cpu", "seat"]}}\n',
    )


@pytest.fixture
def no_driver(monkeypatch):
    """This host as a GPU-less one, even where a driver exists: NVML cannot load its library."""

    def init():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", init)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# -- gpulab inventory ---------------------------------------------------------------------------


def test_inventory_json_lists_declared_devices_and_slices(capsys, lab_config):
    rc, out, _ = run(capsys, "inventory", "--json", "-f", str(lab_config))
    assert rc == 0
    inv = json.loads(out)
    assert inv["source"] == "declared"
    assert inv["node"] == "gpu01"
    assert inv["warnings"] == []
    assert [d["uuid"] for d in inv["devices"]] == [d["uuid"] for d in LAB]
    a100 = inv["devices"][0]
    assert a100["mig_enabled"] is True
    assert a100["memory_bytes"] == 40 * 2**30
    kinds = [s["kind"] for s in inv["slices"]]
    assert kinds.count("mig") == 4
    assert kinds.count("gpu") == 3
    assert kinds.count("shared") == 4
    seat = next(s for s in inv["slices"] if s["id"] == "GPU-t4s-0004/seat-0")
    assert (seat["isolation"], seat["memory_bytes"], seat["visible_id"]) == (
        "soft",
        7 * 2**30 // 2,
        "GPU-t4s-0004",
    )


def test_inventory_text_shows_each_gpu_with_its_slices(capsys, lab_config):
    rc, out, _ = run(capsys, "inventory", "-f", str(lab_config))
    assert rc == 0
    assert "source: declared" in out
    assert "node: gpu01" in out
    assert "GPU 0: NVIDIA A100-SXM4-40GB (MIG mode), 40 GiB" in out
    assert "MIG-a100-3g-0" in out
    assert "MIG 3g.20gb" in out
    assert "GPU 4: Tesla T4" in out
    assert "shared seat 4 of 4" in out
    assert "warning" not in out


def test_inventory_without_config_on_a_gpu_less_host(capsys, tmp_path, monkeypatch, no_driver):
    monkeypatch.chdir(tmp_path)  # no ./jupyterhub_config.py here
    rc, out, err = run(capsys, "inventory")
    assert rc == 0
    assert "source: none" in out
    assert "warning: the NVIDIA driver library libnvidia-ml.so.1 was not found" in out
    assert "CPU profiles still work" in out
    assert "no GPUs: only CPU-only profiles can be spawned" in out
    assert err == ""

    rc, out, _ = run(capsys, "inventory", "--json")
    assert rc == 0
    inv = json.loads(out)
    assert (inv["source"], inv["devices"], inv["slices"]) == ("none", [], [])
    (warning,) = inv["warnings"]
    assert "libnvidia-ml.so.1" in warning


def test_inventory_reads_the_config_in_the_current_directory(capsys, tmp_path, monkeypatch):
    write_config(tmp_path, f"c.GPULab.inventory = {LAB[1:2]!r}\n")
    monkeypatch.chdir(tmp_path)
    rc, out, _ = run(capsys, "inventory", "--json")
    assert rc == 0
    assert [d["uuid"] for d in json.loads(out)["devices"]] == ["GPU-a40-0001"]


# -- gpulab check-config ------------------------------------------------------------------------


def test_the_repository_config_checks_out(capsys, tmp_path, monkeypatch, no_driver):
    monkeypatch.setenv("GPULAB_STATE_DIR", str(tmp_path / "state"))  # the config creates it
    monkeypatch.delenv("GPULAB_DEMO", raising=False)
    rc, out, err = run(capsys, "check-config", "-f", str(REPO_CONFIG))
    assert rc == 0, err
    # after any warning about limits this host cannot give (the A40 profile's 64 GiB)
    assert any(line.startswith("OK: 3 GPU(s)") for line in out.splitlines()), out
    assert "CUDA context" not in out + err  # the demo's T4 seats fit beside their contexts
    assert (
        "from declared, 9 slice(s) (1 whole GPU, 4 MIG instance, 4 shared seat), 4 profile(s), 3 group policy(ies)"
        in out
    )


def test_a_good_config_is_summarised(capsys, lab_config):
    rc, out, _ = run(capsys, "check-config", "-f", str(lab_config))
    assert rc == 0
    assert out.strip() == (
        "OK: 5 GPU(s) from declared, 11 slice(s) (3 whole GPU, 4 MIG instance, 4 shared seat), "
        "3 profile(s), 1 group policy(ies)"
    )


SEATS = {"seats": 4, "memory_per_seat": "3GiB", "compute_share": 0.25}


def test_shared_devices_split_a_declared_whole_gpu_in_seats(capsys, lab_config):
    # it was read for NVML's GPUs only: on a declared inventory it gave 0 seats, and exit 0
    with lab_config.open("a") as f:
        f.write(f"c.GPULab.shared_devices = {{'GPU-t4-0002': {SEATS!r}}}\n")
    rc, out, err = run(capsys, "check-config", "-f", str(lab_config))
    assert rc == 0, err
    assert "14 slice(s) (2 whole GPU, 4 MIG instance, 8 shared seat)" in out


def test_shared_devices_on_a_gpu_declared_split_is_refused_by_name(capsys, lab_config):
    # GPU-t4s-0004 declares its own "shared" seats: which would hold is not for us to guess
    with lab_config.open("a") as f:
        f.write(f"c.GPULab.shared_devices = {{'GPU-t4s-0004': {SEATS!r}}}\n")
    rc, out, err = run(capsys, "check-config", "-f", str(lab_config))
    assert rc == 1 and "OK" not in out
    assert "inventory[4] (GPU-t4s-0004): declares 'shared'" in err
    assert "c.GPULab.shared_devices['GPU-t4s-0004']" in err


BAD_INVENTORY = [
    {"uuid": "GPU-dup-0000", "index": 0, "name": "NVIDIA A40", "memory": "48GiB"},
    {"uuid": "GPU-dup-0000", "index": 1, "name": "NVIDIA A40", "memory": "48GiB"},
    {
        "uuid": "GPU-a100-0002",
        "index": 2,
        "name": "NVIDIA A100-SXM4-40GB",
        "memory": "40GiB",
        "mig": [{"uuid": "MIG-GPU-0d3a7a3c-5b7e-4c1e-9d6f-a10000000000/1/0", "profile": "1g.5gb"}],
    },
    {
        "uuid": "GPU-t4-0003",
        "index": 3,
        "name": "Tesla T4",
        "memory": "16GiB",
        "shared": {"seats": 5, "memory_per_seat": "4GiB"},
    },
    {"uuid": "GPU-p40-0004", "index": 4, "name": "Tesla P40", "memory": "24 parsecs"},
]
BAD_PROFILES = [
    {"slug": "Bad_Slug", "display_name": "Bad", "image": IMG},
    {"slug": "cpu", "display_name": "CPU", "image": IMG, "env": {"NVIDIA_VISIBLE_DEVICES": "all"}},
]
#: Every error in the bad config, each as (what it is, phrases its line must hold).
BAD_CONFIG_ERRORS = {
    "duplicate uuid": ["inventory[1]", "duplicate UUID GPU-dup-0000", "inventory[0]"],
    "old MIG uuid form": ["inventory[2]", "old MIG-GPU-<uuid>/<gi>/<ci> form", "MIG-<uuid>"],
    "seats too big": ["inventory[3]", "5 seats × 4 GiB = 20 GiB exceeds the device's 16 GiB"],
    "unknown unit": ["inventory[4]", "unknown unit 'parsecs'"],
    "bad slug": ["profiles[0]", "slug 'Bad_Slug' is not DNS-safe"],
    "reserved env": ["profiles[1]", "env NVIDIA_VISIBLE_DEVICES is set by gpulab"],
    "unknown profile in policy": ["group_policies['students']", "'no-such-profile'"],
}


@pytest.fixture
def bad_config(tmp_path) -> Path:
    return write_config(
        tmp_path,
        f"c.GPULab.inventory = {BAD_INVENTORY!r}\n"
        f"c.GPULab.profiles = {BAD_PROFILES!r}\n"
        'c.GPULab.group_policies = {"students": {"profiles": ["no-such-profile"]}}\n',
        name="bad_config.py",
    )


def test_a_bad_config_exits_1_listing_every_error(capsys, bad_config):
    rc, out, err = run(capsys, "check-config", "-f", str(bad_config))
    assert rc == 1
    assert "OK" not in out
    lines = [line for line in err.splitlines() if line.startswith("  - ")]
    assert f"{len(BAD_CONFIG_ERRORS)} error(s)" in err
    assert len(lines) == len(BAD_CONFIG_ERRORS)
    missing = [
        what
        for what, phrases in BAD_CONFIG_ERRORS.items()
        if not any(all(p in line for p in phrases) for line in lines)
    ]
    assert not missing, f"not reported: {missing}\n{err}"


def test_one_bad_profile_does_not_make_policies_name_unknown_profiles(capsys, tmp_path):
    profiles = [PROFILES[0], {**PROFILES[2], "cpu_limit": -1}]
    config = write_config(
        tmp_path,
        f"c.GPULab.inventory = {LAB!r}\nc.GPULab.profiles = {profiles!r}\n"
        'c.GPULab.group_policies = {"students": {"profiles": ["cpu", "seat"]}}\n',
    )
    rc, _, err = run(capsys, "check-config", "-f", str(config))
    assert rc == 1
    assert "cpu_limit -1" in err
    assert "unknown profile" not in err


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["check-config", "-f"], id="check-config"),
        pytest.param(["inventory", "-f"], id="inventory"),
        pytest.param(["allocations", "-f"], id="allocations"),
        pytest.param(["upgrade-db", "-f"], id="upgrade-db"),
    ],
)
def test_a_missing_config_file_exits_2_saying_where_it_looked(capsys, tmp_path, argv):
    missing = tmp_path / "nowhere" / "jupyterhub_config.py"
    rc, out, err = run(capsys, *argv, str(missing))
    assert rc == 2
    assert out == ""
    assert f"no config file at {missing}" in err
    assert not (tmp_path / "nowhere").exists()


def test_check_config_needs_a_file(capsys):
    with pytest.raises(SystemExit) as e:
        main(["check-config"])
    assert e.value.code == 2
    assert "-f/--config" in capsys.readouterr().err


# -- gpulab allocations / upgrade-db ------------------------------------------------------------


@pytest.fixture
def held(db_url):
    """Two open allocations (alice's MIG on server 'lab', bob's seat) and one released."""
    ledger = Ledger(db_url)
    ledger.sync_inventory(load_declared(LAB, node="gpu01"), node="gpu01")
    mig = ledger.claim(
        SliceRequest(kind=SliceKind.MIG, mig_profile="1g.5gb"),
        user="alice",
        profile="mig-small",
        server_name="lab",
        node="gpu01",
    )
    seat = ledger.claim(SliceRequest(kind=SliceKind.SHARED), user="bob", profile="seat")
    gone = ledger.claim(SliceRequest(kind=SliceKind.SHARED), user="carol", profile="seat")
    ledger.release(gone.allocation.id, "stopped")
    ledger.close()
    return mig, seat, gone


def test_allocations_lists_open_ones(capsys, lab_config, held):
    mig, seat, _ = held
    rc, out, _ = run(capsys, "allocations", "-f", str(lab_config))
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "id", "user", "server", "profile", "node", "since", "(UTC)", "slice"
    ]  # fmt: skip
    alice = next(line for line in lines if " alice " in line)
    assert " lab " in alice
    assert " gpu01 " in alice  # the node it runs on
    assert "mig-small" in alice
    assert f"{mig.slice.id} (NVIDIA A100-SXM4-40GB)" in alice
    bob = next(line for line in lines if " bob " in line)
    assert f"{seat.slice.id} (Tesla T4)" in bob
    assert "carol" not in out  # released
    assert len(lines) == 3


def test_allocations_json(capsys, lab_config, held):
    mig, seat, _ = held
    rc, out, _ = run(capsys, "allocations", "--json", "-f", str(lab_config))
    assert rc == 0
    rows = {r["user"]: r for r in json.loads(out)}
    assert set(rows) == {"alice", "bob"}
    alice = rows["alice"]
    assert alice["id"] == mig.allocation.id
    assert (alice["slice_id"], alice["server_name"], alice["profile"]) == (
        mig.slice.id,
        "lab",
        "mig-small",
    )
    assert (alice["kind"], alice["device_name"]) == ("mig", "NVIDIA A100-SXM4-40GB")
    assert alice["ended_at"] is None
    assert alice["started_at"].startswith(str(mig.allocation.started_at.year))
    assert (rows["bob"]["kind"], rows["bob"]["server_name"]) == ("shared", "")


def test_allocations_on_an_empty_ledger(capsys, lab_config):
    assert run(capsys, "allocations", "-f", str(lab_config))[:2] == (0, "no open allocations\n")
    assert run(capsys, "allocations", "--json", "-f", str(lab_config))[:2] == (0, "[]\n")


def test_upgrade_db_on_a_fresh_database_prints_the_revision(capsys, lab_config, db_url):
    head = db.head_revision()
    rc, out, _ = run(capsys, "upgrade-db", "-f", str(lab_config))
    assert (rc, out) == (0, f"ledger schema: empty -> {head}\n")
    rc, out, _ = run(capsys, "upgrade-db", "-f", str(lab_config))
    assert (rc, out) == (0, f"ledger schema: {head} -> {head}\n")
    assert db.current_revision(db.make_engine(db_url)) == head


# -- the installed console script ---------------------------------------------------------------


def test_the_installed_gpulab_command_reports_errors_with_exit_status_1(bad_config):
    exe = shutil.which("gpulab", path=os.path.dirname(sys.executable)) or shutil.which("gpulab")
    assert exe, "the gpulab console script is not installed (pip install -e .)"
    proc = subprocess.run(
        [exe, "check-config", "-f", str(bad_config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert f"{len(BAD_CONFIG_ERRORS)} error(s)" in proc.stderr
    assert "duplicate UUID GPU-dup-0000" in proc.stderr


def test_check_config_warns_about_profiles_no_gpu_can_serve(capsys, tmp_path):
    profiles = [
        *PROFILES,
        {
            "slug": "huge",
            "display_name": "Huge",
            "image": "i",
            "slice": {"kind": "mig", "mig_profile": "7g.80gb"},
        },
    ]
    config = write_config(
        tmp_path, f"c.GPULab.inventory = {LAB!r}\nc.GPULab.profiles = {profiles!r}\n"
    )
    assert main(["check-config", "-f", str(config)]) == 0
    out = capsys.readouterr().out
    assert (
        "profile 'huge' asks for MIG 7g.80gb, which no GPU in this inventory (declared) provides"
        in out
    )


def test_check_config_lists_bad_service_settings_too(capsys, tmp_path):
    config = write_config(
        tmp_path,
        f"c.GPULab.inventory = {LAB!r}\nc.GPULab.profiles = {PROFILES!r}\n"
        'c.GPULabService.cull_every = "soon"\n',
    )
    assert main(["check-config", "-f", str(config)]) == 1
    err = capsys.readouterr().err
    assert "c.GPULabService" in err and "soon" in err


def test_a_swarm_lab_is_checked_with_the_swarm_spawners_rules(capsys, tmp_path):
    base = (
        'c.JupyterHub.spawner_class = "gpulab-swarm"\n'
        'c.GPULab.inventory_source = "agents"\n'
        f"c.GPULab.profiles = {PROFILES!r}\n"
    )
    config = write_config(tmp_path, base)
    assert main(["check-config", "-f", str(config)]) == 0
    out = capsys.readouterr().out
    assert "every node's GPUs from its node agent" in out
    assert "asks for" not in out  # no profile is "greyed out" before the agents report
    assert main(["inventory", "-f", str(config)]) == 0
    assert "`gpulab nodes` lists them" in capsys.readouterr().out
    bad = write_config(
        tmp_path,
        base + 'c.GPUSwarmSpawner.extra_container_spec = {"env": ["NVIDIA_VISIBLE_DEVICES=all"]}\n'
        'c.GPUSwarmSpawner.extra_task_spec = {"restart_policy": {"Condition": "any"}}\n',
    )
    assert main(["check-config", "-f", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "extra_container_spec may not set env" in err
    assert "extra_task_spec may not set restart_policy" in err


def test_check_config_reads_a_home_relative_sqlite_file_as_the_ledger_opens_it(
    tmp_path, monkeypatch
):
    """``sqlite:///~/lab/gpulab.sqlite``: check-config looks for the folder in the admin's home,
    where the ledger makes and opens the file (``db.sqlite_file``), not for a folder named ``~``."""
    from jupyterhub_gpulab.cli.checkconfig import _db_url_errors

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    url = "sqlite:///~/lab/gpulab.sqlite"
    (missing,) = _db_url_errors(url)
    assert f"the folder {tmp_path / 'lab'} does not exist" in missing
    (tmp_path / "lab").mkdir()
    assert _db_url_errors(url) == []

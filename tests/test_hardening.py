"""Container hardening without an engine: the HostConfig builder, profile overrides and their
validation, the spawner's settings (``remove``, ``pids_limit``, ``cap_add``) and what
``gpulab check-config`` says about them. The containers themselves: test_spawner_hardening.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from traitlets import TraitError
from traitlets.config import Config

from jupyterhub_gpulab import cli
from jupyterhub_gpulab.cli import checkconfig
from jupyterhub_gpulab.errors import ConfigError
from jupyterhub_gpulab.lab.hardening import (
    ADDABLE_CAPABILITIES,
    DEFAULT_PIDS_LIMIT,
    cap_add_problems,
    limit_warnings,
)
from jupyterhub_gpulab.lab.profiles import load_profiles
from jupyterhub_gpulab.spawner import GPUDockerSpawner
from jupyterhub_gpulab.spawner import container as ct

GiB = 2**30
IMG = "gpulab/singleuser"
CPU = {"slug": "cpu", "display_name": "CPU only", "image": IMG}
WHERE = "profiles[1] ('tight')"


def tight(**keys) -> list[dict]:
    return [CPU, {"slug": "tight", "display_name": "Tight", "image": IMG, **keys}]


def spawner(**sections) -> GPUDockerSpawner:
    """A spawner built from config ``{section: {trait: value}}`` (validators run)."""
    c = Config()
    for section, traits in sections.items():
        for k, v in traits.items():
            c[section][k] = v
    return GPUDockerSpawner(config=c)


# -- the builder --------------------------------------------------------------------------------


def test_every_container_drops_all_capabilities_and_gains_no_privileges():
    hc = ct.hardening(pids_limit=4096)
    assert hc == {
        "Privileged": False,
        "PidsLimit": 4096,
        "SecurityOpt": ["no-new-privileges:true"],
        "CapDrop": ["ALL"],
        "CapAdd": None,
    }


def test_added_capabilities_are_written_as_docker_writes_them():
    assert ct.hardening(pids_limit=64, cap_add=["SETUID", "CHOWN"])["CapAdd"] == [
        "CAP_CHOWN",
        "CAP_SETUID",
    ]


@pytest.mark.parametrize("theirs", ["no-new-privileges:false", "no-new-privileges=false"])
def test_the_admins_security_options_are_kept_but_never_new_privileges(theirs):
    hc = ct.hardening(pids_limit=64, security_opt=["seccomp=/etc/lab.json", theirs])
    assert hc["SecurityOpt"] == ["seccomp=/etc/lab.json", "no-new-privileges:true"]


# -- profile overrides --------------------------------------------------------------------------


def test_a_profile_may_set_its_pid_limit_and_add_back_default_capabilities():
    p = load_profiles(tight(pids_limit=256, cap_add=["cap_chown", "SETUID", "chown"]))[1]
    assert p.pids_limit == 256
    assert p.cap_add == ("CHOWN", "SETUID")
    plain = load_profiles(tight())[1]
    assert plain.pids_limit is None and plain.cap_add is None


@pytest.mark.parametrize(
    ("keys", "fragments"),
    [
        pytest.param({"cap_add": ["SYS_ADMIN"]}, ["'SYS_ADMIN' is refused", "escape"], id="sys-admin"),
        pytest.param({"cap_add": ["ALL"]}, ["'ALL' is refused"], id="all"),
        pytest.param({"cap_add": ["NET_ADMIN", "CHOWN"]}, ["'NET_ADMIN' is refused"], id="net-admin"),
        pytest.param({"cap_add": ["SYS_PTRACE"]}, ["'SYS_PTRACE' is refused"], id="ptrace"),
        pytest.param({"cap_add": ["CHWON"]}, ["'CHWON' is not a Linux capability", "CHOWN"], id="typo"),
        pytest.param({"cap_add": "CHOWN"}, ["cap_add must be a list", "['CHOWN']"], id="not-a-list"),
        pytest.param({"cap_add": [7]}, ["cap_add entries must be capability names"], id="not-a-name"),
        pytest.param({"pids_limit": 0}, ["pids_limit 0 is no limit", "fork bomb"], id="pids-zero"),
        pytest.param({"pids_limit": -1}, ["pids_limit -1 is no limit"], id="pids-unlimited"),
        pytest.param({"pids_limit": 10}, ["pids_limit 10 is too few", "at least 64"], id="pids-few"),
        pytest.param({"pids_limit": "many"}, ["pids_limit must be a whole number"], id="pids-str"),
        pytest.param({"pids_limit": True}, ["pids_limit must be a whole number"], id="pids-bool"),
        pytest.param({"privileged": True}, ["key 'privileged' is refused"], id="privileged"),
        pytest.param({"security_opt": ["no-new-privileges:false"]}, ["key 'security_opt' is refused"], id="security-opt"),
    ],
)  # fmt: skip
def test_a_bad_hardening_override_is_a_config_error_naming_the_profile(keys, fragments):
    with pytest.raises(ConfigError) as info:
        load_profiles(tight(**keys))
    (error,) = info.value.errors
    assert error.startswith(WHERE)
    for f in fragments:
        assert f in error


def test_only_dockers_default_capabilities_may_be_added_back():
    caps, problems = cap_add_problems(list(ADDABLE_CAPABILITIES))
    assert caps == tuple(sorted(ADDABLE_CAPABILITIES)) and problems == []
    assert "SYS_ADMIN" not in ADDABLE_CAPABILITIES and len(ADDABLE_CAPABILITIES) == 14


# -- the spawner's settings ---------------------------------------------------------------------


@pytest.mark.parametrize("section", ["DockerSpawner", "GPUDockerSpawner", "Spawner"])
def test_remove_false_is_refused_when_the_spawner_loads_its_config(section):
    with pytest.raises(ValueError, match="remove = False is refused") as info:
        spawner(**{section: {"remove": False}})
    assert "c.DockerSpawner.volumes" in str(info.value)


def test_containers_are_removed_by_default():
    assert spawner().remove is True


def test_the_lab_wide_defaults_harden_every_container():
    s = spawner()
    assert s.pids_limit == DEFAULT_PIDS_LIMIT and s.cap_add == []
    assert s.hardening_for(None)["CapDrop"] == ["ALL"]


def test_a_profile_overrides_the_lab_wide_pid_limit_and_capabilities():
    s = spawner(GPUDockerSpawner={"pids_limit": 2048, "cap_add": ["kill"]})
    cpu, tight_ = load_profiles(tight(pids_limit=128, cap_add=["CHOWN"]))
    assert s.hardening_for(cpu)["PidsLimit"] == 2048
    assert s.hardening_for(cpu)["CapAdd"] == ["CAP_KILL"]
    assert s.hardening_for(tight_)["PidsLimit"] == 128
    assert s.hardening_for(tight_)["CapAdd"] == ["CAP_CHOWN"]
    none_added = load_profiles(tight(cap_add=[]))[1]
    assert s.hardening_for(none_added)["CapAdd"] is None


@pytest.mark.parametrize(
    ("traits", "fragment"),
    [
        ({"pids_limit": 0}, "c.GPUDockerSpawner.pids_limit 0 is no limit"),
        ({"cap_add": ["SYS_ADMIN"]}, "c.GPUDockerSpawner.cap_add 'SYS_ADMIN' is refused"),
    ],
)
def test_bad_lab_wide_hardening_is_refused(traits, fragment):
    with pytest.raises(TraitError, match=fragment):
        spawner(GPUDockerSpawner=traits)


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        pytest.param({"privileged": True}, "extra_host_config['privileged'] is refused", id="privileged"),
        pytest.param({"cap_add": ["SYS_ADMIN"]}, "extra_host_config['cap_add'] is refused", id="cap-add"),
        pytest.param({"pids_limit": -1}, "extra_host_config['pids_limit'] is refused", id="pids"),
        pytest.param({"devices": ["/dev/nvidia0"]}, "extra_host_config['devices'] is refused", id="devices"),
        pytest.param({"security_opt": ["no-new-privileges:false"]}, "may not set no-new-privileges", id="nnp"),
    ],
)  # fmt: skip
def test_the_admins_extra_host_config_cannot_undo_the_hardening(extra, fragment):
    with pytest.raises(TraitError, match=re.escape(fragment)):
        spawner(DockerSpawner={"extra_host_config": extra})


def test_other_extra_host_config_is_kept():
    extra = {"shm_size": "1g", "security_opt": ["seccomp=/etc/lab.json"]}
    assert spawner(DockerSpawner={"extra_host_config": extra}).extra_host_config == extra


# -- limits larger than the host ----------------------------------------------------------------


def test_a_64_gib_profile_on_a_24_gib_host_is_warned_about():
    warnings = limit_warnings(
        [
            ("profile 'a40'", 8, 64 * GiB),
            ("profile 'cpu'", 1, 4 * GiB),
            ("profile 'x'", None, None),
        ],
        host_cpus=16,
        host_memory=24 * GiB,
    )
    assert warnings == [
        "profile 'a40': mem_limit 64 GiB is more than this host's memory (24 GiB); "
        "it limits nothing here"
    ]
    assert limit_warnings([("p", 32, None)], host_cpus=16, host_memory=GiB) == [
        "p: cpu_limit 32 cores is more than this host's 16; it limits nothing here"
    ]


# -- gpulab check-config ------------------------------------------------------------------------

LAB = [{"uuid": "GPU-a40", "index": 0, "name": "NVIDIA A40", "memory": "48GiB"}]


def check(capsys, tmp_path: Path, body: str) -> tuple[int, str, str]:
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(f"c = get_config()  # noqa: F821\nc.GPULab.inventory = {LAB!r}\n{body}")
    rc = cli.main(["check-config", "-f", str(path)])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("section", ["DockerSpawner", "GPUDockerSpawner"])
def test_check_config_refuses_remove_false(capsys, tmp_path, section):
    rc, out, err = check(
        capsys, tmp_path, f"c.GPULab.profiles = [{CPU!r}]\nc.{section}.remove = False\n"
    )
    assert rc == 1
    assert "1 error(s)" in err and "remove = False is refused" in err
    assert "OK" not in out


def test_check_config_builds_the_spawner_from_a_config_that_sets_its_image(capsys, tmp_path):
    body = f"c.GPULab.profiles = [{CPU!r}]\nc.DockerSpawner.image = {IMG!r}\n"
    rc, out, err = check(capsys, tmp_path, body)
    assert rc == 0, err
    assert out.splitlines()[-1].startswith("OK: 1 GPU(s)")


def test_check_config_names_the_profile_with_a_dangerous_capability(capsys, tmp_path):
    rc, _, err = check(capsys, tmp_path, f"c.GPULab.profiles = {tight(cap_add=['SYS_ADMIN'])!r}\n")
    assert rc == 1
    assert f"c.GPULab.{WHERE}: cap_add 'SYS_ADMIN' is refused" in err


def test_check_config_refuses_privileged_containers_by_the_back_door(capsys, tmp_path):
    body = f"c.GPULab.profiles = [{CPU!r}]\nc.DockerSpawner.extra_host_config = {{'privileged': True}}\n"
    rc, _, err = check(capsys, tmp_path, body)
    assert rc == 1 and "extra_host_config['privileged'] is refused" in err


def test_check_config_refuses_a_lab_wide_pid_limit_that_limits_nothing(capsys, tmp_path):
    rc, _, err = check(
        capsys, tmp_path, f"c.GPULab.profiles = [{CPU!r}]\nc.GPUDockerSpawner.pids_limit = -1\n"
    )
    assert rc == 1 and "c.GPUDockerSpawner.pids_limit -1 is no limit" in err


def test_check_config_warns_about_limits_larger_than_the_host(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(checkconfig, "host_resources", lambda: (16, 24 * GiB))
    profiles = [
        {**CPU, "mem_limit": "4G"},
        {"slug": "a40", "display_name": "A40", "image": IMG, "mem_limit": "64G", "cpu_limit": 8},
        {"slug": "inherits", "display_name": "Inherits", "image": IMG},
    ]
    rc, out, _ = check(
        capsys,
        tmp_path,
        f"c.GPULab.profiles = {profiles!r}\nc.DockerSpawner.cpu_limit = 32.0\n",
    )
    assert rc == 0
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: profile 'cpu': cpu_limit 32 cores is more than this host's 16; it limits "
        "nothing here",
        "warning: profile 'a40': mem_limit 64 GiB is more than this host's memory (24 GiB); "
        "it limits nothing here",
        "warning: profile 'inherits': cpu_limit 32 cores is more than this host's 16; it limits "
        "nothing here",
    ]
    assert any(line.startswith("OK: 1 GPU(s)") for line in out.splitlines()), out


def test_check_config_measures_this_host(capsys, tmp_path):
    # no stand-in: a 64 TiB profile is more than any machine running these tests
    big = {"slug": "huge", "display_name": "Huge", "image": IMG, "mem_limit": "64T"}
    rc, out, _ = check(capsys, tmp_path, f"c.GPULab.profiles = {[big]!r}\n")
    assert rc == 0
    assert "warning: profile 'huge': mem_limit 64 TiB is more than this host's memory" in out


def test_check_config_lists_every_bad_spawner_setting_not_only_the_first(capsys, tmp_path):
    body = (
        f"c.GPULab.profiles = [{CPU!r}]\n"
        "c.DockerSpawner.remove = False\n"
        "c.DockerSpawner.extra_host_config = {'privileged': True}\n"
        "c.GPUDockerSpawner.pids_limit = -1\n"
    )
    rc, out, err = check(capsys, tmp_path, body)
    assert rc == 1 and "OK" not in out
    assert "3 error(s)" in err, err
    assert "remove = False is refused" in err
    assert "extra_host_config['privileged'] is refused" in err
    assert "c.GPUDockerSpawner.pids_limit -1 is no limit" in err


@pytest.mark.parametrize(
    ("url", "says"),
    [
        pytest.param("garbage", "is not a database URL", id="not-a-url"),
        pytest.param("mysql://x/y", "driver is not installed", id="missing-driver"),
        pytest.param("nosuchdb://x/y", "knows no database", id="unknown-database"),
        pytest.param(
            "sqlite:////nonexistent-gpulab-dir/x.sqlite", "does not exist", id="no-folder"
        ),
    ],
)
def test_check_config_says_what_is_wrong_with_the_database_url(capsys, tmp_path, url, says):
    body = f"c.GPULab.profiles = [{CPU!r}]\nc.GPULab.db_url = {url!r}\n"
    rc, out, err = check(capsys, tmp_path, body)
    assert rc == 1, out
    assert says in err and "Traceback" not in err
    assert "OK" not in out


def test_check_config_names_a_setting_that_does_nothing_and_the_one_meant(capsys, tmp_path):
    """A typo in gpulab's own settings is ignored by traitlets (the lab would run without its
    policies): check-config says which line does nothing and what was meant."""
    rc, out, _ = check(
        capsys,
        tmp_path,
        f"c.GPULab.profiles = [{CPU!r}]\n"
        "c.GPULab.policies = {'students': {'max_slices_per_user': 1}}\n"
        "c.GPULabService.cull_evry = 60\n",
    )
    assert rc == 0
    assert (
        "warning: c.GPULab.policies is not a setting of GPULab: it does nothing; "
        "did you mean c.GPULab.group_policies?" in out
    )
    assert "c.GPULabService.cull_evry is not a setting of GPULabService" in out
    assert "did you mean c.GPULabService.cull_every?" in out
    rc, out, _ = check(capsys, tmp_path, f"c.GPULab.profiles = [{CPU!r}]\n")
    assert rc == 0 and "not a setting" not in out

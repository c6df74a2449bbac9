"""The service's process as a traitlets Application: ``--help-all`` lists every
``c.GPULabService`` setting (durations, the closed choices' values), ``--generate-config``
prints them as a config section that loads as the defaults, a bad value stops it naming the
accepted forms, and the command line ``configure_service`` writes still parses."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from traitlets.config import Config

from jupyterhub_gpulab.hub.hubconfig import configure_service
from jupyterhub_gpulab.lab.config import load_config_file
from jupyterhub_gpulab.service.app import GPULabService
from jupyterhub_gpulab.service.launcher import GPULabServiceApp


def service(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m jupyterhub_gpulab.service *args`` (never listening: no service URL)."""
    environ = {k: v for k, v in os.environ.items() if k != "JUPYTERHUB_SERVICE_URL"}
    return subprocess.run(
        [sys.executable, "-m", "jupyterhub_gpulab.service", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**environ, **(env or {})},
    )


def test_help_all_lists_the_settings_with_choices_and_duration_defaults():
    out = service("--help-all")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for name in ("cull_every", "cull_warn_before", "utilization_history", "max_sample_gap"):
        assert f"--GPULabService.{name}=<Duration>" in text
    assert "Default: '1m'" in text and "Default: '10m'" in text
    assert "--GPULabService.unknown_utilization=<ChoiceEnum>" in text
    assert "any of ['busy', 'idle']" in text
    for option in ("--config", "--hub-pid", "--log-level", "--generate-config"):
        assert option in text


def test_generate_config_prints_every_setting_as_loadable_defaults(tmp_path):
    out = service("--generate-config")
    assert out.returncode == 0, out.stderr
    assignments = [
        line[2:] for line in out.stdout.splitlines() if line.startswith("# c.GPULabService.")
    ]
    names = {a.split("=")[0].strip().split(".")[-1] for a in assignments}
    assert names == set(GPULabService.class_traits(config=True))
    path = tmp_path / "generated.py"
    path.write_text(out.stdout + "\n" + "\n".join(assignments) + "\n")  # every line uncommented
    settings = GPULabService(config=load_config_file(path))
    defaults = GPULabService()
    for name in names:
        assert getattr(settings, name) == getattr(defaults, name), name


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        pytest.param("unknown_utilization=maybe", ["'busy'", "'idle'"], id="choice"),
        pytest.param("cull_every=soon", ["'90s', '30m'", "a number of seconds"], id="duration"),
    ],
)
@pytest.mark.parametrize("where", ["file", "command-line"])
def test_a_bad_setting_stops_the_service_naming_the_accepted_forms(tmp_path, setting, says, where):
    name, value = setting.split("=")
    config = tmp_path / "jupyterhub_config.py"
    if where == "file":
        config.write_text(f"c.GPULabService.{name} = {value!r}\n")
        out = service("--config", str(config))
    else:
        config.write_text("")
        out = service("--config", str(config), f"--GPULabService.{setting}")
    assert out.returncode == 1
    assert "gpulab service cannot start" in out.stderr
    assert f"c.GPULabService.{name} {value!r}" in out.stderr
    for text in says:
        assert text in out.stderr


def test_a_missing_config_file_is_named(tmp_path):
    out = service("--config", str(tmp_path / "nope.py"))
    assert out.returncode == 1
    assert f"no config file at {tmp_path / 'nope.py'}" in out.stderr


def test_configure_services_command_line_still_parses(tmp_path):
    path = tmp_path / "jupyterhub_config.py"
    path.write_text('c.GPULabService.cull_every = "20s"\nc.GPULabService.cull_dry_run = True\n')
    c = Config()
    configure_service(c, config_file=str(path))
    command = c.JupyterHub.services[-1]["command"]
    assert command[1:3] == ["-m", "jupyterhub_gpulab.service"]
    app = GPULabServiceApp()
    app.initialize(command[3:])
    assert app.config_file == str(path) and app.hub_pid == os.getpid()
    settings = GPULabService(config=app.config)
    assert settings.cull_every == 20.0 and settings.cull_dry_run is True


def test_the_command_line_wins_over_the_file_and_gpulab_config_names_the_file(tmp_path):
    path = tmp_path / "hub.py"
    path.write_text('c.GPULabService.cull_every = "20s"\nc.GPULabService.cull_dry_run = True\n')
    app = GPULabServiceApp()
    os.environ["GPULAB_CONFIG"] = str(path)
    try:
        app.initialize(["--GPULabService.cull_every=10m", "--log-level=debug"])
    finally:
        del os.environ["GPULAB_CONFIG"]
    assert app.config_file == str(path)
    assert app.log_level == "DEBUG" or app.log_level == 10
    settings = GPULabService(config=app.config)
    assert settings.cull_every == 600.0 and settings.cull_dry_run is True

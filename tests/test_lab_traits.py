"""Durations stored in seconds and closed choices, as an admin writes them in config.

``Duration`` takes seconds or ``"90s"``/``"10m"``/``"4h"`` and stores float seconds; ``Choice``
refuses a value outside its set naming every value. Both refuse with the setting's name and the
accepted forms, at config load (the hub's, the service's, ``gpulab check-config``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from traitlets import TraitError
from traitlets.config import Config

from jupyterhub_gpulab.service.app import GPULabService
from jupyterhub_gpulab.spawner import GPUDockerSpawner


@pytest.mark.parametrize(
    ("written", "seconds"),
    [
        pytest.param(90, 90.0, id="int"),
        pytest.param(1.5, 1.5, id="float"),
        pytest.param("90s", 90.0, id="90s"),
        pytest.param("10m", 600.0, id="10m"),
        pytest.param("4h", 4 * 3600.0, id="4h"),
        pytest.param("30", 30.0, id="string-of-seconds"),
    ],
)
def test_a_duration_is_stored_in_seconds_however_it_is_written(written, seconds):
    c = Config()
    c.GPULabService.cull_every = written
    c.GPULabService.sample_interval = written
    settings = GPULabService(config=c)
    assert settings.cull_every == seconds and isinstance(settings.cull_every, float)
    assert settings.sample_interval == seconds


def test_duration_defaults_are_seconds():
    settings = GPULabService()
    assert settings.cull_every == 60.0
    assert settings.cull_warn_before == 600.0
    assert settings.utilization_history == 4 * 3600.0
    assert settings.max_sample_gap == 120.0
    assert settings.hub_poll_interval == 30.0


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("soon", id="word"),
        pytest.param("10 parsecs", id="unknown-unit"),
        pytest.param(-5, id="negative"),
        pytest.param(True, id="bool"),
        pytest.param([60], id="list"),
    ],
)
def test_a_bad_duration_is_refused_naming_the_setting_and_the_forms(bad):
    with pytest.raises(TraitError) as e:
        GPULabService(max_sample_gap=bad)
    message = str(e.value)
    assert "c.GPULabService.max_sample_gap" in message
    assert "a number of seconds" in message and "'90s', '30m'" in message


@pytest.mark.parametrize("name", ["cull_every", "hub_poll_interval", "sample_interval"])
def test_an_interval_of_zero_is_refused(name):
    with pytest.raises(TraitError, match=f"c.GPULabService.{name} must be longer than 0 s"):
        GPULabService(**{name: 0})


def test_a_warning_ahead_of_zero_is_allowed():
    assert GPULabService(cull_warn_before="0s").cull_warn_before == 0.0


def test_the_spawners_reconcile_interval_is_a_duration():
    user = SimpleNamespace(name="traits")
    assert GPUDockerSpawner(user=user, reconcile_interval="2m").reconcile_interval == 120.0
    with pytest.raises(TraitError, match="reconcile_interval must be longer than 0 s"):
        GPUDockerSpawner(user=user, reconcile_interval=0)


def test_unknown_utilization_refuses_other_values_naming_both():
    assert GPULabService(unknown_utilization="idle").unknown_utilization == "idle"
    with pytest.raises(TraitError) as e:
        GPULabService(unknown_utilization="maybe")
    assert "c.GPULabService.unknown_utilization 'maybe'" in str(e.value)
    assert "'busy'" in str(e.value) and "'idle'" in str(e.value)


def test_attach_mode_refuses_other_values_naming_every_mode():
    user = SimpleNamespace(name="traits")
    assert GPUDockerSpawner(user=user, attach_mode="cdi").attach_mode == "cdi"
    with pytest.raises(TraitError) as e:
        GPUDockerSpawner(user=user, attach_mode="nvidia")
    assert "c.GPUDockerSpawner.attach_mode 'nvidia'" in str(e.value)
    for mode in ("device_request", "cdi", "env"):
        assert repr(mode) in str(e.value)


def test_the_hubs_help_lists_the_attach_modes():
    trait = GPUDockerSpawner.class_traits()["attach_mode"]
    help_text = GPUDockerSpawner.class_get_trait_help(trait)
    assert "Choices: any of ['device_request', 'cdi', 'env']" in help_text

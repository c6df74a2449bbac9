"""``jupyterhub_gpulab.configure(c, …)``: the one call of ``jupyterhub_config.py``. It makes what
the four ``configure_*`` calls made, in their order, and no I/O while the config file loads: the
ledger is opened and the service's cookie secret read (or written) when the hub's ``JupyterHub``
application takes its settings, in the hub process only (engine-free: the real JupyterHub
application class loads the config, as ``jupyterhub -f`` does)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from jupyterhub.app import JupyterHub
from traitlets.config import Config

import jupyterhub_gpulab
from jupyterhub_gpulab.courses.hubhook import configure_courses, prestart_token
from jupyterhub_gpulab.hub.hubconfig import configure_prometheus, configure_service
from jupyterhub_gpulab.lab.config import load_config_file
from jupyterhub_gpulab.service.app import read_cookie_secret

REPO = Path(__file__).resolve().parents[1]
SSO = {
    "provider": "keycloak",
    "issuer": "https://sso.example.edu/realms/campus",
    "client_id": "jupyterhub",
    "client_secret": "s3cret",
    "callback_url": "https://hub.example.edu/hub/oauth_callback",
    "admin_groups": ["gpu-admins"],
}


def lab_config(state: Path) -> Config:
    c = Config()
    c.GPULab.db_url = f"sqlite:///{state}/gpulab.sqlite"
    c.GPULab.profiles = [{"slug": "cpu", "display_name": "CPU", "image": "x"}]
    c.GPULabService.cookie_secret_file = str(state / "gpulab_cookie_secret")
    c.Authenticator.admin_users = {"admin"}
    c.GPULabCourses.courses = [
        {"slug": "dl101", "title": "Deep learning 101", "roster_group": "dl101",
         "staff_group": "dl101-staff", "profiles": ["cpu"]}
    ]  # fmt: skip
    return c


def hub_settings(c: Config) -> dict:
    """What the hub takes from ``c`` at its start (the real JupyterHub application class)."""
    app = JupyterHub(config=c)
    return {
        "load_roles": app.load_roles,
        "services": app.services,
        "custom_scopes": app.custom_scopes,
        "extra_user_scopes": set(app.extra_user_scopes),
        "authenticator_class": c.JupyterHub.authenticator_class,
        "server_token_scopes": c.Spawner.server_token_scopes,
        "authenticator": dict(c.GPULabOAuthenticator),
    }


def test_config_load_opens_no_ledger_and_writes_no_secret_until_the_hub_starts(tmp_path):
    c = lab_config(tmp_path)
    jupyterhub_gpulab.configure(c, config_file=tmp_path / "jupyterhub_config.py")
    # the config file has run: nothing on disk yet; what it knows is readable as a list
    assert sorted(os.listdir(tmp_path)) == []
    assert [r["name"] for r in c.JupyterHub.load_roles] == [
        "gpulab-admin", "gpulab-reader", "gpulab-service",
    ]  # fmt: skip
    assert callable(c.Spawner.pre_spawn_hook)

    hub = hub_settings(c)  # the hub starts
    roles = {r["name"]: r for r in hub["load_roles"]}
    assert roles["gpulab-course-dl101-staff"]["groups"] == ["dl101-staff"]
    assert "servers!group=dl101" in roles["gpulab-course-dl101-prestart"]["scopes"]
    assert {"admin:groups", "servers"} <= set(roles["gpulab-service"]["scopes"])
    secret = read_cookie_secret(tmp_path / "gpulab_cookie_secret")  # written at the start
    [prestart] = [s for s in hub["services"] if s["name"] == "gpulab-prestart-dl101"]
    assert prestart["api_token"] == prestart_token(secret, "dl101")
    assert {"gpulab", "gpulab-prestart-dl101"} == {s["name"] for s in hub["services"]}


def test_one_call_makes_what_the_four_calls_made(tmp_path):
    from jupyterhub_gpulab.auth.presets import configure_sso

    old = lab_config(tmp_path)
    options = dict(SSO)
    configure_sso(old, options.pop("provider"), **options)
    configure_service(old, config_file=tmp_path / "jupyterhub_config.py",
                      admin_groups=["gpu-admins"], reader_groups=["instructors"])  # fmt: skip
    configure_prometheus(old, api_token="prom-token")
    configure_courses(old)

    new = lab_config(tmp_path)
    jupyterhub_gpulab.configure(
        new, config_file=tmp_path / "jupyterhub_config.py", admin_groups=["gpu-admins"],
        reader_groups=["instructors"], sso=SSO, prometheus_token="prom-token",
    )  # fmt: skip
    before, after = hub_settings(old), hub_settings(new)
    for key in before:
        assert after[key] == before[key], key
    assert after["authenticator_class"].endswith("GPULabOAuthenticator")
    assert "prometheus" in {s["name"] for s in after["services"]}


def test_without_courses_no_course_hook_roles_or_tokens(tmp_path):
    c = lab_config(tmp_path)
    jupyterhub_gpulab.configure(c, config_file=tmp_path / "c.py", courses=False)
    hub = hub_settings(c)
    assert not any(r["name"].startswith("gpulab-course-") for r in hub["load_roles"])
    assert [s["name"] for s in hub["services"]] == ["gpulab"]
    assert "pre_spawn_hook" not in c.Spawner
    assert sorted(os.listdir(tmp_path)) == []


def test_course_servers_are_taken_out_of_the_admins_named_server_limit(tmp_path):
    c = lab_config(tmp_path)
    c.JupyterHub.named_server_limit_per_user = 3
    jupyterhub_gpulab.configure(c, config_file=tmp_path / "c.py")
    assert callable(c.JupyterHub.named_server_limit_per_user)  # test_courses: what it counts
    c = lab_config(tmp_path)
    c.JupyterHub.named_server_limit_per_user = 3
    jupyterhub_gpulab.configure(c, config_file=tmp_path / "c.py", courses=False)
    assert c.JupyterHub.named_server_limit_per_user == 3
    c = lab_config(tmp_path)  # no limit set: none made
    jupyterhub_gpulab.configure(c, config_file=tmp_path / "c.py")
    assert "named_server_limit_per_user" not in c.JupyterHub


def test_an_sso_without_a_provider_is_refused_with_the_choices(tmp_path):
    with pytest.raises(ValueError, match="provider.*keycloak"):
        jupyterhub_gpulab.configure(
            lab_config(tmp_path), config_file=tmp_path / "c.py", sso={"client_id": "x"}
        )


def test_loading_the_example_config_writes_neither_ledger_nor_secret(tmp_path, monkeypatch):
    """The service and ``gpulab`` load the same file as the hub: loading it (what every one
    of them does first) leaves the state folder empty."""
    monkeypatch.setenv("GPULAB_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPULAB_DEMO", "1")
    c = load_config_file(str(REPO / "jupyterhub_config.py"))
    assert not (tmp_path / "state").exists()  # the hub makes it (hub/demo.py's StateDir)
    assert [co["slug"] for co in c.GPULabCourses.courses] == ["dl101"]
    hub = hub_settings(c)
    assert "gpulab-prestart-dl101" in {s["name"] for s in hub["services"]}
    assert "gpulab_cookie_secret" in os.listdir(tmp_path / "state")

"""``jupyterhub_gpulab.configure`` in a real ``jupyterhub -f`` start: the courses' pre-start
token, made only when the hub starts (from the service's cookie secret, written then), is a
token the hub knows, with the roster-only scopes of its course (a hub subprocess, no engine)."""

from __future__ import annotations

import os

from hubtools import Hub

from jupyterhub_gpulab.courses.hubhook import prestart_token
from jupyterhub_gpulab.service.app import read_cookie_secret

COURSE = {
    "slug": "dl101", "title": "Deep learning 101", "roster_group": "dl101",
    "staff_group": "dl101-staff", "profiles": ["cpu"],
}  # fmt: skip


def test_the_hub_knows_the_pre_start_token_made_at_its_start(tmp_path):
    secret_file = tmp_path / "gpulab_cookie_secret"
    hub = Hub(
        tmp_path,
        f"""
c.GPULab.profiles = [{{"slug": "cpu", "display_name": "CPU", "image": "x"}}]
c.GPULabService.cookie_secret_file = "{secret_file}"
c.GPULabCourses.courses = [{COURSE!r}]
import jupyterhub_gpulab
jupyterhub_gpulab.configure(c, config_file=__file__, managed=False, api_token="{"ab" * 16}")
""",
    )
    hub.write_config()
    from jupyterhub_gpulab.lab.config import load_config_file

    load_config_file(str(hub.config_path))  # what the service and `gpulab` do first
    assert not secret_file.exists() and "gpulab.sqlite" not in os.listdir(tmp_path)
    hub.start()
    try:
        token = prestart_token(read_cookie_secret(secret_file), "dl101")
        r = hub.api("GET", "/user", headers={"Authorization": f"token {token}"})
        assert r.status_code == 200, r.text
        me = r.json()
        assert (me["kind"], me["name"]) == ("service", "gpulab-prestart-dl101")
        assert "servers!group=dl101" in me["scopes"]
        assert not any(s.startswith("admin:") for s in me["scopes"])
        # the config file's own entries are kept: its test service's token still works
        assert hub.api("GET", "/users").status_code == 200
    finally:
        hub.stop()

"""The demo's switch to single sign-on (GPULAB_DEMO_AUTH=oidc ./scripts/demo.sh): its local
identity provider starts and serves the demo users, and the repository's jupyterhub_config.py in
that mode maps each demo user's Keycloak-shaped claims to the groups, profiles and budget the
dummy-login demo gives them (checked with ``gpulab check-config`` and ``gpulab check-auth``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import requests
from hubtools import free_port
from service_support import require_or_skip
from sso_support import idp_problem

from jupyterhub_gpulab.cli import main

pytestmark = [pytest.mark.sso]
REPO = Path(__file__).resolve().parents[1]
CONFIG = str(REPO / "jupyterhub_config.py")
DEMO_USERS = json.loads((REPO / "scripts/idp/demo-users.json").read_text())


@pytest.fixture
def oidc_mode(monkeypatch):
    monkeypatch.setenv("GPULAB_DEMO_AUTH", "oidc")
    monkeypatch.setenv("GPULAB_DEMO", "1")


def test_demo_idp_starts_and_serves_the_demo_users(tmp_path):
    require_or_skip(idp_problem(), "The local OpenID Connect provider")
    port = free_port()
    env = dict(os.environ, GPULAB_STATE_DIR=str(tmp_path), GPULAB_IDP_PORT=str(port))
    r = subprocess.run(
        ["bash", str(REPO / "scripts/demo-idp.sh")], env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    try:
        assert r.returncode == 0, r.stderr
        issuer = r.stdout.strip().splitlines()[-1]
        assert issuer == f"http://127.0.0.1:{port}/realms/campus"  # a Keycloak realm's
        origin = f"http://127.0.0.1:{port}"
        meta = requests.get(origin + "/.well-known/openid-configuration", timeout=5).json()
        assert meta["issuer"] == issuer
        assert meta["authorization_endpoint"] == issuer + "/protocol/openid-connect/auth"
        assert "groups" in meta["claims_supported"]
        assert json.loads((tmp_path / "idp-users.json").read_text()) == DEMO_USERS
    finally:
        pid = (tmp_path / "idp.pid").read_text().strip()
        os.kill(int(pid), signal.SIGTERM)


@pytest.mark.parametrize(
    "user, groups, profile, budget",
    [
        ("student1", ["dl101", "students"], "pytorch-mig", "5 GPU-hours per week (students)"),
        ("researcher1", ["researchers"], "pytorch-a40", None),
        ("instructor1", ["dl101-staff", "instructors"], "cpu", None),
    ],
)
def test_demo_users_get_their_demo_groups_through_sso(
    oidc_mode, tmp_path, capsys, user, groups, profile, budget
):
    claims = tmp_path / "claims.json"
    claims.write_text(json.dumps(DEMO_USERS[user]))
    assert main(["check-auth", "-f", CONFIG, "--json", str(claims)]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["username"] == user and r["groups"] == groups
    assert profile in r["profiles"] and r["budget"] == budget


def test_demo_admin_and_overage_user(oidc_mode, tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps(DEMO_USERS["admin"]))
    assert main(["check-auth", "-f", CONFIG, "--json", str(tmp_path / "a.json")]) == 0
    assert json.loads(capsys.readouterr().out)["admin"] is True
    (tmp_path / "o.json").write_text(json.dumps(DEMO_USERS["entra-overage"]))
    assert main(["check-auth", "-f", CONFIG, str(tmp_path / "o.json")]) == 1
    assert "group-overage" in capsys.readouterr().out


def test_the_demo_config_in_sso_mode_passes_check_config(oidc_mode, capsys, tmp_path):
    assert main(["check-config", "-f", CONFIG]) == 0
    # and the hub-refusing combination is caught: SSO-managed groups plus load_groups
    cfg = tmp_path / "jupyterhub_config.py"
    cfg.write_text(
        Path(CONFIG).read_text().replace('c.Authenticator.admin_users = {"admin"}',
                 'c.Authenticator.admin_users = {"admin"}\nc.JupyterHub.load_groups = {"x": {}}')
    )  # fmt: skip
    assert main(["check-config", "-f", str(cfg)]) == 1
    assert "c.JupyterHub.load_groups" in capsys.readouterr().err


@pytest.mark.parametrize("mode", ["dummy", "oidc"])
def test_the_demo_course_and_its_people_are_there_in_both_login_modes(
    monkeypatch, tmp_path, capsys, mode
):
    """The README's Quick start lists dl101 with the students on its roster and instructor1 on
    its staff: the demo declares it whichever login it uses, and the login gives its people its
    groups (the dummy login through load_groups, SSO through the provider's claims)."""
    from jupyterhub_gpulab.lab.config import load_config_file

    monkeypatch.setenv("GPULAB_DEMO", "1")
    monkeypatch.setenv("GPULAB_DEMO_AUTH", mode)
    c = load_config_file(CONFIG)
    [course] = [x for x in c.GPULabCourses.courses if x["slug"] == "dl101"]
    roster, staff = course["roster_group"], course["staff_group"]
    if mode == "dummy":
        groups = c.JupyterHub.load_groups
        members = {g: set(groups[g]["users"]) for g in (roster, staff)}
    else:
        members = {roster: set(), staff: set()}
        for user, claims in DEMO_USERS.items():
            (tmp_path / "c.json").write_text(json.dumps(claims))
            main(["check-auth", "-f", CONFIG, "--json", str(tmp_path / "c.json")])
            for g in json.loads(capsys.readouterr().out).get("groups") or []:
                if g in members:
                    members[g].add(user)
    assert members == {roster: {"student1", "student2", "student3"}, staff: {"instructor1"}}


@pytest.mark.parametrize("idle", ["3m", "20m"])
def test_the_readmes_short_gpu_idle_demo_passes_check_config(monkeypatch, capsys, idle):
    # README: "GPULAB_DEMO_GPU_IDLE=3m ./scripts/demo.sh" to watch the culler; the demo course's
    # 15-minute lead was not shorter than 3 minutes of GPU idle, and check-config stopped the demo
    monkeypatch.setenv("GPULAB_DEMO", "1")
    monkeypatch.setenv("GPULAB_DEMO_GPU_IDLE", idle)
    assert main(["check-config", "-f", CONFIG]) == 0, capsys.readouterr().err

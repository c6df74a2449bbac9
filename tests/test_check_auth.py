"""``gpulab check-auth`` and the SSO part of ``gpulab check-config``, as an admin runs them: paste
a token's claims (JSON or the token itself), see the groups, policies, profiles and budget a login
gets, or the login error; a bad group mapping is listed with the config's other errors."""

from __future__ import annotations

import json

import jwt
import pytest
from ledger_support import LAB

from jupyterhub_gpulab.cli import main

PROFILES = [
    {"slug": "cpu", "display_name": "CPU", "image": "i", "default": True},
    {
        "slug": "mig",
        "display_name": "MIG",
        "image": "i",
        "slice": {"kind": "mig", "mig_profile": "1g.5gb"},
    },
    {
        "slug": "whole",
        "display_name": "GPU",
        "image": "i",
        "slice": {"kind": "gpu"},
        "groups": ["researchers"],
    },
]
POLICIES = {
    "students": {
        "profiles": ["mig", "cpu"],
        "max_slices_per_user": 1,
        "gpu_hours": 5,
        "period": "week",
    },
    "researchers": {"max_slices_per_user": 2},
}


def write(tmp_path, extra: str = "") -> str:
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(
        "c = get_config()  # noqa: F821\n"
        f"c.GPULab.inventory = {LAB!r}\nc.GPULab.profiles = {PROFILES!r}\n"
        f"c.GPULab.group_policies = {POLICIES!r}\n"
        "from jupyterhub_gpulab.auth.presets import configure_sso\n"
        'configure_sso(c, "keycloak", issuer="https://sso.uni/realms/campus", client_id="hub",'
        ' client_secret="s", admin_groups=["gpu-admins"])\n' + extra
    )
    return str(path)


def test_keycloak_student_claims_show_groups_profiles_and_budget(tmp_path, capsys):
    claims = tmp_path / "claims.json"
    claims.write_text(json.dumps({"preferred_username": "ana", "groups": ["/students", "/x/y"]}))
    assert main(["check-auth", "-f", write(tmp_path), str(claims)]) == 0
    out = capsys.readouterr().out
    assert "username: ana" in out and "groups:   students" in out
    assert "dropped '/x/y'" in out
    assert "profiles: cpu, mig" in out
    assert "budget:   5 GPU-hours per week (students)" in out


def test_a_pasted_jwt_is_read_and_a_researcher_gets_research_profiles(tmp_path, capsys):
    token = jwt.encode(
        {"preferred_username": "rui", "groups": ["/researchers"]},
        "a-32-byte-long-test-signing-key!",
        "HS256",
    )
    assert main(["check-auth", "-f", write(tmp_path), "--json", token]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["groups"] == ["researchers"] and "whole" in r["profiles"]
    assert r["budget"] is None and r["user_limit"] == 2 and r["admin"] is False


def test_overage_claims_show_the_login_error_and_exit_1(tmp_path, capsys, monkeypatch):
    import io

    monkeypatch.setattr(
        "sys.stdin", io.StringIO('{"preferred_username": "eve", "hasgroups": true}')
    )
    assert main(["check-auth", "-f", write(tmp_path), "-"]) == 1
    out = capsys.readouterr().out
    assert "login refused (group-overage)" in out


def test_claims_without_a_user_name_show_the_login_error(tmp_path, capsys):
    for claims in ({"groups": ["/students"]}, {"preferred_username": ["a", "b"]}):
        assert main(["check-auth", "-f", write(tmp_path), json.dumps(claims)]) == 1
        out = capsys.readouterr().out
        assert "login refused (malformed-claim)" in out and "no usable user name" in out


def test_unreadable_claims_are_a_usage_error(tmp_path, capsys):
    assert main(["check-auth", "-f", write(tmp_path), "[1, 2]"]) == 2
    assert "must be a JSON object" in capsys.readouterr().err


def test_check_config_lists_a_bad_group_mapping(tmp_path, capsys):
    cfg = write(
        tmp_path,
        'c.GPULabOAuthenticator.group_rename = {"x": "has/slash"}\n'
        'c.GPULabOAuthenticator.group_patterns = {"(a": "b"}\n',
    )
    assert main(["check-config", "-f", cfg]) == 1
    err = capsys.readouterr().err
    assert "c.GPULabOAuthenticator.group_patterns" in err


@pytest.mark.parametrize("body", ["", 'c.GPULabOAuthenticator.group_rename = {"x": "a/b"}\n'])
def test_check_config_checks_rename_targets(tmp_path, capsys, body):
    assert main(["check-config", "-f", write(tmp_path, body)]) == (1 if body else 0)
    if body:
        assert "'a/b'" in capsys.readouterr().err


def test_check_auth_explains_an_lti_launch_with_its_course(tmp_path, capsys):
    cfg = tmp_path / "jupyterhub_config.py"
    cfg.write_text(
        "c = get_config()  # noqa: F821\n"
        f"c.GPULab.inventory = {LAB!r}\nc.GPULab.profiles = {PROFILES!r}\n"
        f"c.GPULab.group_policies = {POLICIES!r}\n"
        'c.JupyterHub.authenticator_class = "gpulab-lti13"\n'
        'c.GPULabLTI13Authenticator.context_groups = {"42": "ml101", "43": "bad/name"}\n'
    )
    launch = {
        "email": "lea@uni.example",
        "https://purl.imsglobal.org/spec/lti/claim/roles": [
            "http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"
        ],
        "https://purl.imsglobal.org/spec/lti/claim/context": {"id": "42"},
    }
    assert main(["check-auth", "-f", str(cfg), "--json", json.dumps(launch)]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["groups"] == ["ml101", "students"] and r["course"] == "context '42' -> ml101"
    assert r["profiles"] == ["cpu", "mig"]
    assert main(["check-config", "-f", str(cfg)]) == 1
    assert "'bad/name' is not a valid group name" in capsys.readouterr().err


def test_check_config_warns_about_policy_groups_no_login_can_be_in(tmp_path, capsys):
    cfg = write(
        tmp_path,
        'c.GPULabOAuthenticator.group_rename = {"6a1f-students-oid": "students"}\n'
        "c.GPULabOAuthenticator.group_keep_unmapped = False\n"
        "c.GPULabOAuthenticator.group_strip_prefixes = []\n",
    )
    assert main(["check-config", "-f", cfg]) == 0
    out = capsys.readouterr().out
    assert "group policy 'researchers' names group 'researchers', which the authenticator" in out
    assert "group policy 'students'" not in out
    # Keycloak's preset keeps every group: nothing can be said, nothing is warned
    assert main(["check-config", "-f", write(tmp_path)]) == 0
    assert "never produces" not in capsys.readouterr().out


def test_groups_owner_says_who_owns_rosters(tmp_path):
    from jupyterhub_gpulab.auth.groupsowner import groups_owner
    from jupyterhub_gpulab.lab.config import load_config_file

    sso = groups_owner(load_config_file(write(tmp_path)))
    assert sso.kind == "oidc" and not sso.may_edit and sso.refresh_age == 300
    assert "from the identity provider" in sso.describe("ml101")
    assert sso.can_produce("anything") is None  # keycloak keeps every group
    lti = tmp_path / "lti.py"
    lti.write_text(
        'c = get_config()  # noqa: F821\nc.JupyterHub.authenticator_class = "gpulab-lti13"\n'
        'c.GPULabLTI13Authenticator.context_groups = {"42": "ml101"}\n'
    )
    owner = groups_owner(load_config_file(lti))
    assert owner.kind == "lti" and not owner.may_edit
    assert owner.can_produce("ml101") and owner.can_produce("ml101-staff")
    assert owner.can_produce("ml102") is False and "LMS" in owner.describe("ml101")
    hub = tmp_path / "hub.py"
    hub.write_text('c = get_config()  # noqa: F821\nc.JupyterHub.authenticator_class = "dummy"\n')
    assert groups_owner(load_config_file(hub)).may_edit


def test_check_config_warns_when_the_crypt_key_is_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("JUPYTERHUB_CRYPT_KEY", raising=False)
    assert main(["check-config", "-f", write(tmp_path)]) == 0
    assert "warning: JUPYTERHUB_CRYPT_KEY is not set here" in capsys.readouterr().out
    monkeypatch.setenv("JUPYTERHUB_CRYPT_KEY", "ab" * 32)
    assert main(["check-config", "-f", write(tmp_path)]) == 0
    assert "JUPYTERHUB_CRYPT_KEY" not in capsys.readouterr().out


def test_allowed_groups_refuse_everyone_else(tmp_path, capsys):
    cfg = write(
        tmp_path,
        'configure_sso(c, "keycloak", issuer="https://sso.uni/realms/campus", client_id="hub",'
        ' client_secret="s", allowed_groups=["students"])\n',
    )
    rui = json.dumps({"preferred_username": "rui", "groups": ["/researchers"]})
    assert main(["check-auth", "-f", cfg, rui]) == 1
    assert "allowed:  NO" in capsys.readouterr().out
    ana = json.dumps({"preferred_username": "ana", "groups": ["/students"]})
    assert main(["check-auth", "-f", cfg, ana]) == 0

"""The group mapping an admin configures for campus SSO: each provider's claim shape lands in the
groups gpulab's rules name, unreadable claims are refused (never a partial or foreign answer), and
the settings are checked. Pure: no hub, no provider (the real-provider tests are test_sso_oidc)."""

from __future__ import annotations

import logging
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from traitlets.config import Config

from jupyterhub_gpulab.auth.groupmap import ClaimError, GroupMapping, valid_group_name
from jupyterhub_gpulab.auth.oidc import GPULabOAuthenticator, LoginRefused
from jupyterhub_gpulab.auth.presets import PRESETS, configure_sso

ENTRA_STUDENTS = "6a1f0b6e-3d2c-4a57-9d1e-0c7a3f1b2e4d"
ENTRA_STAFF = "0b7c2d3e-4f5a-4b6c-8d7e-9f0a1b2c3d4e"


def mapping(provider: str, **kw) -> GroupMapping:
    """The mapping configure_sso gives for ``provider`` (the presets admins start from)."""
    c = Config()
    configure_sso(
        c, provider, client_id="x", client_secret="y", issuer="https://idp", tenant="t", **kw
    )
    return GPULabOAuthenticator(config=c).group_mapping


@pytest.mark.parametrize(
    "provider, claims, kw, expected",
    [
        pytest.param(
            "keycloak",
            {"groups": ["/students", "/gpu-admins", "/faculty/cs/staff"]},
            {},
            ["gpu-admins", "students"],  # a nested path is no valid group name: dropped
            id="keycloak-full-paths",
        ),
        pytest.param(
            "entra",
            {"groups": [ENTRA_STUDENTS, "ffffffff-0000-0000-0000-000000000000"]},
            {"rename": {ENTRA_STUDENTS: "students", ENTRA_STAFF: "staff"}},
            ["students"],  # unknown object ids are dropped
            id="entra-object-ids",
        ),
        pytest.param(
            "okta", {"groups": ["students", "Everyone"]}, {}, ["Everyone", "students"], id="okta"
        ),
        pytest.param(
            "auth0",
            {"https://uni.example/groups": ["researchers"], "groups": ["ignored"]},
            {"claim": "https://uni.example/groups"},
            ["researchers"],
            id="auth0-namespaced-claim",
        ),
        pytest.param(
            "cilogon",
            {"isMemberOf": ["CO:COU:students:members:all", "CO:members:all", "CO:admins"]},
            {},
            ["students"],
            id="cilogon-comanage",
        ),
        pytest.param(
            "keycloak",
            {"realm_access": {"roles": ["students", "offline_access"]}},
            {
                "claim": "realm_access.roles",
                "rename": {"students": "students"},
                "keep_unmapped": False,
            },
            ["students"],
            id="keycloak-realm-roles-dotted-path",
        ),
        pytest.param("keycloak", {"sub": "x"}, {}, [], id="absent-claim-no-groups"),
        pytest.param("keycloak", {"groups": "/students"}, {}, ["students"], id="single-string"),
    ],
)
def test_provider_shapes_map_to_groups(provider, claims, kw, expected):
    assert mapping(provider, **kw).groups(claims) == expected


@pytest.mark.parametrize(
    "claims",
    [
        pytest.param(
            {"_claim_names": {"groups": "src1"}, "_claim_sources": {"src1": {"endpoint": "x"}}},
            id="entra-claim-names",
        ),
        pytest.param({"hasgroups": True}, id="entra-hasgroups"),
        pytest.param(
            {"groups": [ENTRA_STUDENTS], "_claim_names": {"groups": "src1"}},
            id="marker-beside-partial-list",
        ),
    ],
)
def test_overage_marker_is_refused(claims):
    with pytest.raises(ClaimError) as e:
        mapping("entra", rename={ENTRA_STUDENTS: "students"}).groups(claims)
    assert e.value.reason == "group-overage"
    assert "more groups than" in e.value.message


@pytest.mark.parametrize(
    "claims, says",
    [
        pytest.param({"groups": {"students": True}}, "an object", id="object"),
        pytest.param({"groups": ["students", 7]}, "a number", id="list-with-number"),
        pytest.param({"groups": [["students"]]}, "list", id="nested-list"),
        pytest.param({"groups": 42}, "a number", id="number"),
        pytest.param({"realm_access": "students"}, "a string", id="path-through-string"),
        pytest.param({"groups": ["g"] * 6000}, "6000 values", id="too-many"),
    ],
)
def test_malformed_claim_is_refused_with_a_clear_message(claims, says):
    claim = "realm_access.roles" if "realm_access" in claims else "groups"
    with pytest.raises(ClaimError) as e:
        GroupMapping(claim=claim, keep_unmapped=True).groups(claims)
    assert e.value.reason == "malformed-claim"
    assert f"group claim '{claim}'" in e.value.message
    assert says in e.value.log_message
    assert "students" not in e.value.message  # no claim values in what the user sees


def test_rename_looks_at_the_raw_value_before_the_stripped_one():
    m = GroupMapping(
        strip_prefixes=("/", "/faculty/"), rename={"/faculty/cs": "cs-staff", "cs": "x"}
    )
    assert m.groups({"groups": ["/faculty/cs"]}) == ["cs-staff"]
    # longest prefix first: "/faculty/" wins over "/"
    assert GroupMapping(strip_prefixes=("/", "/faculty/"), keep_unmapped=True).groups(
        {"groups": ["/faculty/cs"]}
    ) == ["cs"]


def test_patterns_expand_in_order_and_drop_the_rest():
    m = GroupMapping(
        patterns=((r"course-(?P<id>[a-z0-9]+)-students", r"course-\g<id>"), (r"(.*)-staff", r"\1"))
    )
    got = m.map({"groups": ["course-ml101-students", "physics-staff", "library"]})
    assert got.groups == ["course-ml101", "physics"]
    assert got.dropped == [("library", "not mapped")]


def test_problems_name_each_bad_setting():
    m = GroupMapping(rename={"a": "bad/name"}, patterns=((r"(x)", r"\2"),), strip_prefixes=("",))
    text = "\n".join(m.problems())
    assert "'bad/name'" in text and "group 2" in text and "empty prefix" in text
    assert GroupMapping().problems() == [
        "no rename, no patterns and keep_unmapped is off: every group would be dropped"
    ]
    assert mapping("keycloak").problems() == []


def test_authenticator_settings_are_checked_and_errors_become_a_403():
    c = Config()
    c.GPULabOAuthenticator.group_patterns = {"(unclosed": "x"}
    a = GPULabOAuthenticator(config=c)
    assert a.mapping_problems()[0].startswith("c.GPULabOAuthenticator.group_patterns:")
    a = GPULabOAuthenticator(config=Config())
    a.group_keep_unmapped = True
    with pytest.raises(LoginRefused) as e:
        a.map_claims("alice", {"hasgroups": "true"})
    assert e.value.status_code == 403 and "group overage" in e.value.jupyterhub_message
    assert a.manage_groups and a.enable_auth_state


def test_configure_sso_fills_the_endpoints_and_refuses_unknown_providers():
    c = Config()
    configure_sso(
        c,
        "keycloak",
        issuer="https://sso.uni/realms/campus/",
        client_id="hub",
        client_secret="s",
        admin_groups=["gpu-admins"],
        refresh_age="2m",
    )
    a = c.GPULabOAuthenticator
    assert a.authorize_url == "https://sso.uni/realms/campus/protocol/openid-connect/auth"
    assert a.admin_groups == {"gpu-admins"} and a.allow_all is True
    assert c.Authenticator.auth_refresh_age == 120
    with pytest.raises(ValueError, match="unknown SSO provider 'ldap'"):
        configure_sso(Config(), "ldap", client_id="a", client_secret="b")
    with pytest.raises(ValueError, match="needs tenant="):
        configure_sso(Config(), "entra", client_id="a", client_secret="b")
    # the fixed hosts are defaults: a national cloud's authority, CILogon's test instance
    for kw, url in (
        ({}, "https://login.microsoftonline.com/t1/oauth2/v2.0/authorize"),
        ({"authority": "https://login.microsoftonline.us/"},
         "https://login.microsoftonline.us/t1/oauth2/v2.0/authorize"),
    ):  # fmt: skip
        c = Config()
        configure_sso(c, "entra", tenant="t1", client_id="a", client_secret="b", **kw)
        assert c.GPULabOAuthenticator.authorize_url == url
        assert c.GPULabOAuthenticator.userdata_from_id_token is True
    c = Config()
    configure_sso(c, "cilogon", client_id="a", client_secret="b")
    assert c.GPULabOAuthenticator.token_url == "https://cilogon.org/oauth2/token"
    assert set(PRESETS) >= {"keycloak", "entra", "okta", "auth0", "cilogon"}


# -- properties ------------------------------------------------------------------------------

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=12)
claim_lists = st.lists(names, max_size=20)
maps = st.dictionaries(names, st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True), max_size=5)


@given(claim_lists, maps, st.booleans(), st.randoms())
def test_result_is_sorted_unique_order_free_and_only_from_the_input(values, rename, keep, rnd):
    m = GroupMapping(strip_prefixes=("/",), rename=rename, keep_unmapped=keep)
    got = m.groups({"groups": values})
    shuffled = list(values)
    rnd.shuffle(shuffled)
    assert got == sorted(set(got)) == m.groups({"groups": shuffled})
    possible = {m.map_value(v) for v in values}
    assert set(got) <= possible
    assert all(valid_group_name(g) for g in got)
    if not keep:
        assert set(got) <= set(rename.values())


@given(claim_lists, claim_lists)
def test_one_users_claims_never_leak_into_anothers(a, b):
    m = GroupMapping(keep_unmapped=True)
    alone = m.groups({"groups": b})
    m.groups({"groups": a})
    assert m.groups({"groups": b}) == alone
    assert set(alone) <= set(b)


@given(claim_lists, st.sampled_from(["_claim_names", "hasgroups"]))
def test_an_overage_marker_always_refuses_whatever_else_is_sent(values, marker):
    claims = {"groups": values, marker: {"groups": "src1"} if marker == "_claim_names" else True}
    with pytest.raises(ClaimError, match=re.escape("group overage")):
        GroupMapping(keep_unmapped=True).groups(claims)


def test_a_login_logs_how_many_groups_at_info_and_their_names_only_at_debug(caplog):
    """A campus account in 5,000 groups: one short INFO line with the count (it was every name,
    ~40 kB per login), the names at DEBUG."""
    a = GPULabOAuthenticator(config=Config())
    a.group_keep_unmapped = True
    names = [f"course-{i:04d}-section-a" for i in range(5000)]
    with caplog.at_level(logging.INFO, logger=a.log.name):
        assert len(a.map_claims("alice", {"groups": names})) == 5000
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(info) == 1 and "alice: 5000 group(s)" in info[0] and len(info[0]) < 200, info
    assert not any("course-0001" in m for m in info)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger=a.log.name):
        a.map_claims("alice", {"groups": names})
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any("course-0001-section-a" in m and "course-4999-section-a" in m for m in debug)

"""Group policies: loading them, and how a user's several groups combine for one allocation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jupyterhub_gpulab.errors import ConfigError, ProfileChoiceError
from jupyterhub_gpulab.lab.policy import (
    Entitlement,
    GroupPolicy,
    resolve,
)
from jupyterhub_gpulab.lab.policyload import load_policies, load_policy
from jupyterhub_gpulab.lab.profiles import entitled_profiles, load_profiles

IMG = "quay.io/jupyter/pytorch-notebook:cuda12-latest"
PROFILES = load_profiles(
    [
        {"slug": "cpu", "display_name": "CPU only", "image": IMG, "default": True},
        {"slug": "mig-1g", "display_name": "1g MIG", "image": IMG,
         "slice": {"kind": "mig", "mig_profile": "1g.10gb"}},
        {"slug": "a100", "display_name": "Full A100", "image": IMG,
         "slice": {"kind": "gpu", "model": "A100"}, "groups": ["researchers"]},
    ]
)  # fmt: skip
CPU, MIG, A100 = PROFILES
SLUGS = [p.slug for p in PROFILES]

POLICY_SPEC = {
    "students": {"profiles": ["cpu", "mig-1g"], "max_slices_per_user": 1, "max_slices": 40},
    "ta": {"profiles": ["mig-1g"], "max_slices_per_user": 2, "max_slices": 4, "priority": 5},
    "researchers": {"max_slices_per_user": 4, "max_slices": 16, "priority": 10},
    "vip": {"priority": 1},  # no per-user limit, no group cap
}
POLICIES = load_policies(POLICY_SPEC, SLUGS)
DEFAULT = load_policy("everyone", {"max_slices_per_user": 1, "max_slices": 8}, SLUGS)


def test_load_policies_parses_every_key():
    (policy,) = load_policies(
        {
            "students": {
                "profiles": ["cpu", "mig-1g", "cpu"],
                "max_slices_per_user": 1,
                "max_slices": 40,
                "priority": -1,
                "gpu_hours": 20,
                "period": "term",
                "max_session": "8h",
            }
        },
        SLUGS,
    ).values()
    assert policy == GroupPolicy(
        group="students",
        profiles=("cpu", "mig-1g"),
        max_slices_per_user=1,
        max_slices=40,
        priority=-1,
        gpu_hours=20.0,
        period="term",
        max_session=8 * 3600,
    )


def test_an_empty_policy_means_no_limits():
    policy = load_policies({"staff": {}}, SLUGS)["staff"]
    assert policy == GroupPolicy(group="staff")
    assert (policy.profiles, policy.max_slices_per_user, policy.max_slices) == (None, None, None)
    assert policy.period == "week" and policy.allows("anything")


G = "group_policies['students']"

BAD_POLICY_CASES = [
    ("unknown-key", {"max_slice": 2}, [G, "unknown key 'max_slice'", "allowed keys are profiles"]),
    ("negative-per-user", {"max_slices_per_user": -1}, [G, "max_slices_per_user -1", "write e.g. max_slices_per_user: 2, or null"]),
    ("bool-per-user", {"max_slices_per_user": True}, [G, "max_slices_per_user True is not a whole number"]),
    ("string-group-cap", {"max_slices": "40"}, [G, "max_slices '40'", "write e.g. max_slices: 2"]),
    ("priority-not-int", {"priority": "high"}, [G, "priority 'high'", "write e.g. 10"]),
    ("negative-gpu-hours", {"gpu_hours": -5}, [G, "gpu_hours -5", "write e.g. 20"]),
    ("gpu-hours-text", {"gpu_hours": "20h"}, [G, "gpu_hours '20h'", "number of hours"]),
    ("unknown-period", {"period": "month"}, [G, "period 'month' is not one of day, week, term"]),
    ("bad-max-session", {"max_session": "a while"}, [G, "max_session 'a while'", "'30m'", "or null"]),
    ("zero-max-session", {"max_session": 0}, [G, "max_session 0", "or null"]),
    ("profiles-unknown-slug", {"profiles": ["cpu", "jax"]}, [G, "unknown profile(s) 'jax'", "known slugs are a100, cpu, mig-1g"]),
    ("profiles-string", {"profiles": "cpu"}, [G, "profiles must be a list of profile slugs", "omit it to allow every profile"]),
    ("profiles-empty", {"profiles": []}, [G, "profiles is empty, which would allow nothing", "omit it"]),
    ("policy-not-dict", ["cpu"], [G, "must be a dict such as"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("entry", "fragments"), [pytest.param(e, f, id=i) for i, e, f in BAD_POLICY_CASES]
)
def test_load_policies_names_the_group_and_the_fix(entry, fragments):
    with pytest.raises(ConfigError) as info:
        load_policies({"students": entry}, SLUGS)
    assert any(all(f in e for f in fragments) for e in info.value.errors), info.value.errors


def test_every_policy_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as info:
        load_policies(
            {"students": {"max_slices": -1, "period": "year"}, "": {}, "ok": {"priority": 1}}, SLUGS
        )
    assert len(info.value.errors) == 3
    assert "group_policies['']: the group name must be a non-empty string" in str(info.value)


def test_group_policies_must_be_a_dict():
    with pytest.raises(ConfigError, match="group_policies must be a dict keyed by group name"):
        load_policies([{"students": {}}], SLUGS)
    assert load_policies(None, SLUGS) == {}


def test_load_policy_names_where_it_was_configured():
    with pytest.raises(ConfigError, match=r"default_policy: unknown key 'max'"):
        load_policy("everyone", {"max": 1}, SLUGS, where="default_policy")


# (id, groups, is_admin, profile, policies, default policy, expected)
RESOLVE_CASES = [
    ("no-policy-no-default-is-unlimited", set(), False, MIG, POLICIES, None,
     Entitlement(user_limit=None, charge_groups=(), priority=0)),
    ("no-policy-group-uses-default", {"chess-club"}, False, MIG, POLICIES, DEFAULT,
     Entitlement(user_limit=1, charge_groups=(("everyone", 8),), priority=0)),
    ("single-group", {"students"}, False, MIG, POLICIES, DEFAULT,
     Entitlement(user_limit=1, charge_groups=(("students", 40),), priority=0)),
    ("most-generous-user-limit-and-max-priority", {"students", "ta"}, False, MIG, POLICIES, None,
     Entitlement(user_limit=2, charge_groups=(("ta", 4), ("students", 40)), priority=5)),
    ("unlimited-beats-any-number", {"students", "vip"}, False, MIG, POLICIES, None,
     Entitlement(user_limit=None, charge_groups=(("vip", None), ("students", 40)), priority=1)),
    ("charge-order-is-priority-then-name", {"students", "ta", "researchers", "vip"}, False, MIG,
     POLICIES, None,
     Entitlement(user_limit=None,
                 charge_groups=(("researchers", 16), ("ta", 4), ("vip", None), ("students", 40)),
                 priority=10)),
    ("only-groups-allowing-the-profile-are-charged", {"students", "ta", "researchers"}, False,
     A100, POLICIES, None,
     Entitlement(user_limit=4, charge_groups=(("researchers", 16),), priority=10)),
    ("user-limit-counts-every-policy-not-only-charged-ones", {"ta", "researchers"}, False, MIG,
     {"ta": POLICIES["ta"], "researchers": load_policy("researchers", {"profiles": ["a100"], "max_slices_per_user": 4}, SLUGS)},
     None, Entitlement(user_limit=4, charge_groups=(("ta", 4),), priority=5)),
    ("default-ignored-once-a-group-has-a-policy", {"students", "chess-club"}, False, MIG, POLICIES,
     DEFAULT, Entitlement(user_limit=1, charge_groups=(("students", 40),), priority=0)),
    ("admin-without-admin-policy-is-unlimited", {"students"}, True, MIG, POLICIES, DEFAULT,
     Entitlement(user_limit=None, charge_groups=(), priority=0)),
    ("admin-policy-governs-admins", {"students"}, True, A100,
     {**POLICIES, "admin": load_policy("admin", {"max_slices_per_user": 8, "max_slices": 10}, SLUGS)},
     None, Entitlement(user_limit=8, charge_groups=(("admin", 10),), priority=0)),
    ("admin-policy-not-listing-the-profile-charges-no-group", set(), True, A100,
     {"admin": load_policy("admin", {"profiles": ["mig-1g"], "max_slices_per_user": 2}, SLUGS)},
     None, Entitlement(user_limit=2, charge_groups=(), priority=0)),
    ("cpu-profiles-are-never-counted", {"students"}, False, CPU, POLICIES, None,
     Entitlement(user_limit=None, charge_groups=(), priority=0, counted=False)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("groups", "is_admin", "profile", "policies", "default", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in RESOLVE_CASES],
)
def test_resolve_combines_groups(groups, is_admin, profile, policies, default, expected):
    assert resolve(groups, is_admin, profile, policies, default) == expected


def test_resolve_refuses_a_profile_no_policy_of_the_user_allows():
    with pytest.raises(ProfileChoiceError) as info:
        resolve({"students"}, False, A100, POLICIES)
    assert (info.value.status_code, info.value.reason) == (400, "not-entitled")
    assert info.value.message == "'a100' is not allowed by the policies of your groups (students)"


group_names = st.sampled_from(["students", "ta", "researchers", "vip", "nlp", "x"])
policy_entries = st.fixed_dictionaries(
    {},
    optional={
        "profiles": st.lists(st.sampled_from(SLUGS), min_size=1, unique=True),
        "max_slices_per_user": st.none() | st.integers(0, 5),
        "max_slices": st.none() | st.integers(0, 50),
        "priority": st.integers(-3, 3),
    },
)


@given(
    spec=st.dictionaries(group_names, policy_entries, max_size=4),
    groups=st.sets(group_names, max_size=4),
    is_admin=st.booleans(),
    default=st.none() | policy_entries,
)
def test_every_entitled_gpu_profile_resolves_and_a_policy_user_is_always_charged(
    spec, groups, is_admin, default
):
    policies = load_policies(spec, SLUGS)
    default_policy = load_policy("default", default, SLUGS) if default is not None else None
    for profile in entitled_profiles(
        PROFILES, policies, groups, is_admin, default_policy=default_policy
    ):
        got = resolve(groups, is_admin, profile, policies, default_policy)
        if not profile.wants_gpu:
            assert not got.counted and got.charge_groups == ()
            continue
        charged = [g for g, _ in got.charge_groups]
        assert len(charged) == len(set(charged))
        under_policy = any(g in policies for g in groups) or default_policy is not None
        if not is_admin and under_policy:
            assert charged, "a GPU allocation under a policy must be charged to some group"

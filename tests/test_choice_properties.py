"""Property tests for turning a user's choice into a profile: whatever arrives, the user gets an
entitled profile or a 400 refusal with a safe message, never another exception."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from jupyterhub_gpulab.errors import ProfileChoiceError
from jupyterhub_gpulab.policy import load_policies
from jupyterhub_gpulab.profiles import (
    SLUG_RE,
    choose_profile,
    entitled_profiles,
    load_profiles,
    options_from_form,
)

IMG = "quay.io/jupyter/base-notebook"
PROFILES = load_profiles(
    [
        {"slug": "cpu", "display_name": "CPU <only>", "image": IMG},
        {"slug": "mig-1g", "display_name": "1g", "image": IMG, "default": True,
         "slice": {"kind": "mig", "mig_profile": "1g.10gb"}},
        {"slug": "a100", "display_name": "A100", "image": IMG,
         "slice": {"kind": "gpu"}, "groups": ["researchers"]},
    ]
)  # fmt: skip
SLUGS = [p.slug for p in PROFILES]
POLICIES = load_policies({"students": {"profiles": ["cpu"]}}, SLUGS)

slugs = st.from_regex(SLUG_RE, fullmatch=True)
# what a user might send: real slugs, near misses, markup, unicode, long text
texts = (
    st.sampled_from(SLUGS)
    | slugs
    | st.text(max_size=80)
    | st.sampled_from(
        ["", " cpu", "CPU", "<script>alert(1)</script>", "a100\x00", "\u202ecpu", "x" * 200]
    )
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
# form data as JupyterHub builds it (str keys, lists of decoded strings), plus malformed shapes
form_values = st.lists(texts, max_size=4) | json_values
forms = st.dictionaries(st.sampled_from(["profile", "_xsrf"]) | texts, form_values, max_size=4)
user_options = (
    st.none() | json_values | st.dictionaries(st.just("profile") | texts, json_values, max_size=3)
)
users = st.tuples(
    st.sets(st.sampled_from(["students", "researchers", "other"]), max_size=3), st.booleans()
)


def entitled_for(user):
    groups, is_admin = user
    return entitled_profiles(PROFILES, POLICIES, groups, is_admin)


def check_outcome(choice, entitled, *, from_form):
    try:
        profile = choose_profile(choice, entitled, PROFILES, from_form=from_form)
    except ProfileChoiceError as err:
        assert err.status_code == 400
        assert "<" not in err.message and ">" not in err.message
        assert len(err.message) < 200 + 100 * len(entitled)
        return None
    assert profile in entitled
    return profile


@given(form=forms, user=users)
@example(form={"profile": ["cpu", "cpu"]}, user=(set(), False))
@example(form={"profile": [""]}, user=(set(), False))
@example(form={"profile": []}, user=(set(), False))
def test_any_form_gives_an_entitled_profile_or_a_refusal(form, user):
    check_outcome(form, entitled_for(user), from_form=True)


@given(options=user_options, user=users)
@example(options={"profile": "a100"}, user=({"students"}, False))
@example(options={"profile": ["cpu"]}, user=(set(), False))
@example(options={"profile": 1}, user=(set(), False))
def test_any_user_options_give_an_entitled_profile_or_a_refusal(options, user):
    check_outcome(options, entitled_for(user), from_form=False)


@given(options=user_options, user=users)
def test_form_and_api_agree(options, user):
    """A value sent as a one-item form field means the same as the same value in user_options."""
    if not isinstance(options, dict) or set(options) != {"profile"}:
        return
    if not isinstance(options["profile"], str) or not options["profile"]:
        return
    entitled = entitled_for(user)
    api = check_outcome(options, entitled, from_form=False)
    form = check_outcome({"profile": [options["profile"]]}, entitled, from_form=True)
    assert api == form


@given(slug=slugs, position=st.integers(0, 3))
def test_a_valid_slug_always_round_trips(slug, position):
    spec = [
        {"slug": s, "display_name": s, "image": IMG} for s in ["cpu", "mig-1g", "a100"] if s != slug
    ]
    spec.insert(min(position, len(spec)), {"slug": slug, "display_name": "Mine", "image": IMG})
    profiles = load_profiles(spec)
    (mine,) = [p for p in profiles if p.slug == slug]
    assert options_from_form({"profile": [slug], "_xsrf": ["t"]}) == {"profile": slug}
    assert choose_profile({"profile": slug}, profiles, profiles) is mine
    assert choose_profile({"profile": [slug]}, profiles, profiles, from_form=True) is mine


@given(value=st.text(min_size=65, max_size=500))
def test_long_values_are_cut_in_messages(value):
    with pytest.raises(ProfileChoiceError) as info:
        choose_profile({"profile": value}, PROFILES, PROFILES)
    assert value not in info.value.message
    assert "…'" in info.value.message

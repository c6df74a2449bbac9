"""Property tests for turning a user's choice into a profile: whatever arrives, the user gets an
entitled profile or a 400 refusal with a safe message, never another exception."""

from __future__ import annotations

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st

from jupyterhub_gpulab.errors import ProfileChoiceError
from jupyterhub_gpulab.lab.choice import choose_profile, options_from_form
from jupyterhub_gpulab.lab.policyload import load_policies
from jupyterhub_gpulab.lab.profiles import SLUG_RE, entitled_profiles, load_profiles

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


# options as a person sends them, through the form or the API: maybe a profile, maybe other
# fields (likely ones, anything), each with one value or several; _xsrf is JupyterHub's, no option
values = st.lists(texts, min_size=1, max_size=3)
other_fields = st.just({}) | st.dictionaries(
    st.sampled_from(["image", "env"]) | texts.filter(lambda k: k not in ("profile", "_xsrf")),
    values,
    max_size=2,
)
fields = st.builds(
    lambda profile, others: {**others, **({"profile": profile} if profile else {})},
    st.none() | values,
    other_fields,
)


def outcome(choice, entitled, *, from_form):
    """What the user sees: the profile started, or the refusal's reason and message."""
    try:
        return ("starts", choose_profile(choice, entitled, PROFILES, from_form=from_form).slug)
    except ProfileChoiceError as err:
        return ("refused", err.reason, err.message)


@given(fields=fields, user=users, xsrf=st.booleans())
@example(fields={"profile": ["cpu"], "image": ["evil"]}, user=(set(), False), xsrf=True)
@example(fields={"profile": ["cpu", "a100"]}, user=(set(), True), xsrf=False)
@example(fields={}, user=({"students"}, False), xsrf=True)
def test_form_and_api_agree(fields, user, xsrf):
    """The same options sent through the spawn form (each field a list of strings, plus
    JupyterHub's _xsrf) or the REST API (one value as itself, several as a list) give the same
    profile, or the same refusal with the same message."""
    form = {**fields, **({"_xsrf": ["token"]} if xsrf else {})}
    api = {k: v[0] if len(v) == 1 else v for k, v in fields.items()}
    entitled = entitled_for(user)
    via_form = outcome(form, entitled, from_form=True)
    event(via_form[0] if via_form[0] == "starts" else f"refused: {via_form[1]}")
    assert via_form == outcome(api, entitled, from_form=False)


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

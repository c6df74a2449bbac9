"""What "no choice" means (the saved choice) and what a spawn link may start: pure logic, no hub
(the end-to-end checks are in test_spawner_options_e2e.py)."""

from __future__ import annotations

import pytest

from jupyterhub_gpulab.errors import ProfileChoiceError
from jupyterhub_gpulab.lab.choice import choose, options_from_query, saved_choice_notice
from jupyterhub_gpulab.lab.policyload import load_policies
from jupyterhub_gpulab.lab.profiles import entitled_profiles, load_profiles

IMG = "quay.io/jupyter/base-notebook"
PROFILES = load_profiles(
    [
        {"slug": "mig", "display_name": "PyTorch (MIG)", "image": IMG, "default": True,
         "slice": {"kind": "mig", "mig_profile": "1g.10gb"}},
        {"slug": "seat", "display_name": "TensorFlow (seat)", "image": IMG,
         "slice": {"kind": "shared"}},
        {"slug": "a40", "display_name": "Full A40", "image": IMG, "slice": {"kind": "gpu"},
         "groups": ["researchers"]},
        {"slug": "cpu", "display_name": "CPU only", "image": IMG},
    ]
)  # fmt: skip
POLICIES = load_policies({"students": {"profiles": ["mig", "cpu"]}}, [p.slug for p in PROFILES])
STUDENT = entitled_profiles(PROFILES, POLICIES, {"students"}, False)
RESEARCHER = entitled_profiles(PROFILES, POLICIES, {"researchers"}, False)


# --- no choice: the last valid profile, else the default --------------------------------------


@pytest.mark.parametrize("no_choice", [None, {}, {"profile": None}], ids=["none", "empty", "null"])
def test_no_choice_means_the_last_profile_when_it_still_applies(no_choice):
    assert choose(no_choice, RESEARCHER, PROFILES, last="a40") == (PROFILES[2], None)
    assert choose(no_choice, RESEARCHER, PROFILES, last="")[0].slug == "mig"  # never started


@pytest.mark.parametrize(
    ("last", "entitled", "why"),
    [
        pytest.param("tensorflow-seat", RESEARCHER, "there is no such profile any more", id="renamed"),
        pytest.param("a40", STUDENT, "it is for groups researchers", id="groups-changed"),
        pytest.param("seat", STUDENT, "it is not available to you", id="policy-changed"),
    ],
)  # fmt: skip
def test_a_saved_choice_that_no_longer_applies_gives_the_default_and_says_why(last, entitled, why):
    profile, notice = choose({}, entitled, PROFILES, last=last)
    assert profile.slug == "mig"
    assert notice == (
        f"Your saved choice '{last}' no longer applies ({why}), so this server starts with "
        "the default, 'mig' (PyTorch (MIG))."
    )
    assert saved_choice_notice(last, entitled, PROFILES) == (
        f"Your saved choice '{last}' no longer applies ({why}); pick another below."
    )


def test_an_explicit_choice_is_never_replaced_by_the_saved_or_default_one():
    with pytest.raises(ProfileChoiceError) as info:
        choose({"profile": "tensorflow-seat"}, RESEARCHER, PROFILES, last="tensorflow-seat")
    assert info.value.reason == "unknown-profile"
    assert choose({"profile": "cpu"}, STUDENT, PROFILES, last="mig") == (PROFILES[3], None)


def test_no_saved_choice_and_nothing_to_pick_is_still_refused():
    with pytest.raises(ProfileChoiceError) as info:
        choose({}, (), PROFILES, last="mig")
    assert info.value.reason == "no-profile"


def test_the_notice_shows_a_saved_slug_as_text():
    _, notice = choose({}, STUDENT, PROFILES, last="<b>x</b>")
    assert "<" not in notice and "'\\x3cb\\x3ex\\x3c/b\\x3e'" in notice
    assert saved_choice_notice("mig", STUDENT, PROFILES) is None
    assert saved_choice_notice("", STUDENT, PROFILES) is None


# --- a spawn link must name its profile --------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "names"),
    [
        pytest.param({"x": ["1"]}, "; this one names only 'x'", id="unknown-only"),
        pytest.param({"_xsrf": ["t"]}, "", id="xsrf-only"),
        pytest.param({}, "", id="nothing"),
    ],
)
def test_a_link_without_a_profile_is_refused(query, names):
    with pytest.raises(ProfileChoiceError) as info:
        options_from_query(query, STUDENT)
    assert info.value.status_code == 400
    assert info.value.message.startswith(
        f"A link that starts a server must name its profile (?profile=slug){names}. You may pick:"
    )


def test_a_link_naming_a_profile_is_judged_like_the_api():
    assert options_from_query({"profile": ["cpu"]}) == {"profile": "cpu"}
    # other fields are kept, so that start() refuses them as it refuses them from the API
    assert options_from_query({"profile": ["cpu"], "x": ["1"]}) == {"profile": "cpu", "x": "1"}

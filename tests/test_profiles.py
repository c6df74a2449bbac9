"""Profiles: loading and validating config, who may pick what, and turning a choice into a profile."""

from __future__ import annotations

import json
import types

import pytest
import tornado.httpserver
import tornado.web
from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.spawner import SpawnException
from jupyterhub.utils import format_exception
from tornado.httpclient import AsyncHTTPClient
from tornado.testing import bind_unused_port

from jupyterhub_gpulab.errors import (
    STATUS_BY_REASON,
    ConfigError,
    ProfileChoiceError,
    SpawnRefused,
)
from jupyterhub_gpulab.inventory.model import SliceKind
from jupyterhub_gpulab.lab.choice import choose_profile, default_profile, options_from_form
from jupyterhub_gpulab.lab.policyload import load_policies, load_policy
from jupyterhub_gpulab.lab.profiles import entitled_profiles, load_profiles

IMG = "quay.io/jupyter/pytorch-notebook:cuda12-latest"

SPEC = [
    {"slug": "cpu", "display_name": "CPU only", "image": "quay.io/jupyter/scipy-notebook",
     "cpu_limit": 2, "mem_limit": "4G", "default": True},
    {"slug": "pytorch-1g", "display_name": "PyTorch (1g.10gb MIG slice)", "image": IMG,
     "slice": {"kind": "mig", "mig_profile": "1g.10gb"}, "mem_limit": "16G"},
    {"slug": "tf-shared", "display_name": "TensorFlow (shared seat)", "image": IMG,
     "slice": {"kind": "shared", "min_memory": "2GiB"},
     "env": {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}},
    {"slug": "pytorch-a100", "display_name": "PyTorch (full A100)", "image": IMG,
     "description": "For research runs", "groups": ["researchers"],
     "slice": {"kind": "gpu", "model": "A100", "min_memory": "40GiB"},
     "idle_timeout": "1h", "gpu_idle_timeout": "30m", "max_age": "3d"},
    {"slug": "course-nlp", "display_name": "NLP course", "image": IMG,
     "slice": {"kind": "mig", "mig_profile": "2g.20gb"}, "groups": ["nlp-course"]},
]  # fmt: skip

POLICY_SPEC = {
    "students": {"profiles": ["cpu", "pytorch-1g"], "max_slices_per_user": 1, "max_slices": 40},
    "researchers": {"max_slices_per_user": 4, "max_slices": 16, "priority": 10},
    "staff": {"profiles": ["cpu", "pytorch-a100"], "max_slices_per_user": 2, "priority": 5},
}

PROFILES = load_profiles(SPEC)
POLICIES = load_policies(POLICY_SPEC, [p.slug for p in PROFILES])
BY_SLUG = {p.slug: p for p in PROFILES}


def slugs(profiles):
    return [p.slug for p in profiles]


def spec_with(**changes):
    """SPEC with profiles[1] ('pytorch-1g') changed; a value of ... removes the key."""
    entry = dict(SPEC[1])
    for key, value in changes.items():
        if value is ...:
            entry.pop(key, None)
        else:
            entry[key] = value
    return [SPEC[0], entry, *SPEC[2:]]


# --- loading ---------------------------------------------------------------------------------


def test_load_profiles_parses_units_slices_and_env():
    cpu, mig, shared, a100, _ = PROFILES
    assert slugs(PROFILES) == ["cpu", "pytorch-1g", "tf-shared", "pytorch-a100", "course-nlp"]
    assert cpu.slice.kind is None and not cpu.wants_gpu
    assert cpu.cpu_limit == 2.0 and cpu.mem_limit == 4 * 2**30 and cpu.default
    assert mig.slice.kind is SliceKind.MIG and mig.slice.mig_profile == "1g.10gb"
    assert shared.slice.kind is SliceKind.SHARED and shared.slice.min_memory_bytes == 2 * 2**30
    assert dict(shared.env) == {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    assert a100.slice.model == "A100" and a100.slice.min_memory_bytes == 40 * 2**30
    assert a100.groups == ("researchers",) and a100.description == "For research runs"
    assert (a100.idle_timeout, a100.gpu_idle_timeout, a100.max_age) == (3600, 1800, 3 * 86400)
    assert (cpu.idle_timeout, cpu.gpu_idle_timeout, cpu.max_age) == (None, None, None)


def test_profile_env_is_read_only_and_profiles_are_hashable():
    with pytest.raises(TypeError):
        PROFILES[2].env["CUDA_VISIBLE_DEVICES"] = "0"
    assert len(set(PROFILES)) == len(PROFILES)


def test_nvidia_driver_capabilities_may_be_set():
    (p,) = load_profiles([{**SPEC[0], "env": {"NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}}])
    assert p.env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"


WHERE = "profiles[1] ('pytorch-1g')"

# (id, changes to profiles[1], fragments that one error line must all contain)
BAD_PROFILE_CASES = [
    ("unknown-key", {"mem_limt": "3G"}, [WHERE, "unknown key 'mem_limt'", "did you mean 'mem_limit'", "allowed keys are"]),
    ("missing-display-name", {"display_name": ...}, [WHERE, "'display_name' is missing", "add e.g."]),
    ("empty-display-name", {"display_name": " "}, [WHERE, "display_name", "non-empty string"]),
    ("missing-image", {"image": ...}, [WHERE, "'image' is missing", "add e.g. image:"]),
    ("image-with-space", {"image": "a b"}, [WHERE, "'a b' is not an image name"]),
    ("bad-slug-uppercase", {"slug": "PyTorch"}, ["profiles[1] ('PyTorch')", "not DNS-safe", "lowercase letters"]),
    ("bad-slug-trailing-dash", {"slug": "pytorch-"}, ["not DNS-safe", "starting and ending with a letter or digit"]),
    ("bad-slug-too-long", {"slug": "a" * 64}, ["not DNS-safe", "1-63"]),
    ("bad-slug-type", {"slug": 7}, ["profiles[1]:", "slug 7 is not DNS-safe"]),
    ("missing-slug", {"slug": ...}, ["profiles[1]:", "'slug' is missing", "add one"]),
    ("bad-mem-unit", {"mem_limit": "16 parsecs"}, [WHERE, "mem_limit", "unknown unit", "'10GiB'"]),
    ("zero-mem", {"mem_limit": 0}, [WHERE, "mem_limit 0", "write e.g. '16G'"]),
    ("bad-cpu", {"cpu_limit": "two"}, [WHERE, "cpu_limit 'two'", "write e.g. 2"]),
    ("negative-cpu", {"cpu_limit": -1}, [WHERE, "cpu_limit -1", "> 0"]),
    ("bad-idle-timeout", {"idle_timeout": "soon"}, [WHERE, "idle_timeout", "'30m'", "or null"]),
    ("zero-max-age", {"max_age": 0}, [WHERE, "max_age 0", "use null"]),
    ("slice-not-dict", {"slice": "gpu"}, [WHERE, "slice must be null (no GPU) or a dict"]),
    ("slice-unknown-kind", {"slice": {"kind": "vgpu"}}, [WHERE, "slice kind 'vgpu' is not one of gpu, mig, shared"]),
    ("slice-key-for-other-kind", {"slice": {"kind": "mig", "mig_profile": "1g.10gb", "model": "A100"}},
     [WHERE, "'model' do not apply to kind 'mig'", "it takes kind, mig_profile"]),
    ("mig-without-profile", {"slice": {"kind": "mig"}}, [WHERE, "needs mig_profile", "'1g.10gb'"]),
    ("mig-bad-profile", {"slice": {"kind": "mig", "mig_profile": "small"}}, [WHERE, "needs mig_profile", "got 'small'"]),
    ("slice-bad-memory", {"slice": {"kind": "shared", "min_memory": "lots"}}, [WHERE, "min_memory 'lots'", "'512M'"]),
    ("slice-bad-model", {"slice": {"kind": "gpu", "model": 100}}, [WHERE, "model must be part of a GPU name"]),
    ("env-not-dict", {"env": ["A=1"]}, [WHERE, "env must be a dict of strings"]),
    ("env-value-not-str", {"env": {"OMP_NUM_THREADS": 4}}, [WHERE, "env OMP_NUM_THREADS must be a string", "write '4'"]),
    ("env-bad-name", {"env": {"MY-VAR": "1"}}, [WHERE, "env name 'MY-VAR'", "letters, digits and '_'"]),
    ("env-nvidia-visible-devices", {"env": {"NVIDIA_VISIBLE_DEVICES": "all"}}, [WHERE, "NVIDIA_VISIBLE_DEVICES is set by gpulab", "remove it"]),
    ("env-cuda-visible-devices", {"env": {"CUDA_VISIBLE_DEVICES": "0"}}, [WHERE, "CUDA_VISIBLE_DEVICES is set by gpulab", "remove it"]),
    ("env-cuda-mps", {"env": {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=40G"}}, [WHERE, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT is set by gpulab"]),
    ("env-mig-config", {"env": {"NVIDIA_MIG_CONFIG_DEVICES": "all"}}, [WHERE, "NVIDIA_MIG_CONFIG_DEVICES is set by gpulab"]),
    ("groups-string", {"groups": "researchers"}, [WHERE, "groups must be a list", "['researchers']"]),
    ("default-not-bool", {"default": "yes"}, [WHERE, "default must be true or false"]),
    ("description-not-str", {"description": 5}, [WHERE, "description must be a string"]),
]  # fmt: skip

DANGER = "privileged containers / host devices / the Docker socket are never allowed: a user could escape their slice"

DANGEROUS_CASES = [
    ("privileged", {"privileged": True}),
    ("devices", {"devices": ["/dev/nvidia0:/dev/nvidia0"]}),
    ("device-requests", {"device_requests": [{"count": -1}]}),
    ("security-opt", {"security_opt": ["no-new-privileges:false"]}),
    ("extra-host-config", {"extra_host_config": {"runtime": "nvidia"}}),
    ("docker-socket-volume-dict", {"volumes": {"/var/run/docker.sock": "/var/run/docker.sock"}}),
    ("docker-socket-volume-list", {"volumes": ["/var/run/docker.sock:/var/run/docker.sock"]}),
    ("host-device-volume", {"volumes": {"/dev": {"bind": "/dev", "mode": "rw"}}}),
]


@pytest.mark.parametrize(
    ("changes", "fragments"),
    [pytest.param(c, f, id=i) for i, c, f in BAD_PROFILE_CASES],
)
def test_load_profiles_names_the_profile_and_the_fix(changes, fragments):
    with pytest.raises(ConfigError) as info:
        load_profiles(spec_with(**changes))
    matching = [e for e in info.value.errors if all(f in e for f in fragments)]
    assert matching, f"no error contains {fragments}: {info.value.errors}"
    assert all(e.startswith("profiles[1]") for e in info.value.errors)


@pytest.mark.parametrize(("changes"), [pytest.param(c, id=i) for i, c in DANGEROUS_CASES])
def test_container_options_are_refused_with_the_reason(changes):
    with pytest.raises(ConfigError) as info:
        load_profiles(spec_with(**changes))
    (key,) = changes
    assert info.value.errors == [f"{WHERE}: key {key!r} is refused: {DANGER}; remove it"]


def test_a_harmless_volume_is_just_an_unknown_key():
    with pytest.raises(ConfigError) as info:
        load_profiles(spec_with(volumes={"/srv/data": "/data"}))
    assert "unknown key 'volumes'" in info.value.errors[0]
    assert "never allowed" not in str(info.value)


def test_duplicate_slugs_name_both_profiles():
    with pytest.raises(ConfigError) as info:
        load_profiles([*SPEC, {**SPEC[2], "display_name": "Again"}])
    assert info.value.errors == [
        "profiles[5] ('tf-shared'): slug 'tf-shared' is already used by profiles[2] "
        "('tf-shared'); slugs must be unique"
    ]


def test_two_defaults_are_refused():
    with pytest.raises(ConfigError) as info:
        load_profiles(spec_with(default=True))
    assert info.value.errors == [
        f"{WHERE}: only one profile may be the default and profiles[0] ('cpu') is already; "
        "remove one 'default: true'"
    ]


def test_every_problem_is_reported_at_once():
    bad = [
        {"slug": "A", "image": "x", "privileged": True},
        {"slug": "ok", "display_name": "OK", "image": "i", "env": {"CUDA_VISIBLE_DEVICES": "0"}},
        "not a dict",
    ]
    with pytest.raises(ConfigError) as info:
        load_profiles(bad)
    err = info.value
    assert isinstance(err, ValueError)
    assert len(err.errors) == 5
    assert str(err).startswith("5 problems in gpulab configuration:\n- profiles[0] ('A'): ")
    assert "profiles[2]: must be a dict" in str(err)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        pytest.param({"slug": "cpu"}, "profiles must be a list of dicts, got dict", id="dict"),
        pytest.param("cpu", "profiles must be a list of dicts, got str", id="str"),
        pytest.param([], "profiles is empty; configure at least one", id="empty"),
    ],
)
def test_the_list_itself_must_be_a_non_empty_list(spec, fragment):
    with pytest.raises(ConfigError, match=fragment):
        load_profiles(spec)


# --- entitlement -----------------------------------------------------------------------------

ENTITLEMENT_CASES = [
    ("no-groups-get-open-profiles", set(), False, None, ["cpu", "pytorch-1g", "tf-shared"]),
    ("unknown-groups-are-ignored", {"chess-club"}, False, None, ["cpu", "pytorch-1g", "tf-shared"]),
    ("profile-groups-admit-members", {"nlp-course"}, False, None,
     ["cpu", "pytorch-1g", "tf-shared", "course-nlp"]),
    ("policy-list-restricts-members", {"students"}, False, None, ["cpu", "pytorch-1g"]),
    ("policy-without-list-allows-open-and-own", {"researchers"}, False, None,
     ["cpu", "pytorch-1g", "tf-shared", "pytorch-a100"]),
    ("policy-list-grants-other-groups-profile", {"staff"}, False, None, ["cpu", "pytorch-a100"]),
    ("groups-combine-most-generously", {"students", "staff"}, False, None,
     ["cpu", "pytorch-1g", "pytorch-a100"]),
    ("unrestricted-group-lifts-restriction", {"students", "researchers"}, False, None,
     ["cpu", "pytorch-1g", "tf-shared", "pytorch-a100"]),
    ("group-without-policy-does-not-lift-restriction", {"students", "nlp-course"}, False, None,
     ["cpu", "pytorch-1g"]),
    ("default-policy-restricts-users-without-policy", set(), False, ["cpu"], ["cpu"]),
    ("default-policy-ignored-with-a-policy-group", {"researchers"}, False, ["cpu"],
     ["cpu", "pytorch-1g", "tf-shared", "pytorch-a100"]),
    ("admins-pick-everything", {"students"}, True, ["cpu"], slugs(PROFILES)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("groups", "is_admin", "default_profiles", "expected"),
    [pytest.param(g, a, d, e, id=i) for i, g, a, d, e in ENTITLEMENT_CASES],
)
def test_entitled_profiles(groups, is_admin, default_profiles, expected):
    default = None
    if default_profiles is not None:
        default = load_policy("default", {"profiles": default_profiles}, BY_SLUG)
    got = entitled_profiles(PROFILES, POLICIES, groups, is_admin, default_policy=default)
    assert slugs(got) == expected


def test_a_course_policy_adds_the_course_profile_for_restricted_students():
    policies = load_policies({**POLICY_SPEC, "nlp-course": {"profiles": ["course-nlp"]}}, BY_SLUG)
    got = entitled_profiles(PROFILES, policies, {"students", "nlp-course"}, False)
    assert slugs(got) == ["cpu", "pytorch-1g", "course-nlp"]


@pytest.mark.parametrize(
    ("entitled", "expected"),
    [
        pytest.param(["pytorch-1g", "cpu"], "cpu", id="marked-default-wins"),
        pytest.param(["tf-shared", "pytorch-1g"], "tf-shared", id="else-first"),
        pytest.param([], None, id="none-entitled"),
    ],
)
def test_default_profile(entitled, expected):
    got = default_profile([BY_SLUG[s] for s in entitled])
    assert (got.slug if got else None) == expected


# --- choosing --------------------------------------------------------------------------------

STUDENT = entitled_profiles(PROFILES, POLICIES, {"students"}, False)
MENU = "You may pick: 'cpu' (CPU only), 'pytorch-1g' (PyTorch (1g.10gb MIG slice))."


@pytest.mark.parametrize(
    ("choice", "from_form", "expected"),
    [
        pytest.param({"profile": "pytorch-1g"}, False, "pytorch-1g", id="api-slug"),
        pytest.param({}, False, "cpu", id="api-empty-options-default"),
        pytest.param(None, False, "cpu", id="api-no-options-default"),
        pytest.param({"profile": None}, False, "cpu", id="api-null-profile-default"),
        pytest.param({"profile": ["pytorch-1g"], "_xsrf": ["t"]}, True, "pytorch-1g", id="form"),
        pytest.param({"_xsrf": ["t"]}, True, "cpu", id="form-without-profile-default"),
    ],
)
def test_choose_profile_accepts(choice, from_form, expected):
    assert choose_profile(choice, STUDENT, PROFILES, from_form=from_form).slug == expected


def test_options_from_form_reshapes_into_what_the_api_takes():
    assert options_from_form({"profile": ["cpu"], "_xsrf": ["abc"]}) == {"profile": "cpu"}
    assert options_from_form({"_xsrf": ["abc"]}) == {}
    # judged later, by choose_profile, exactly as the same options from the API
    assert options_from_form({"profile": ["a", "b"], "image": ["x"]}) == {
        "profile": ["a", "b"],
        "image": "x",
    }
    assert options_from_form({"x_file": [{"body": b"data"}]}) == {"x_file": None}


# (id, choice, from_form, reason, the problem the message must start with)
REFUSALS = [
    ("empty-string", {"profile": ""}, False, "bad-choice", "No profile was chosen (the value is empty)."),
    ("form-empty-string", {"profile": [""]}, True, "bad-choice", "No profile was chosen (the value is empty)."),
    ("form-no-values", {"profile": []}, True, "bad-choice", "No profile was chosen."),
    ("form-repeated-same", {"profile": ["cpu", "cpu"]}, True, "bad-choice",
     "Pick exactly one profile; got 2 values ('cpu', 'cpu')."),
    ("form-repeated-different", {"profile": ["cpu", "pytorch-1g"]}, True, "bad-choice",
     "Pick exactly one profile; got 2 values ('cpu', 'pytorch-1g')."),
    ("api-repeated", {"profile": ["cpu", "pytorch-1g"]}, False, "bad-choice",
     "Pick exactly one profile; got 2 values ('cpu', 'pytorch-1g')."),
    ("form-unknown-field", {"profile": ["cpu"], "image": ["evil/image"], "_xsrf": ["t"]}, True,
     "bad-choice", "Unknown option 'image'; the only option is 'profile'."),
    ("form-uploaded-file", {"profile": ["cpu"], "x_file": [{"body": b"..."}]}, True,
     "bad-choice", "Unknown option 'x_file'; the only option is 'profile'."),
    ("form-value-not-list", {"profile": "cpu"}, True, "bad-choice",
     "The form field 'profile' should hold a list of values, got the text 'cpu'."),
    ("form-not-dict", ["cpu"], True, "bad-choice", "The spawn form was not understood."),
    ("unknown-slug", {"profile": "jax"}, False, "unknown-profile", "There is no profile 'jax'."),
    ("not-entitled", {"profile": "pytorch-a100"}, False, "not-entitled",
     "'pytorch-a100' is for groups researchers."),
    ("not-entitled-open-profile", {"profile": "tf-shared"}, False, "not-entitled",
     "'tf-shared' is not available to you."),
    ("int", {"profile": 3}, False, "bad-choice", "'profile' must be one slug (a string), got a number."),
    ("list-in-user-options", {"profile": ["cpu"]}, False, "bad-choice",
     "'profile' must be one slug (a string), got a list."),
    ("dict", {"profile": {"slug": "cpu"}}, False, "bad-choice",
     "'profile' must be one slug (a string), got an object."),
    ("bool", {"profile": True}, False, "bad-choice", "'profile' must be one slug (a string), got true/false."),
    ("unknown-option", {"profile": "cpu", "image": "evil/image"}, False, "bad-choice",
     "Unknown option 'image'; the only option is 'profile'."),
    ("options-not-object", "cpu", False, "bad-choice",
     "Options must be an object with one key, 'profile', got the text 'cpu'."),
    ("html-is-escaped", {"profile": "<img src=x onerror=alert(1)>"}, False, "unknown-profile",
     "There is no profile '\\x3cimg src=x onerror=alert(1)\\x3e'."),
    ("long-value-is-cut", {"profile": "x" * 500}, False, "unknown-profile",
     f"There is no profile '{'x' * 64}…'."),
]  # fmt: skip


@pytest.mark.parametrize(
    ("choice", "from_form", "reason", "problem"),
    [pytest.param(c, f, r, p, id=i) for i, c, f, r, p in REFUSALS],
)
def test_bad_choices_are_refused_with_http_400_and_what_to_pick(choice, from_form, reason, problem):
    with pytest.raises(ProfileChoiceError) as info:
        choose_profile(choice, STUDENT, PROFILES, from_form=from_form)
    err = info.value
    assert (err.status_code, err.reason) == (400, reason)
    assert err.message == f"{problem} {MENU}"
    assert "<" not in err.message


def test_no_choice_and_nothing_entitled_says_so():
    with pytest.raises(ProfileChoiceError) as info:
        choose_profile({}, (), PROFILES)
    assert info.value.reason == "no-profile"
    assert info.value.message == (
        "No profile was chosen and there is none you may use. You may not pick any profile: "
        "ask an administrator to add you to a group that may."
    )


def test_display_names_are_escaped_in_the_menu():
    (odd,) = load_profiles([{**SPEC[0], "display_name": "CPU <b>fast</b>"}])
    with pytest.raises(ProfileChoiceError) as info:
        choose_profile({"profile": "x"}, [odd], [odd])
    assert info.value.message.endswith("You may pick: 'cpu' (CPU \\x3cb\\x3efast\\x3c/b\\x3e).")


# --- errors as JupyterHub shows them ---------------------------------------------------------


def test_refusals_are_jupyterhub_spawn_exceptions_with_the_plain_message():
    err = ProfileChoiceError("There is no profile 'x'.", reason="unknown-profile")
    assert isinstance(err, SpawnException) and isinstance(err, tornado.web.HTTPError)
    # the form page and the progress stream show format_exception(); spawn-pending only_jupyterhub
    assert format_exception(err) == ("There is no profile 'x'.", None)
    assert format_exception(err, only_jupyterhub=True) == ("There is no profile 'x'.", None)
    assert "unknown-profile" in str(err)  # what the hub log shows


@pytest.mark.parametrize(("reason", "status"), sorted(STATUS_BY_REASON.items()))
def test_each_reason_has_its_http_status(reason, status):
    err = SpawnRefused("msg", reason=reason, log_message="detail for the log")
    assert (err.status_code, err.reason, err.message, err.log_message) == (
        status,
        reason,
        "msg",
        "detail for the log",
    )


def test_unknown_reason_needs_an_explicit_status():
    with pytest.raises(ValueError, match="unknown refusal reason 'typo'"):
        SpawnRefused("msg", reason="typo")
    assert SpawnRefused("msg", reason="drained", status_code=409).status_code == 409
    with pytest.raises(ValueError):
        ProfileChoiceError("msg", reason="quota")


class _Refusing(APIHandler):
    """A JupyterHub API handler whose request raises a choice refusal, as ``start()`` would."""

    async def prepare(self):
        pass

    async def post(self):
        choose_profile({"profile": "pytorch-a100"}, STUDENT, PROFILES)


async def test_the_rest_api_answers_400_with_the_message_as_json():
    # the settings JupyterHub's API handlers read on the error path, nothing more
    app = tornado.web.Application(
        [("/", _Refusing)],
        csp_report_uri="/csp",
        hub=types.SimpleNamespace(base_url="/hub/"),
        db=types.SimpleNamespace(dirty=False, new=False, deleted=False),
    )
    sock, port = bind_unused_port()
    server = tornado.httpserver.HTTPServer(app)
    server.add_sockets([sock])
    try:
        response = await AsyncHTTPClient().fetch(
            f"http://127.0.0.1:{port}/", method="POST", body="{}", raise_error=False
        )
    finally:
        server.stop()
    assert response.code == 400
    assert json.loads(response.body) == {
        "status": 400,
        "message": f"'pytorch-a100' is for groups researchers. {MENU}",
    }


# --- the protected environment: one rule at load and at spawn ----------------------------------

#: Names around the protected prefixes, in several cases; the old load rule accepted the
#: lower-case and ``NVIDIA_MIG_*`` ones that the spawner then silently dropped.
ENV_NAMES = [
    "NVIDIA_VISIBLE_DEVICES", "nvidia_visible_devices", "Cuda_Visible_Devices",
    "CUDA_VISIBLE_DEVICES_EXTRA", "cuda_mps_pipe_directory", "CUDA_MPS_LOG_DIRECTORY",
    "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_PARTED", "nvidia_mig_monitor_devices",
    "NVIDIA_DRIVER_CAPABILITIES", "CUDA_HOME", "CUDA_MP", "NVIDIA_MI", "OMP_NUM_THREADS",
    "MY_CUDA_VISIBLE_DEVICES", "GPULAB_NOTE",
]  # fmt: skip


@pytest.mark.parametrize("name", ENV_NAMES)
def test_profile_env_is_refused_at_load_exactly_when_the_spawner_would_drop_it(name):
    from jupyterhub_gpulab.spawner.container import merge_env

    dropped = name not in merge_env({name: "x"}, protected={})
    try:
        load_profiles(spec_with(env={name: "x"}))
        refused = False
    except ConfigError as e:
        refused = True
        assert f"env {name} is set by gpulab" in str(e)
    assert refused == dropped, f"{name}: refused at load={refused}, dropped at spawn={dropped}"
    assert dropped == name.upper().startswith(
        ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "CUDA_MPS_", "NVIDIA_MIG_")
    )

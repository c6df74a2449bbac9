"""Profiles: what a user picks, who may pick it, and turning their choice into one.

Pure logic, no I/O. Configured as a list of dicts::

    c.GPULab.profiles = [
        {"slug": "cpu", "display_name": "CPU only", "image": "quay.io/jupyter/scipy-notebook",
         "cpu_limit": 2, "mem_limit": "4G", "default": True},
        {"slug": "pytorch-1g", "display_name": "PyTorch (1g.10gb MIG slice)",
         "image": "quay.io/jupyter/pytorch-notebook:cuda12-latest",
         "slice": {"kind": "mig", "mig_profile": "1g.10gb"}, "mem_limit": "16G"},
        {"slug": "pytorch-a100", "display_name": "PyTorch (full A100)", "image": "…",
         "slice": {"kind": "gpu", "model": "A100", "min_memory": "40GiB"},
         "groups": ["researchers"], "idle_timeout": "1h", "max_age": "3d"},
        {"slug": "tf-shared", "display_name": "TensorFlow (shared seat)", "image": "…",
         "slice": {"kind": "shared", "min_memory": "2GiB"},
         "env": {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}},
    ]

Who may pick a profile (:func:`entitled_profiles`), the product's rule:

1. Admins may pick every profile.
2. A profile is *open* to a user when its ``groups`` is empty, names one of the user's groups, or
   one of the user's group policies lists it in ``profiles``.
3. The user may pick an open profile that one of their policies allows (a policy without
   ``profiles`` allows every open profile). A user under no policy may pick every open profile.
   Their policies are their groups' policies, else ``default_policy`` (see :mod:`.policy`).

So a profile's ``groups`` and a policy's ``profiles`` both *grant*, and a policy with ``profiles``
also *restricts* its members to that list, unless another of their groups allows more.

The record is :class:`~.profile.Profile`. Choices (:func:`~.choice.choose`,
:func:`~.choice.choose_profile`, :func:`~.choice.options_from_form`,
:func:`~.choice.options_from_query`, :func:`~.choice.default_profile`,
:func:`~.choice.saved_choice_notice`) live in :mod:`.choice`: every refusal is a
:class:`~..errors.ProfileChoiceError` (HTTP 400) listing what the user may pick.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

from ..errors import ConfigError
from ..inventory.model import SliceKind, SliceRequest
from ..units import UnitError, parse_bytes, parse_seconds
from .hardening import cap_add_problems, pids_limit_problem
from .policy import GroupPolicy, PolicyContext
from .profile import Profile

__all__ = [
    "PROFILE_KEYS",
    "load_profiles",
    "entitled_profiles",
    "entitled_in",
    "is_protected_env",
    "PROTECTED_ENV_PREFIXES",
]

SLUG_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
MIG_PROFILE_RE = re.compile(r"^(\d+c\.)?\d+g\.\d+gb(\+[a-z]+)*$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

PROFILE_KEYS = (
    "slug", "display_name", "description", "image", "slice", "cpu_limit", "mem_limit", "env",
    "groups", "default", "idle_timeout", "gpu_idle_timeout", "max_age", "pids_limit", "cap_add",
    "shm_size",
)  # fmt: skip
SLICE_KEYS = {
    "gpu": ("kind", "min_memory", "model"),
    "mig": ("kind", "mig_profile"),
    "shared": ("kind", "min_memory"),
}
#: Container options a profile may never carry, whatever their value.
DANGEROUS_KEYS = frozenset(
    {
        "privileged", "devices", "device_requests", "device_cgroup_rules",
        "security_opt", "extra_host_config", "extra_create_kwargs", "host_config", "pid_mode",
        "ipc_mode", "network_mode", "userns_mode", "runtime",
    }
)  # fmt: skip
#: Mount options, refused with the same reason when they reach the Docker socket or /dev.
MOUNT_KEYS = frozenset({"volumes", "mounts", "binds", "read_only_volumes"})
DANGER = (
    "privileged containers / host devices / the Docker socket are never allowed: "
    "a user could escape their slice"
)
#: Environment only gpulab may set (the GPU a container sees, MIG devices, MPS seat limits):
#: every name starting with one of these, in any case. A profile naming one is refused at load;
#: the spawner drops any that still reach it (a user's env) before adding the slice's own.
PROTECTED_ENV_PREFIXES = (
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_MPS_",
    "NVIDIA_MIG_",
)


def is_protected_env(name: str) -> bool:
    """Whether ``name`` is an environment variable only gpulab may set
    (:data:`PROTECTED_ENV_PREFIXES`, case-insensitive: ``cuda_visible_devices`` too)."""
    return name.upper().startswith(PROTECTED_ENV_PREFIXES)


SLUG_FIX = "use 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit, e.g. 'pytorch-a100'"


def _mentions_host(value: object) -> bool:
    """Whether a mount spec anywhere names the Docker socket or a host device."""
    if isinstance(value, str):
        return "docker.sock" in value or value.startswith("/dev") or ":/dev" in value
    if isinstance(value, Mapping):
        return any(_mentions_host(k) or _mentions_host(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_mentions_host(v) for v in value)
    return False


def _key_problems(entry: Mapping, where: str) -> list[str]:
    problems = []
    for key in entry:
        if key in PROFILE_KEYS:
            continue
        if key in DANGEROUS_KEYS or (key in MOUNT_KEYS and _mentions_host(entry[key])):
            problems.append(f"{where}: key {key!r} is refused: {DANGER}; remove it")
            continue
        hint = difflib.get_close_matches(str(key), PROFILE_KEYS, n=1)
        problems.append(
            f"{where}: unknown key {key!r}"
            + (f" (did you mean {hint[0]!r}?)" if hint else "")
            + f"; allowed keys are {', '.join(PROFILE_KEYS)}"
        )
    return problems


def _slice(value: object, where: str, errors: list[str]) -> SliceRequest:
    if value is None:
        return SliceRequest()
    kinds = ", ".join(SLICE_KEYS)
    if not isinstance(value, Mapping):
        errors.append(
            f"{where}: slice must be null (no GPU) or a dict such as "
            f"{{'kind': 'mig', 'mig_profile': '1g.10gb'}}, got {value!r}"
        )
        return SliceRequest()
    kind = value.get("kind")
    if kind not in SLICE_KEYS:
        errors.append(f"{where}: slice kind {kind!r} is not one of {kinds}")
        return SliceRequest()
    extra = [k for k in value if k not in SLICE_KEYS[kind]]
    if extra:
        errors.append(
            f"{where}: slice keys {', '.join(map(repr, extra))} do not apply to kind "
            f"{kind!r}; it takes {', '.join(SLICE_KEYS[kind])}"
        )
    min_memory = 0
    if value.get("min_memory") is not None:
        try:
            min_memory = parse_bytes(value["min_memory"], "slice min_memory")
        except UnitError as e:
            errors.append(f"{where}: {e}")
    model = value.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        errors.append(
            f"{where}: slice model must be part of a GPU name such as 'A100', got {model!r}"
        )
        model = None
    mig_profile = value.get("mig_profile")
    if kind == "mig" and (
        not isinstance(mig_profile, str) or not MIG_PROFILE_RE.match(mig_profile)
    ):
        errors.append(
            f"{where}: a mig slice needs mig_profile as NVML names it, e.g. '1g.10gb' or "
            f"'3g.40gb', got {mig_profile!r}"
        )
        mig_profile = None
    return SliceRequest(
        kind=SliceKind(kind), min_memory_bytes=min_memory, model=model, mig_profile=mig_profile
    )


def _env(value: object, where: str, errors: list[str]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        errors.append(f"{where}: env must be a dict of strings such as {{'OMP_NUM_THREADS': '4'}}")
        return {}
    env = {}
    for name, val in value.items():
        if not isinstance(name, str) or not ENV_NAME_RE.match(name):
            errors.append(
                f"{where}: env name {name!r} is not a valid variable name; use letters, digits and '_'"
            )
        elif is_protected_env(name):
            errors.append(
                f"{where}: env {name} is set by gpulab to the allocated slice and may not be "
                "overridden; remove it (choose the GPU with the profile's slice instead)"
            )
        elif not isinstance(val, str):
            errors.append(f"{where}: env {name} must be a string; write {str(val)!r}")
        else:
            env[name] = val
    return env


def _duration(entry: Mapping, key: str, where: str, errors: list[str]) -> int | None:
    if entry.get(key) is None:
        return None
    try:
        seconds = parse_seconds(entry[key], key)
    except UnitError as e:
        errors.append(f"{where}: {e}; or null to leave it unset")
        return None
    if seconds == 0:
        errors.append(f"{where}: {key} 0 would end sessions at once; use null to leave it unset")
    return seconds or None


def _profile(entry: Mapping, where: str, errors: list[str]) -> Profile:
    errors.extend(_key_problems(entry, where))
    slug = entry.get("slug")
    if slug is None:
        errors.append(f"{where}: 'slug' is missing; add one: {SLUG_FIX}")
    elif not isinstance(slug, str) or not SLUG_RE.match(slug):
        errors.append(f"{where}: slug {slug!r} is not DNS-safe; {SLUG_FIX}")
    display_name = entry.get("display_name")
    if not isinstance(display_name, str) or not display_name.strip():
        what = (
            "is missing"
            if display_name is None
            else f"must be a non-empty string, got {display_name!r}"
        )
        errors.append(
            f"{where}: 'display_name' {what}; add e.g. display_name: 'PyTorch (1 GB GPU slice)'"
        )
        display_name = ""
    description = entry.get("description") or ""
    if not isinstance(description, str):
        errors.append(f"{where}: description must be a string, got {description!r}")
    image = entry.get("image")
    if not isinstance(image, str) or not image.strip() or any(c.isspace() for c in image):
        errors.append(
            f"{where}: 'image' {'is missing' if image is None else f'{image!r} is not an image name'}; "
            "add e.g. image: 'quay.io/jupyter/pytorch-notebook:cuda12-latest'"
        )
    request = _slice(entry.get("slice"), where, errors)
    cpu = entry.get("cpu_limit")
    if cpu is not None and (
        isinstance(cpu, bool) or not isinstance(cpu, (int, float)) or not 0 < cpu < 1e6
    ):
        errors.append(
            f"{where}: cpu_limit {cpu!r} is not a number of cores > 0; write e.g. 2 or 0.5"
        )
        cpu = None
    mem = entry.get("mem_limit")
    if mem is not None:
        try:
            mem = parse_bytes(mem, "mem_limit") or None
            if mem is None:
                errors.append(f"{where}: mem_limit 0 leaves no memory; write e.g. '16G' or null")
        except UnitError as e:
            errors.append(f"{where}: {e}")
            mem = None
    groups = entry.get("groups") or ()
    if (
        isinstance(groups, str)
        or not isinstance(groups, (list, tuple))
        or not all(isinstance(g, str) and g for g in groups)
    ):
        errors.append(
            f"{where}: groups must be a list of group names such as ['researchers'], got {groups!r}"
        )
        groups = ()
    default = entry.get("default", False)
    if not isinstance(default, bool):
        errors.append(f"{where}: default must be true or false, got {default!r}")
    env = _env(entry.get("env"), where, errors)
    timeouts = {
        k: _duration(entry, k, where, errors)
        for k in ("idle_timeout", "gpu_idle_timeout", "max_age")
    }
    pids_limit = entry.get("pids_limit")
    if pids_limit is not None and (problem := pids_limit_problem(pids_limit)):
        errors.append(f"{where}: {problem}")
        pids_limit = None
    shm = entry.get("shm_size")
    if shm is not None:
        try:
            shm = parse_bytes(shm, "shm_size")
            if shm < 64 * 2**20:
                errors.append(
                    f"{where}: shm_size {entry['shm_size']!r} is under Docker's own 64 MiB; "
                    "PyTorch DataLoader workers need more, e.g. '1GiB'"
                )
                shm = None
        except UnitError as e:
            errors.append(f"{where}: {e}")
            shm = None
    cap_add = None
    if entry.get("cap_add") is not None:
        cap_add, problems = cap_add_problems(entry["cap_add"])
        errors.extend(f"{where}: {m}" for m in problems)
    return Profile(
        slug=slug if isinstance(slug, str) else "",
        display_name=display_name,
        image=image if isinstance(image, str) else "",
        description=description if isinstance(description, str) else "",
        slice=request,
        cpu_limit=float(cpu) if cpu is not None else None,
        mem_limit=mem,
        env=MappingProxyType(env),
        groups=tuple(dict.fromkeys(groups)),
        default=default is True,
        pids_limit=pids_limit,
        cap_add=cap_add,
        shm_size=shm,
        **timeouts,
    )


def load_profiles(spec: Sequence[Mapping]) -> tuple[Profile, ...]:
    """Validate the ``profiles`` list (keys: :data:`PROFILE_KEYS`) into profiles, config order.

    Raises :class:`~..errors.ConfigError` listing every problem, each naming
    ``profiles[i] ('slug')`` and the fix: not a list or empty, unknown keys, container options
    (``privileged``, ``devices``, ``security_opt``, the Docker socket …), a ``cap_add`` outside
    Docker's default capabilities (``SYS_ADMIN`` …) or a ``pids_limit`` that limits nothing,
    missing slug / display_name / image, a slug that is not DNS-safe, duplicate slugs, more
    than one default, bad units, bad slice kinds or keys, a mig slice without a valid
    ``mig_profile``, env that is not str -> str or that sets ``NVIDIA_VISIBLE_DEVICES``,
    ``CUDA_VISIBLE_DEVICES``, ``NVIDIA_MIG_*_DEVICES`` or ``CUDA_MPS_*``.
    """
    if isinstance(spec, (str, bytes, Mapping)) or not isinstance(spec, Sequence):
        raise ConfigError(f"profiles must be a list of dicts, got {type(spec).__name__}")
    if not spec:
        raise ConfigError("profiles is empty; configure at least one, e.g. a CPU-only profile")
    errors: list[str] = []
    profiles: list[Profile] = []
    first_where: dict[str, str] = {}
    default_where = None
    for i, entry in enumerate(spec):
        slug = entry.get("slug") if isinstance(entry, Mapping) else None
        where = f"profiles[{i}]" + (f" ({slug[:64]!r})" if isinstance(slug, str) else "")
        if not isinstance(entry, Mapping):
            errors.append(
                f"{where}: must be a dict with slug, display_name and image, got {type(entry).__name__}"
            )
            continue
        profile = _profile(entry, where, errors)
        if profile.slug in first_where:
            errors.append(
                f"{where}: slug {profile.slug!r} is already used by {first_where[profile.slug]}; slugs must be unique"
            )
        elif profile.slug:
            first_where[profile.slug] = where
        if profile.default:
            if default_where:
                errors.append(
                    f"{where}: only one profile may be the default and {default_where} is already; remove one 'default: true'"
                )
            else:
                default_where = where
        profiles.append(profile)
    if errors:
        raise ConfigError(errors)
    return tuple(profiles)


def entitled_profiles(
    profiles: Iterable[Profile],
    policies: Mapping[str, GroupPolicy],
    groups: Iterable[str],
    is_admin: bool,
    *,
    default_policy: GroupPolicy | None = None,
) -> tuple[Profile, ...]:
    """The profiles this user may pick, in config order (rule: module docstring)."""
    return entitled_in(profiles, PolicyContext.of(groups, is_admin, policies, default_policy))


def entitled_in(profiles: Iterable[Profile], ctx: PolicyContext) -> tuple[Profile, ...]:
    """The profiles the user of ``ctx`` may pick, in config order (rule: module docstring)."""
    if ctx.is_admin:
        return tuple(profiles)
    groups, mine = ctx.groups, ctx.policies
    listed = {slug for p in mine for slug in (p.profiles or ())}

    def may_pick(p: Profile) -> bool:
        is_open = not p.groups or not groups.isdisjoint(p.groups) or p.slug in listed
        return is_open and (not mine or any(pol.allows(p.slug) for pol in mine))

    return tuple(p for p in profiles if may_pick(p))

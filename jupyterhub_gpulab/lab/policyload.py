"""Reading group policies from config: ``c.GPULab.group_policies`` and ``default_policy``, each
checked key by key into a :class:`~.policy.GroupPolicy`, every problem named with its fix.

Pure logic, no I/O. The rules a loaded policy follows (how several combine) live in
:mod:`.policy`; this module only turns config dicts into policies, as :mod:`.profiles` does
for profiles.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from ..errors import ConfigError
from ..units import UnitError, parse_seconds
from .policy import DEFAULT_KEEPS, GroupPolicy

__all__ = ["PERIODS", "POLICY_KEYS", "load_policy", "load_policies"]

#: Accounting periods for ``gpu_hours``.
PERIODS = ("day", "week", "term")
#: Every key a policy may have.
POLICY_KEYS = (
    "profiles",
    "max_slices_per_user",
    "max_slices",
    "priority",
    "gpu_hours",
    "period",
    "max_session",
    "preemptible",
    "keeps_per_day",
)


def _count(value: object, key: str, where: str, errors: list[str]) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        errors.append(
            f"{where}: {key} {value!r} is not a whole number >= 0; "
            f"write e.g. {key}: 2, or null for no limit"
        )
        return None
    return value


def _check(group: object, spec: object, known: frozenset[str], where: str) -> tuple:
    """Return ``(policy or None, errors)`` for one policy."""
    errors: list[str] = []
    if not isinstance(group, str) or not group:
        errors.append(f"{where}: the group name must be a non-empty string, got {group!r}")
        return None, errors
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        errors.append(
            f"{where}: must be a dict such as {{'max_slices_per_user': 1}}, "
            f"got {type(spec).__name__}"
        )
        return None, errors
    for key in spec:
        if key not in POLICY_KEYS:
            errors.append(
                f"{where}: unknown key {key!r}; allowed keys are {', '.join(POLICY_KEYS)}"
            )

    profiles = spec.get("profiles")
    if profiles is not None:
        if isinstance(profiles, str) or not isinstance(profiles, (list, tuple)):
            errors.append(
                f"{where}: profiles must be a list of profile slugs such as ['cpu'], "
                f"got {profiles!r}; omit it to allow every profile open to the group"
            )
            profiles = None
        elif not profiles:
            errors.append(
                f"{where}: profiles is empty, which would allow nothing; list slugs, "
                "or omit it to allow every profile open to the group"
            )
            profiles = None
        else:
            unknown = [s for s in profiles if s not in known]
            if unknown:
                errors.append(
                    f"{where}: profiles names unknown profile(s) "
                    f"{', '.join(repr(s) for s in unknown)}; known slugs are "
                    f"{', '.join(sorted(known)) or '(none)'}"
                )
            profiles = tuple(dict.fromkeys(profiles))

    per_user = _count(spec.get("max_slices_per_user"), "max_slices_per_user", where, errors)
    group_cap = _count(spec.get("max_slices"), "max_slices", where, errors)

    priority = spec.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        errors.append(f"{where}: priority {priority!r} is not a whole number; write e.g. 10")
        priority = 0

    gpu_hours = spec.get("gpu_hours")
    if gpu_hours is not None and (
        isinstance(gpu_hours, bool)
        or not isinstance(gpu_hours, (int, float))
        or not math.isfinite(gpu_hours)
        or gpu_hours < 0
    ):
        errors.append(
            f"{where}: gpu_hours {gpu_hours!r} is not a number of hours >= 0; write e.g. 20"
        )
        gpu_hours = None

    period = spec.get("period", "week")
    if period not in PERIODS:
        errors.append(f"{where}: period {period!r} is not one of {', '.join(PERIODS)}")
        period = "week"

    max_session = spec.get("max_session")
    if max_session is not None:
        try:
            max_session = parse_seconds(max_session, "max_session")
            if max_session == 0:
                raise UnitError("max_session 0 would end every session at once")
        except UnitError as e:
            errors.append(f"{where}: {e}; or null for no limit")
            max_session = None

    preemptible = spec.get("preemptible", False)
    if not isinstance(preemptible, bool):
        errors.append(f"{where}: preemptible {preemptible!r} is not true or false")
        preemptible = False

    keeps = _count(spec.get("keeps_per_day", DEFAULT_KEEPS), "keeps_per_day", where, errors)

    if errors:
        return None, errors
    policy = GroupPolicy(
        group=group,
        profiles=profiles,
        max_slices_per_user=per_user,
        max_slices=group_cap,
        priority=priority,
        gpu_hours=float(gpu_hours) if gpu_hours is not None else None,
        period=period,
        max_session=max_session,
        preemptible=preemptible,
        keeps_per_day=keeps,
    )
    return policy, []


def load_policy(
    group: str, spec: Mapping | None, known_slugs: Iterable[str], *, where: str | None = None
) -> GroupPolicy:
    """Validate one policy (e.g. ``default_policy``) for group ``group``.

    ``known_slugs`` are the configured profile slugs. Raises :class:`ConfigError` listing every
    problem, each prefixed with ``where`` (default ``group_policies['<group>']``).
    """
    where = where or f"group_policies[{group!r}]"
    policy, errors = _check(group, spec, frozenset(known_slugs), where)
    if errors:
        raise ConfigError(errors)
    return policy


def load_policies(spec: Mapping | None, known_slugs: Iterable[str]) -> dict[str, GroupPolicy]:
    """Validate the ``group_policies`` dict ``{group: {key: value}}``; see :data:`POLICY_KEYS`.

    Returns ``{group: GroupPolicy}`` in config order. Raises :class:`ConfigError` with every
    problem: not a dict, unknown keys, bad numbers or units, ``profiles`` naming unknown slugs.
    """
    if spec is None:
        return {}
    if not isinstance(spec, Mapping):
        raise ConfigError(
            "group_policies must be a dict keyed by group name, such as "
            f"{{'students': {{'max_slices_per_user': 1}}}}, got {type(spec).__name__}"
        )
    known = frozenset(known_slugs)
    policies: dict[str, GroupPolicy] = {}
    errors: list[str] = []
    for group, entry in spec.items():
        policy, problems = _check(group, entry, known, f"group_policies[{group!r}]")
        errors.extend(problems)
        if policy is not None:
            policies[group] = policy
    if errors:
        raise ConfigError(errors)
    return policies

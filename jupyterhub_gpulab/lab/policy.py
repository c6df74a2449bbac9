"""Group policies: which profiles a group may use, how many slices, at what priority.

Pure logic, no I/O. Configured as a dict keyed by JupyterHub group name::

    c.GPULab.group_policies = {
        "students": {
            "profiles": ["cpu", "pytorch-1g"],  # omit (or null) = every profile open to them
            "max_slices_per_user": 1,           # over all the user's servers, named ones too
            "max_slices": 40,                   # the whole group at once
            "priority": 0,
            "gpu_hours": 20, "period": "week",  # later: fair-use accounting
            "max_session": "8h",
            "keeps_per_day": 2,                 # "Keep" clicks on a GPU-idle warning, per day
        },
        "researchers": {"max_slices_per_user": 4, "priority": 10},
        "admin": {"max_slices_per_user": 8},    # JupyterHub admins (see below)
    }

How several groups combine (:func:`resolve`), the product's rule:

- A user's *policies* are the policies of their JupyterHub groups. A user whose groups have none
  falls under ``default_policy`` (``None``: no limits). A JupyterHub **admin** falls under the
  ``admin`` policy alone when one is configured, else has no limits (a non-admin member of a
  JupyterHub group called ``admin`` gets that policy as an ordinary group policy).
- **Per-user limit**: the most generous of the user's policies; a policy without
  ``max_slices_per_user`` (unlimited) beats any number. It is a property of the person, the same
  whichever profile they pick, and counts every slice they hold over all their servers.
- **Priority**: the highest of the user's policies (0 when they have none).
- **Group-wide caps**: an allocation is charged to exactly one group: the first, in *charge
  order* (priority high to low, then group name), of the user's policies that *allow* the profile
  (its ``profiles`` is unset or lists it) and whose ``max_slices`` has room. :func:`resolve` gives
  the ordered candidates; the ledger checks room atomically. ``None`` as a cap means no cap.
- **CPU-only profiles** (no slice) are never counted against any slice limit.
- **Keeps per day** (``keeps_per_day``, default :data:`DEFAULT_KEEPS`): how many times a member
  may click **Keep** on a GPU-idle warning in one day of ``c.GPULab.quota_timezone`` (each
  postpones that server's ``gpu-idle`` cull by one ``gpu_idle_timeout``,
  :mod:`..fairuse.keeps`). The most generous of the user's policies; ``None`` (or no policy at
  all) is no limit; ``0`` turns Keep off.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timezone, tzinfo
from typing import TYPE_CHECKING, Protocol

from ..errors import ProfileChoiceError, plain

if TYPE_CHECKING:
    from .profile import Profile
    from .term import Term

__all__ = [
    "ADMIN_POLICY",
    "DEFAULT_KEEPS",
    "GroupPolicy",
    "Entitlement",
    "PolicySource",
    "applicable_policies",
    "PolicyContext",
    "resolve",
    "user_limit",
]

#: The policy key that applies to JupyterHub admins.
ADMIN_POLICY = "admin"
#: Keeps a day a policy gives when it does not say (``keeps_per_day``).
DEFAULT_KEEPS = 2


@dataclass(frozen=True)
class GroupPolicy:
    """One group's policy.

    - ``profiles``: slugs the group's members may use (they may pick them even where the profile
      itself names other groups); ``None`` allows every profile open to them.
    - ``max_slices_per_user``: most slices one member may hold at once, all servers together;
      ``None`` is unlimited.
    - ``max_slices``: most slices the whole group may be charged for at once; ``None`` is no cap.
    - ``priority``: higher wins: the waitlist serves higher priorities first, and (with
      ``c.GPULabService.preemption = True``) a queued user may preempt a lower one's idle GPU.
    - ``preemptible``: whether members' servers may be preempted at all (default ``False``: a
      user is preemptible only when every policy they fall under says so).
    - ``gpu_hours`` per ``period`` (``"day"``, ``"week"``, ``"term"``): the budget checked before a
      claim and by the culler (:mod:`..fairuse.quota`); ``max_session`` (seconds) caps a
      profile's ``max_age`` in the culler; ``None`` is unset.
    - ``keeps_per_day``: Keep clicks a member may make per day (module docstring); ``None`` is
      no limit.
    """

    group: str
    profiles: tuple[str, ...] | None = None
    max_slices_per_user: int | None = None
    max_slices: int | None = None
    priority: int = 0
    gpu_hours: float | None = None
    period: str = "week"
    max_session: int | None = None
    preemptible: bool = False
    keeps_per_day: int | None = DEFAULT_KEEPS

    def allows(self, slug: str) -> bool:
        """Whether this policy lets its members use profile ``slug``."""
        return self.profiles is None or slug in self.profiles


@dataclass(frozen=True)
class Entitlement:
    """What a user's policies say about one allocation.

    - ``user_limit``: most slices the user may hold at once over all servers (``None``: no limit).
    - ``charge_groups``: ``(group, max_slices)`` pairs, in the order to try; the allocation is
      charged to the first with room (``max_slices`` ``None``: always room). Empty: no group cap
      applies.
    - ``priority``: the user's priority.
    - ``counted``: ``False`` for CPU-only profiles, which never count against slice limits.
    """

    user_limit: int | None
    charge_groups: tuple[tuple[str, int | None], ...]
    priority: int = 0
    counted: bool = True


def applicable_policies(
    groups: Iterable[str],
    is_admin: bool,
    policies: Mapping[str, GroupPolicy],
    default_policy: GroupPolicy | None = None,
) -> tuple[GroupPolicy, ...]:
    """The policies a user falls under, sorted by group name (see the module docstring).

    Admins: ``(policies['admin'],)`` if configured, else ``()``. Others: their groups' policies,
    else ``(default_policy,)``, else ``()``. ``()`` means no limits.
    """
    if is_admin:
        return (policies[ADMIN_POLICY],) if ADMIN_POLICY in policies else ()
    found = tuple(policies[g] for g in sorted(set(groups)) if g in policies)
    if found:
        return found
    return (default_policy,) if default_policy is not None else ()


def user_limit(policies: Iterable[GroupPolicy]) -> int | None:
    """The most slices a user under ``policies`` may hold at once: the most generous of them (a
    policy without ``max_slices_per_user`` means no limit, as does having no policy)."""
    limits = [p.max_slices_per_user for p in policies]
    return None if not limits or None in limits else max(limits)


class PolicySource(Protocol):
    """What :meth:`PolicyContext.for_user` reads of a loaded lab (:class:`~.config.Lab` has it):
    named here so this module needs nothing of the config that loads it."""

    @property
    def policies(self) -> Mapping[str, GroupPolicy]: ...
    @property
    def default_policy(self) -> GroupPolicy | None: ...
    @property
    def tz(self) -> tzinfo: ...
    @property
    def term(self) -> Term | None: ...


@dataclass(frozen=True)
class PolicyContext:
    """A user's standing under the lab's policies, computed once per request and passed on (to
    entitlement, the per-user limit, the budget check, the user page).

    ``groups`` (JupyterHub group names) and ``is_admin`` are the user's; ``policies`` are the
    ones they fall under (:func:`applicable_policies`, sorted by group; ``()``: no limits);
    ``tz`` and ``term`` (a :class:`~.term.Term` or ``None``) place their budget
    periods (``c.GPULab.quota_timezone``, ``term_start`` / ``term_end``).
    """

    groups: frozenset[str]
    is_admin: bool
    policies: tuple[GroupPolicy, ...]
    tz: tzinfo = timezone.utc
    term: Term | None = None

    @classmethod
    def of(
        cls,
        groups: Iterable[str],
        is_admin: bool,
        policies: Mapping[str, GroupPolicy],
        default_policy: GroupPolicy | None = None,
        *,
        tz: tzinfo = timezone.utc,
        term: Term | None = None,
    ) -> PolicyContext:
        groups = frozenset(groups)
        mine = applicable_policies(groups, is_admin, policies, default_policy)
        return cls(groups, is_admin, mine, tz, term)

    @classmethod
    def for_user(cls, groups: Iterable[str], is_admin: bool, lab: PolicySource) -> PolicyContext:
        """The context of a user of ``lab`` (a loaded :class:`~.config.Lab`, or anything with
        its policy fields: :class:`PolicySource`)."""
        return cls.of(groups, is_admin, lab.policies, lab.default_policy, tz=lab.tz, term=lab.term)

    @property
    def user_limit(self) -> int | None:
        """Most slices the user may hold at once (:func:`user_limit`; ``None``: no limit)."""
        return user_limit(self.policies)

    @property
    def priority(self) -> int:
        """The highest priority of the user's policies (0 without one)."""
        return max((p.priority for p in self.policies), default=0)

    @property
    def keeps_per_day(self) -> int | None:
        """Keep clicks a day the user may make: the most generous of their policies (``None``:
        no limit, also for a user under no policy)."""
        found = [p.keeps_per_day for p in self.policies]
        return None if not found or None in found else max(found)

    @property
    def preemptible(self) -> bool:
        """Whether the user's servers may be preempted: every policy of theirs says so (none:
        no)."""
        return bool(self.policies) and all(p.preemptible for p in self.policies)

    def entitlement(self, profile: Profile) -> Entitlement:
        """Combine the user's policies for one allocation of ``profile`` (rule: module
        docstring). Raises :class:`~..errors.ProfileChoiceError` (``not-entitled``, HTTP 400)
        for a non-admin none of whose policies allows ``profile``."""
        mine = self.policies
        if not profile.slice.wants_gpu:
            return Entitlement(None, (), priority=self.priority, counted=False)
        covering = sorted(
            (p for p in mine if p.allows(profile.slug)), key=lambda p: (-p.priority, p.group)
        )
        if mine and not covering and not self.is_admin:
            raise ProfileChoiceError(
                f"'{profile.slug}' is not allowed by the policies of your groups "
                f"({', '.join(plain(p.group) for p in mine)})",
                reason="not-entitled",
            )
        return Entitlement(
            user_limit=self.user_limit,
            charge_groups=tuple((p.group, p.max_slices) for p in covering),
            priority=self.priority,
        )


def resolve(
    groups: Iterable[str],
    is_admin: bool,
    profile: Profile,
    policies: Mapping[str, GroupPolicy],
    default_policy: GroupPolicy | None = None,
) -> Entitlement:
    """:meth:`PolicyContext.entitlement` for a user given by ``groups`` and ``is_admin``.

    Call it for a profile the user is entitled to (:func:`~.profiles.entitled_profiles`); for a
    non-admin none of whose policies allows ``profile`` it raises
    :class:`~..errors.ProfileChoiceError` (``not-entitled``, HTTP 400) rather than leave the
    allocation outside every group cap.
    """
    return PolicyContext.of(groups, is_admin, policies, default_policy).entitlement(profile)

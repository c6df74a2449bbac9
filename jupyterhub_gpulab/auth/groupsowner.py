"""Who owns the hub's groups, for code that reads or would edit them (course rosters, pages).

Runs in every process (pure: it reads the configuration only). With a gpulab authenticator
that manages groups (campus SSO, LTI 1.3) the identity provider or the LMS owns every user's
group membership: JupyterHub 6 still accepts a membership edit through its API, but the user's
next login or refresh replaces it with the provider's (tested in ``test_sso_oidc``). So:

- a course's roster is a **mapped group** (a provider group renamed to the course group, or an
  LTI context listed in ``context_groups``), and gpulab never adds or removes its members;
- a page that shows a roster says where it comes from (:meth:`GroupsOwner.describe`).

:func:`groups_owner` answers from the configuration; :meth:`GroupsOwner.can_produce` says
whether the mapping can ever yield a group (for ``gpulab check-config``: a policy or course
naming a group no login can be in).
"""

from __future__ import annotations

from dataclasses import dataclass

from traitlets.config import Config

from .configured import authenticator
from .groupmap import GroupMapping

__all__ = ["GroupsOwner", "groups_owner"]


@dataclass(frozen=True)
class GroupsOwner:
    """``kind``: ``"hub"`` (groups edited in the hub: ``load_groups``, admin panel, API),
    ``"oidc"`` (campus SSO), ``"lti"`` (LMS launches) or ``"authenticator"`` (another
    authenticator with ``manage_groups``); ``refresh_age`` in seconds (0: only at login);
    ``mapping``: the :class:`GroupMapping` (``None`` for ``"hub"`` and ``"authenticator"``);
    ``context_groups``: LTI context id -> group."""

    kind: str
    refresh_age: int = 0
    mapping: GroupMapping | None = None
    context_groups: dict | None = None
    staff_suffix: str = ""

    @property
    def may_edit(self) -> bool:
        """Whether gpulab may change group membership (only when the hub owns groups)."""
        return self.kind == "hub"

    def describe(self, group: str) -> str:
        """One sentence for a page: where ``group``'s members come from."""
        if self.kind == "hub":
            return f"Members of '{group}' are managed in JupyterHub (its admin panel or API)."
        every = (
            f", re-read at each member's next visit after {self.refresh_age // 60} min"
            if self.refresh_age >= 60
            else (f", re-read every {self.refresh_age} s" if self.refresh_age else ", at login")
        )
        if self.kind == "authenticator":
            return (
                f"Members of '{group}' come from the hub's authenticator, which manages groups "
                f"at each login{every}; change them where it reads them, not here."
            )
        if self.kind == "lti":
            return (
                f"Members of '{group}' come from course launches in the LMS (LTI 1.3): each "
                "student joins at their first launch; edit the course there, not here."
            )
        return (
            f"Members of '{group}' come from the identity provider (campus single sign-on"
            f"{every}); change them there, not here."
        )

    def can_produce(self, group: str) -> bool | None:
        """``False`` when no login can ever be in ``group`` (a rename-only mapping without
        it); ``True`` when a rename or LTI context yields it; ``None`` when it depends on the
        claims (patterns or kept values); always ``True`` for hub-owned groups."""
        if self.mapping is None:
            return None if self.kind == "authenticator" else True
        targets = set(self.mapping.rename.values())
        for g in (self.context_groups or {}).values():
            targets |= {g, g + self.staff_suffix}
        if group in targets:
            return True
        if self.mapping.patterns or self.mapping.keep_unmapped:
            return None
        return False


def groups_owner(config: Config) -> GroupsOwner:
    """Who owns the groups under ``config`` (a hub configuration); :class:`traitlets.TraitError`
    for a bad authenticator setting. Another authenticator (or a gpulab one whose package this
    process lacks) is ``"authenticator"`` when ``c.Authenticator.manage_groups`` is on."""
    try:
        auth = authenticator(config)
    except ImportError:
        auth = None
    if auth is None:
        section = config.Authenticator if "Authenticator" in config else {}
        managed = bool(section.get("manage_groups", False)) if hasattr(section, "get") else False
        age = section.get("auth_refresh_age", 300) if hasattr(section, "get") else 300
        return GroupsOwner("authenticator", int(age or 0)) if managed else GroupsOwner("hub")
    if not auth.manage_groups:
        return GroupsOwner("hub")
    age = int(auth.auth_refresh_age or 0)
    if hasattr(auth, "context_groups"):
        return GroupsOwner(
            "lti", age, auth.group_mapping, dict(auth.context_groups), auth.staff_suffix
        )
    return GroupsOwner("oidc", age, auth.group_mapping)

"""Which gpulab scopes the hub's roles grant a user: what the service asks for at a page login.

JupyterHub issues a page's OAuth token with the scopes the service requests, cut down to those the
user holds, and logs a warning for every requested scope it had to drop. Requesting every gpulab
scope from everyone therefore warned at every login of everyone but gpulab admins. The service
instead requests exactly the gpulab scopes the config's roles grant the user: it reads the same
``jupyterhub_config.py`` as the hub (``c.JupyterHub.load_roles``, ``extra_user_scopes``).

This is only what the service *asks* for. What a request may do is decided from the scopes its
token carries (the hub's answer), never from this estimate: a wrong estimate costs a warning or a
missing scope, never a permission.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ...hub.hubconfig import ADMIN_SCOPE, READ_SCOPE, config_value

#: The scopes the service's OAuth client may request (``oauth_client_allowed_scopes``).
GPULAB_SCOPES = frozenset({ADMIN_SCOPE, READ_SCOPE})


def _normal(name: str) -> str:
    # JupyterHub's default Authenticator.normalize_username, applied to role members at start
    return name.lower()


@dataclass(frozen=True)
class RoleGrants:
    """The gpulab scopes of the config's roles, by who holds them.

    ``everyone``: granted to every user (the ``user`` role, ``extra_user_scopes``);
    ``users`` / ``groups``: by user name and group name; ``all_unknown``: the authenticator
    manages roles (``c.Authenticator.manage_roles``), so the config does not say who holds
    what, and every gpulab scope is requested from everyone (JupyterHub then warns about those a
    user lacks)."""

    everyone: frozenset[str] = frozenset()
    users: Mapping[str, frozenset[str]] = field(default_factory=dict)
    groups: Mapping[str, frozenset[str]] = field(default_factory=dict)
    all_unknown: bool = False

    @classmethod
    def from_config(cls, config) -> RoleGrants:
        """From a traitlets ``Config`` holding the hub's ``c.JupyterHub`` section."""
        hub = config.JupyterHub if "JupyterHub" in config else {}
        auth = config.Authenticator if "Authenticator" in config else {}
        roles = config_value(hub, "load_roles", [])
        everyone = set()
        if not any(r.get("name") == "user" and "scopes" in r for r in roles):
            # JupyterHub ignores extra_user_scopes where the config redefines the user role
            everyone |= set(config_value(hub, "extra_user_scopes", set())) & GPULAB_SCOPES
        users: dict[str, set[str]] = {}
        groups: dict[str, set[str]] = {}
        for role in roles:
            scopes = set(role.get("scopes", ())) & GPULAB_SCOPES
            if not scopes:
                continue
            if role.get("name") == "user":
                everyone |= scopes
            for name in role.get("users", ()):
                users.setdefault(_normal(name), set()).update(scopes)
            for name in role.get("groups", ()):
                groups.setdefault(name, set()).update(scopes)
        return cls(
            everyone=frozenset(everyone),
            users={k: frozenset(v) for k, v in users.items()},
            groups={k: frozenset(v) for k, v in groups.items()},
            all_unknown=bool(config_value(auth, "manage_roles", False)),
        )

    def for_user(self, name: str, groups: Iterable[str] = ()) -> frozenset[str]:
        """The gpulab scopes user ``name`` in ``groups`` holds through the config's roles."""
        if self.all_unknown:
            return GPULAB_SCOPES
        held = set(self.everyone) | self.users.get(_normal(name), frozenset())
        for g in groups:
            held |= self.groups.get(g, frozenset())
        return frozenset(held)

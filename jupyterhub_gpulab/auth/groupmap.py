"""From an identity provider's claims to JupyterHub groups: pure, no I/O.

Every gpulab rule (profiles, limits, budgets, courses) hangs on JupyterHub groups; on a campus they
come from the identity provider, which sends them in its own shape:

==============  =============================================  ===================================
provider        claim                                          what a value looks like
==============  =============================================  ===================================
Keycloak        ``groups`` (group-membership mapper)           ``"/students"`` (full path on)
Entra ID        ``groups`` in the ID token                     an object id ``"8f3e…-…"``; above
                                                               200 groups only an *overage
                                                               marker* (``_claim_names``,
                                                               ``hasgroups``)
Okta            ``groups`` (groups claim filter)               ``"students"``
Auth0           a namespaced claim ``"https://…/groups"``      ``"students"``
CILogon         ``isMemberOf``                                 ``"CO:COU:students:members:all"``
==============  =============================================  ===================================

A :class:`GroupMapping` turns one shape into group names, value by value:

1. ``rename`` looks the raw value up (an Entra object id, a full path), then the value with its
   first matching ``strip_prefixes`` entry removed (longest prefix first);
2. else the first of ``patterns`` (regex -> template, ``re.fullmatch`` on the stripped value,
   template in :meth:`re.Match.expand` syntax: ``\\1``, ``\\g<name>``) that matches;
3. else the stripped value itself when ``keep_unmapped``; else the value is dropped.

A mapped name that JupyterHub cannot carry in a URL (empty, over 255 characters, ``/``, control
characters) is dropped and reported in :attr:`MappedGroups.dropped`. The result is sorted and
unique and depends on the claims alone: the mapping keeps no state between users.

Claims that cannot be read raise :class:`ClaimError`, never a partial or empty answer that would
quietly give a user the wrong groups: an Entra ID **overage marker** (the groups are not in the
token), a claim that is not a list of strings (or one string), a path through a non-object.
A claim that is simply absent means "no groups" (Keycloak omits the claim for a user in none).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["ClaimError", "GroupMapping", "MappedGroups", "claim_value", "valid_group_name"]

#: more values than any sane token carries; a bigger list is treated as malformed
MAX_CLAIM_VALUES = 5000
_BAD_NAME = re.compile(r"[/\x00-\x1f\x7f]")


class ClaimError(Exception):
    """The claims cannot be turned into groups; the login must fail with :attr:`message`.

    ``message`` is for the user (plain text, no claim values); ``log_message`` for the admin.
    ``reason`` is ``"group-overage"`` or ``"malformed-claim"``.
    """

    def __init__(self, reason: str, message: str, log_message: str):
        super().__init__(log_message)
        self.reason = reason
        self.message = message
        self.log_message = log_message


def valid_group_name(name: str) -> bool:
    """Whether JupyterHub can hold ``name`` as a group and address it in its REST API."""
    return 0 < len(name) <= 255 and not _BAD_NAME.search(name) and name.strip() == name


def kind_of(value: object) -> str:
    """How a JSON value is named in messages: "a string", "an object", "a number" …"""
    return {dict: "an object", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
    )


def claim_value(claims: Mapping, path: str) -> object | None:
    """The value at ``path`` in ``claims``: the literal key first (Auth0's namespaced claims
    hold dots, ``"https://example.edu/groups"``), else the dotted path (``realm_access.roles``).
    ``None`` when absent; :class:`ClaimError` when the path runs through a non-object."""
    if path in claims:
        return claims[path]
    node: object = claims
    for part in path.split("."):
        if node is None:
            return None
        if not isinstance(node, Mapping):
            raise ClaimError(
                "malformed-claim",
                _malformed_message(path),
                f"claim path {path!r}: {kind_of(node)} where an object was expected at {part!r}",
            )
        node = node.get(part)
    return node


def _malformed_message(path: str) -> str:
    return (
        f"Your identity provider sent the group claim '{path}' in a form this hub cannot read, "
        "so it cannot tell which groups you are in. Please tell the hub's administrators; "
        "they can see the details in the hub's log."
    )


def overage_error(path: str) -> ClaimError:
    return ClaimError(
        "group-overage",
        "Your account is in more groups than your identity provider puts in a sign-in token "
        "(Entra ID 'group overage'), so this hub cannot tell which of your groups apply. "
        "Please tell the hub's administrators: they can limit the token to the groups "
        "assigned to this application.",
        f"group overage marker in the claims (no {path!r} values sent): configure the app "
        "registration to emit 'Groups assigned to the application' or app roles",
    )


def _has_overage_marker(claims: Mapping, path: str) -> bool:
    names = claims.get("_claim_names")
    top = path.split(".")[0]
    if isinstance(names, Mapping) and ({"groups", top, path} & set(names)):
        return True
    return claims.get("hasgroups") in (True, "true", "True")


@dataclass(frozen=True)
class MappedGroups:
    """The answer: ``groups`` (sorted, unique), what was ``dropped`` (value, why), and the
    ``raw`` values read from the claim, for ``gpulab check-auth``."""

    groups: list[str]
    raw: list[str] = field(default_factory=list)
    dropped: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class GroupMapping:
    """How one provider's claim becomes JupyterHub groups (see the module docstring).

    ``claim``: a key or dotted path (``"groups"``, ``"realm_access.roles"``);
    ``strip_prefixes``: e.g. ``("/",)`` for Keycloak's full paths;
    ``rename``: raw or stripped value -> group (``{"8f3e…": "students"}``);
    ``patterns``: ``((regex, template), …)``, compiled on construction (:class:`re.error`
    for a bad one); ``keep_unmapped``: keep stripped values that nothing mapped.
    """

    claim: str = "groups"
    strip_prefixes: tuple[str, ...] = ()
    rename: Mapping[str, str] = field(default_factory=dict)
    patterns: tuple[tuple[str, str], ...] = ()
    keep_unmapped: bool = False

    def __post_init__(self):
        object.__setattr__(
            self, "strip_prefixes", tuple(sorted(self.strip_prefixes, key=len)[::-1])
        )
        object.__setattr__(self, "_compiled", tuple((re.compile(r), t) for r, t in self.patterns))

    def problems(self) -> list[str]:
        """What is wrong with this mapping as configured (for ``gpulab check-config``)."""
        out = []
        if not self.claim or not isinstance(self.claim, str):
            out.append("the group claim must be a non-empty key or dotted path")
        for src, dst in self.rename.items():
            if not isinstance(src, str) or not isinstance(dst, str) or not valid_group_name(dst):
                out.append(f"rename {src!r} -> {dst!r}: the target is not a valid group name")
        for p in self.strip_prefixes:
            if not p:
                out.append("strip_prefixes holds an empty prefix (it would strip nothing)")
        for (regex, template), (compiled, _) in zip(self.patterns, self._compiled):
            if not isinstance(template, str):
                out.append(f"pattern {regex!r}: the template must be a string")
                continue
            try:
                _check_template(compiled, template)
            except re.error as e:
                out.append(f"pattern {regex!r} -> {template!r}: {e}")
        if not (self.rename or self.patterns or self.keep_unmapped):
            out.append(
                "no rename, no patterns and keep_unmapped is off: every group would be dropped"
            )
        return out

    def _strip(self, value: str) -> str:
        for p in self.strip_prefixes:
            if p and value.startswith(p):
                return value[len(p) :]
        return value

    def map_value(self, value: str) -> str | None:
        """One raw claim value -> its group name, or ``None`` when it is dropped."""
        if value in self.rename:
            return self.rename[value]
        stripped = self._strip(value)
        if stripped in self.rename:
            return self.rename[stripped]
        for compiled, template in self._compiled:
            m = compiled.fullmatch(stripped)
            if m:
                return m.expand(template)
        return stripped if self.keep_unmapped else None

    def values(self, claims: Mapping) -> list[str]:
        """The raw values of the group claim; :class:`ClaimError` for an overage marker or a
        malformed claim; ``[]`` when the claim is absent."""
        if not isinstance(claims, Mapping):
            raise ClaimError(
                "malformed-claim", _malformed_message(self.claim), f"claims are {kind_of(claims)}"
            )
        value = claim_value(claims, self.claim)
        if value is None:
            if _has_overage_marker(claims, self.claim):
                raise overage_error(self.claim)
            return []
        if _has_overage_marker(claims, self.claim):
            raise overage_error(self.claim)  # never a partial list beside a marker
        if isinstance(value, str):
            return [value]
        if not isinstance(value, (list, tuple)):
            raise ClaimError(
                "malformed-claim",
                _malformed_message(self.claim),
                f"claim {self.claim!r} is {kind_of(value)}, expected a list of strings",
            )
        if len(value) > MAX_CLAIM_VALUES:
            raise ClaimError(
                "malformed-claim",
                _malformed_message(self.claim),
                f"claim {self.claim!r} holds {len(value)} values (more than {MAX_CLAIM_VALUES})",
            )
        bad = [v for v in value if not isinstance(v, str)]
        if bad:
            raise ClaimError(
                "malformed-claim",
                _malformed_message(self.claim),
                f"claim {self.claim!r} holds {kind_of(bad[0])} among its values, expected strings",
            )
        return list(value)

    def map(self, claims: Mapping) -> MappedGroups:
        """The groups ``claims`` map to, with what was dropped and why."""
        raw = self.values(claims)
        groups: set[str] = set()
        dropped: list[tuple[str, str]] = []
        for v in raw:
            g = self.map_value(v)
            if g is None:
                dropped.append((v, "not mapped"))
            elif not valid_group_name(g):
                dropped.append((v, f"maps to {g!r}, not a valid group name"))
            else:
                groups.add(g)
        return MappedGroups(sorted(groups), raw, dropped)

    def groups(self, claims: Mapping) -> list[str]:
        """Shortcut: ``self.map(claims).groups``."""
        return self.map(claims).groups


def _check_template(compiled: re.Pattern, template: str) -> None:
    """Raise :class:`re.error` when ``template`` names a group that
    ``compiled`` does not have (``\\2`` for a one-group regex, ``\\g<x>`` without ``(?P<x>…)``)."""
    for m in re.finditer(r"\\g<([^>]*)>|\\(\d+)", template):
        name, num = m.group(1), m.group(2)
        ref = num if num is not None else name
        if ref.isdigit():
            if int(ref) > compiled.groups:
                raise re.error(
                    f"the template refers to group {ref}; the regex has {compiled.groups}"
                )
        elif ref not in compiled.groupindex:
            raise re.error(f"the template refers to group {ref!r}, which the regex does not name")

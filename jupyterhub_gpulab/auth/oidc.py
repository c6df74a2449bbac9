"""Campus single sign-on: oauthenticator's ``GenericOAuthenticator`` with gpulab's group mapping.

Runs in the hub (``c.JupyterHub.authenticator_class = "gpulab-oidc"``). oauthenticator does the
OAuth2/OIDC redirect flow, the token exchange and the userinfo request; this class only turns the
userinfo claims (``auth_state["oauth_user"]``) into JupyterHub groups with a
:class:`~.groupmap.GroupMapping` built from the ``group_*`` settings, and makes the cases where
that cannot be done a clear login error instead of a 500 or a user with the wrong groups:

- ``manage_groups`` is on: JupyterHub sets each user's groups from the mapping at every login and
  every refresh, and refuses edits of group membership through its REST API (so gpulab never edits
  groups the provider owns).
- Groups are re-read from the provider's userinfo endpoint with the stored access token (refreshed
  with the refresh token when it expired) every ``c.Authenticator.auth_refresh_age`` seconds
  (JupyterHub's default 300) on the user's next request, without a new login. Needs
  ``c.Authenticator.enable_auth_state = True`` and ``JUPYTERHUB_CRYPT_KEY`` (the hub refuses to
  start without the key); :func:`~.presets.configure_sso` sets the first.
- A :class:`~.groupmap.ClaimError` (group overage, malformed claim) at login is an HTTP 403 page
  with the reason for the user (:class:`LoginRefused`); at a refresh it makes the user log in
  again (so they see that page) and their old groups are not renewed.
"""

from __future__ import annotations

from collections.abc import Mapping

from oauthenticator.generic import GenericOAuthenticator
from tornado import web
from traitlets import Bool, Dict, HasTraits, List, Unicode, default, observe

from .groupmap import ClaimError, GroupMapping, kind_of

__all__ = ["GPULabOAuthenticator", "LoginRefused", "MappingTraits"]


class LoginRefused(web.HTTPError):
    """An HTTP 403 whose ``jupyterhub_message`` is the plain-text reason JupyterHub's error page
    shows; ``reason`` is the :class:`ClaimError`'s (``group-overage``, ``malformed-claim``)."""

    def __init__(self, error: ClaimError):
        # reason: the page's heading ("403 : Login refused"); the detail is for the hub's log
        super().__init__(403, "login refused: %s", error.log_message, reason="Login refused")
        self.jupyterhub_message = error.message
        self.claim_reason = error.reason


class MappingTraits(HasTraits):
    """The ``group_*`` settings, shared by the OIDC and LTI authenticators (a traitlets mixin)."""

    group_claim = Unicode(
        "groups",
        config=True,
        help="""Claim holding the user's groups: a key of the userinfo claims, or a dotted path.

        Tried as a literal key first (Auth0's namespaced ``"https://example.edu/groups"``), then
        as a path (``"realm_access.roles"``). Absent = no groups.
        Example: ``c.GPULabOAuthenticator.group_claim = "groups"``
        """,
    )
    group_strip_prefixes = List(
        Unicode(),
        config=True,
        help="""Prefixes removed from each value before mapping; the longest that matches.

        Keycloak with "Full group path" on sends ``/students``.
        Example: ``c.GPULabOAuthenticator.group_strip_prefixes = ["/"]``
        """,
    )
    group_rename = Dict(
        value_trait=Unicode(),
        config=True,
        help="""Raw or stripped value -> JupyterHub group, looked up first.

        For Entra ID object ids and names that differ between the provider and gpulab.
        Example: ``c.GPULabOAuthenticator.group_rename = {"8f3e0c1a-…": "students"}``
        """,
    )
    group_patterns = Dict(
        value_trait=Unicode(),
        config=True,
        help=r"""Regex -> template, tried in order on values no rename matched (full match).

        Templates use Python's ``re`` expansion (``\1``, ``\g<name>``).
        Example: ``c.GPULabOAuthenticator.group_patterns = {r"CO:COU:([^:]+):members:all": r"\1"}``
        """,
    )
    group_keep_unmapped = Bool(
        False,
        config=True,
        help="""Keep (stripped) values that no rename or pattern mapped; else drop them.

        Off by default: a campus directory has thousands of groups gpulab has no rule for.
        Example: ``c.GPULabOAuthenticator.group_keep_unmapped = True``
        """,
    )

    _mapping_cache: GroupMapping | None = None

    @observe(
        "group_claim",
        "group_strip_prefixes",
        "group_rename",
        "group_patterns",
        "group_keep_unmapped",
    )
    def _mapping_changed(self, change):
        self._mapping_cache = None

    @property
    def group_mapping(self) -> GroupMapping:
        """The :class:`GroupMapping` these settings describe (:class:`re.error` for a bad regex)."""
        if self._mapping_cache is None:
            self._mapping_cache = GroupMapping(
                claim=self.group_claim,
                strip_prefixes=tuple(self.group_strip_prefixes),
                rename=dict(self.group_rename),
                patterns=tuple(self.group_patterns.items()),
                keep_unmapped=self.group_keep_unmapped,
            )
        return self._mapping_cache

    def mapping_problems(self) -> list[str]:
        """Every problem of the ``group_*`` settings, each naming its ``c.<Class>.<trait>``."""
        cls = type(self).__name__
        try:
            mapping = self.group_mapping
        except Exception as e:  # re.error from a pattern
            return [f"c.{cls}.group_patterns: {e}"]
        return [f"c.{cls}.group_*: {p}" for p in mapping.problems()]

    def claims_in(self, auth_state: dict) -> dict:
        """The claims the mapping reads, out of a user's stored ``auth_state`` (LTI: the
        launch's id_token itself)."""
        return auth_state

    def map_claims(self, username: str, claims) -> list[str]:
        """Groups for ``claims``; logs the mapping (INFO: how many groups; DEBUG: their names,
        since a campus account may be in thousands); :class:`LoginRefused` when unreadable."""
        try:
            mapped = self.group_mapping.map(claims)
        except ClaimError as e:
            self.log.warning("login of %s refused (%s): %s", username, e.reason, e.log_message)
            raise LoginRefused(e) from None
        self.log.info(
            "%s: %d group(s) from claim %r (%d value(s), %d dropped)",
            username,
            len(mapped.groups),
            self.group_mapping.claim,
            len(mapped.raw),
            len(mapped.dropped),
        )
        self.log.debug("%s: groups %s", username, ", ".join(mapped.groups) or "(none)")
        return mapped.groups


class GPULabOAuthenticator(MappingTraits, GenericOAuthenticator):
    """``GenericOAuthenticator`` whose groups come from :class:`GroupMapping` (module docstring).

    Everything of ``GenericOAuthenticator`` applies (``client_id``, ``authorize_url``,
    ``allowed_groups``, ``admin_groups`` — which name *mapped* groups); ``manage_groups`` defaults
    to on. :func:`~.presets.configure_sso` fills it in for Keycloak, Entra ID, Okta, Auth0,
    CILogon.
    """

    @default("manage_groups")
    def _manage_groups_default(self):
        return True

    @default("enable_auth_state")
    def _enable_auth_state_default(self):
        return True

    def claims_in(self, auth_state: dict) -> dict:
        return auth_state.get(self.user_auth_state_key) or {}

    def username_from(self, claims) -> str:
        """The user name in ``claims`` (``username_claim``); :class:`ClaimError` when it is
        absent or not a name (a list, an object, empty, over 255 characters), where
        oauthenticator raises a ``ValueError`` (an HTTP 500 at the callback)."""
        claim = self.username_claim
        if callable(claim):
            value = claim(claims)
            claim = getattr(claim, "__name__", "username_claim")
        else:
            value = claims.get(claim) if isinstance(claims, Mapping) else None
        if isinstance(value, str) and value.strip() and len(value) <= 255:
            return value
        why = "absent" if value is None else f"{kind_of(value)}, not a user name"
        raise ClaimError(
            "malformed-claim",
            f"Your identity provider sent no usable user name (claim '{claim}'), so this hub "
            "cannot tell who you are. Please tell the hub's administrators; they can see the "
            "details in the hub's log.",
            f"username claim {claim!r} is {why} (c.GPULabOAuthenticator.username_claim; the "
            "scopes requested may not release it)",
        )

    def user_info_to_username(self, user_info):
        """oauthenticator's, with an unusable user name as a login error (:class:`LoginRefused`,
        403) rather than a 500."""
        try:
            return self.username_from(user_info)
        except ClaimError as e:
            self.log.warning("login refused (%s): %s", e.reason, e.log_message)
            raise LoginRefused(e) from None

    async def get_user_groups(self, auth_state: dict):
        """The mapped groups of the claims in ``auth_state`` (:class:`LoginRefused` if none can
        be read). Called by oauthenticator at login and at every refresh."""
        claims = (auth_state or {}).get(self.user_auth_state_key)
        name = self._username_of(claims)
        return set(self.map_claims(name, claims if claims is not None else {}))

    def _username_of(self, claims) -> str:
        try:
            return self.username_from(claims)
        except ClaimError:
            return "(unknown user)"

    def explain(self, claims) -> dict:
        """For ``gpulab check-auth``: ``{"username", "groups", "dropped", "admin", "allowed"}``
        of a login with these userinfo ``claims`` (:class:`ClaimError` as the login would)."""
        username = self.normalize_username(self.username_from(claims))
        mapped = self.group_mapping.map(claims)
        groups = set(mapped.groups)
        admin = username in self.admin_users or bool(groups & set(self.admin_groups))
        allowed = (
            self.allow_all
            or admin
            or username in self.allowed_users
            or bool(groups & set(self.allowed_groups))
        )
        return {
            "username": username,
            "groups": mapped.groups,
            "dropped": [list(d) for d in mapped.dropped],
            "admin": admin,
            "allowed": allowed,
        }

    async def refresh_user(self, user, handler=None, **kwargs):
        """oauthenticator's refresh (userinfo again, refresh token when expired), re-mapping the
        groups; claims that no longer map make the user log in again (``False``).

        With ``userdata_from_id_token`` (Entra ID) the claims are the login's ID token, which
        never changes: the refresh token buys a new one (:meth:`_refresh_id_token`)."""
        try:
            if self.userdata_from_id_token and self.enable_auth_state:
                return await self._refresh_id_token(user, handler)
            return await super().refresh_user(user, handler, **kwargs)
        except LoginRefused:
            return False

    async def _refresh_id_token(self, user, handler):
        """A fresh ID token through the refresh-token grant, and the auth model it gives;
        ``True`` (keep the login's groups) without a refresh token; ``False`` (log in again)
        when the provider refuses it."""
        auth_state = await user.get_auth_state()
        if not auth_state:
            return False
        refresh_token = auth_state.get("refresh_token")
        if not refresh_token:
            self.log.debug("%s: no refresh token; groups stay as at login", user.name)
            return True
        params = self.build_refresh_token_request_params(refresh_token)
        try:
            token_info = await self.get_token_info(handler, params)
        except Exception as e:
            self.log.info("%s: refresh token refused (%s); login required", user.name, e)
            return False
        if not token_info.get("refresh_token"):
            token_info["refresh_token"] = refresh_token
        return await self._token_to_auth_model(token_info)

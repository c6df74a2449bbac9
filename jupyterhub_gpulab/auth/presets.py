"""Ready-made settings for the campus identity providers gpulab is tested against.

One call in ``jupyterhub_config.py`` (runs in the hub)::

    from jupyterhub_gpulab.auth.presets import configure_sso
    configure_sso(c, "keycloak", issuer="https://sso.example.edu/realms/campus",
                  client_id="jupyterhub", client_secret=os.environ["OIDC_SECRET"],
                  callback_url="https://hub.example.edu/hub/oauth_callback",
                  admin_groups=["gpu-admins"], refresh_age="5m")

sets ``c.JupyterHub.authenticator_class`` to :class:`~.oidc.GPULabOAuthenticator` and its URLs,
scopes, username claim and group mapping for that provider's claim shape. Every keyword that is
not ``None`` overrides the preset (``rename=``, ``patterns=``, ``keep_unmapped=``, ``claim=``,
``strip_prefixes=``, ``username_claim=``, ``scope=``); anything else can be set on
``c.GPULabOAuthenticator`` after the call.

=========  ===========================================  =======================================
preset     endpoints from                               groups
=========  ===========================================  =======================================
keycloak   ``issuer`` = ``…/realms/<realm>``            ``groups``, ``/`` stripped, all kept
entra      ``tenant`` (id or domain); ``authority``     ``groups`` (object ids) from the ID
           (default ``https://login.microsoftonline.    token; only ``rename`` ones kept;
           com``; a national cloud's, e.g. ``…us``)     overage marker -> login error
okta       ``issuer`` = ``https://<org>/oauth2/default``  ``groups`` (scope ``groups``), kept
auth0      ``issuer`` = ``https://<tenant>.auth0.com``  ``claim=`` a namespaced claim, kept
cilogon    ``issuer`` (default ``https://cilogon.org``;  ``isMemberOf``; COmanage
           ``https://test.cilogon.org`` to try)          ``CO:COU:<name>:members:all`` -> name
oidc       ``issuer`` with ``/auth``, ``/token``,       ``groups``, kept (node's
           ``/me`` (node ``oidc-provider``, the tests)  ``oidc-provider``, the demo and tests)
=========  ===========================================  =======================================
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..units import parse_seconds

__all__ = ["PRESETS", "Preset", "configure_sso"]

AUTHENTICATOR = "jupyterhub_gpulab.auth.oidc.GPULabOAuthenticator"


@dataclass(frozen=True)
class Preset:
    """One provider's endpoints (``{issuer}``/``{tenant}``/``{authority}`` templates, filled
    from ``defaults`` where not given) and claim shape."""

    authorize: str
    token: str
    userinfo: str | None
    scope: tuple[str, ...] = ("openid", "profile", "email")
    username_claim: str = "preferred_username"
    claim: str = "groups"
    strip_prefixes: tuple[str, ...] = ()
    patterns: dict[str, str] = field(default_factory=dict)
    keep_unmapped: bool = True
    defaults: dict[str, str] = field(default_factory=dict)


PRESETS: dict[str, Preset] = {
    "keycloak": Preset(
        "{issuer}/protocol/openid-connect/auth",
        "{issuer}/protocol/openid-connect/token",
        "{issuer}/protocol/openid-connect/userinfo",
        strip_prefixes=("/",),
    ),
    "entra": Preset(
        "{authority}/{tenant}/oauth2/v2.0/authorize",
        "{authority}/{tenant}/oauth2/v2.0/token",
        None,  # groups are in the ID token, not in Graph's userinfo
        scope=("openid", "profile", "email", "offline_access"),
        keep_unmapped=False,
        defaults={"authority": "https://login.microsoftonline.com"},
    ),
    "okta": Preset(
        "{issuer}/v1/authorize",
        "{issuer}/v1/token",
        "{issuer}/v1/userinfo",
        scope=("openid", "profile", "email", "groups", "offline_access"),
    ),
    "auth0": Preset(
        "{issuer}/authorize",
        "{issuer}/oauth/token",
        "{issuer}/userinfo",
        scope=("openid", "profile", "email", "offline_access"),
        username_claim="nickname",
    ),
    "cilogon": Preset(
        "{issuer}/authorize",
        "{issuer}/oauth2/token",
        "{issuer}/oauth2/userinfo",
        scope=("openid", "email", "profile", "org.cilogon.userinfo"),
        username_claim="eppn",
        claim="isMemberOf",
        patterns={r"CO:COU:([^:]+):members:(?:all|active)": r"\1"},
        keep_unmapped=False,
        defaults={"issuer": "https://cilogon.org"},
    ),
    "oidc": Preset(
        "{issuer}/auth",
        "{issuer}/token",
        "{issuer}/me",
        scope=("openid", "profile", "email", "groups", "offline_access"),
    ),
}


def configure_sso(
    c,
    provider: str,
    *,
    client_id: str,
    client_secret: str,
    issuer: str | None = None,
    tenant: str | None = None,
    authority: str | None = None,
    callback_url: str | None = None,
    admin_groups=(),
    allowed_groups=(),
    refresh_age: str | float = "5m",
    claim: str | None = None,
    strip_prefixes=None,
    rename: dict[str, str] | None = None,
    patterns: dict[str, str] | None = None,
    keep_unmapped: bool | None = None,
    username_claim: str | None = None,
    scope=None,
) -> None:
    """Set ``c`` (the hub's config) up for ``provider`` (a key of :data:`PRESETS`). Deprecated in
    ``jupyterhub_config.py``: ``jupyterhub_gpulab.configure(c, …, sso={"provider": …, …})``.

    ``refresh_age``: seconds or ``"5m"``, how old a user's groups may get before the next
    request re-reads them from the provider (``c.Authenticator.auth_refresh_age``).
    ``allowed_groups`` empty = every user the provider authenticates may log in
    (``allow_all``); else only members of those (mapped) groups. ``issuer``/``tenant``/
    ``authority``: the URL parts the preset's endpoints are made of (table above).
    Raises :class:`ValueError` for an unknown provider or a missing ``issuer``/``tenant``.
    """
    if provider not in PRESETS:
        raise ValueError(f"unknown SSO provider {provider!r}; use one of {', '.join(PRESETS)}")
    p = PRESETS[provider]
    given = {
        k: (v or p.defaults.get(k, "")).rstrip("/")
        for k, v in (("issuer", issuer), ("tenant", tenant), ("authority", authority))
    }
    for k in given:
        if f"{{{k}}}" in p.authorize and not given[k]:
            raise ValueError(f"configure_sso({provider!r}) needs {k}=")
    a = c.GPULabOAuthenticator
    c.JupyterHub.authenticator_class = AUTHENTICATOR
    a.client_id, a.client_secret = client_id, client_secret
    a.authorize_url = p.authorize.format(**given)
    a.token_url = p.token.format(**given)
    if p.userinfo:
        a.userdata_url = p.userinfo.format(**given)
    else:
        a.userdata_from_id_token = True
    if callback_url:
        a.oauth_callback_url = callback_url
    a.scope = list(scope if scope is not None else p.scope)
    a.username_claim = username_claim or p.username_claim
    a.login_service = {"oidc": "campus SSO"}.get(provider, provider.capitalize())
    a.manage_groups = True
    c.Authenticator.manage_groups = True  # what code reading c.Authenticator looks at
    a.enable_auth_state = True
    a.group_claim = claim or p.claim
    a.group_strip_prefixes = list(
        strip_prefixes if strip_prefixes is not None else p.strip_prefixes
    )
    a.group_rename = dict(rename or {})
    a.group_patterns = dict(patterns if patterns is not None else p.patterns)
    a.group_keep_unmapped = p.keep_unmapped if keep_unmapped is None else keep_unmapped
    if admin_groups:
        a.admin_groups = set(admin_groups)
    a.allowed_groups = set(allowed_groups)
    a.allow_all = not allowed_groups
    c.Authenticator.auth_refresh_age = parse_seconds(refresh_age, "refresh_age")

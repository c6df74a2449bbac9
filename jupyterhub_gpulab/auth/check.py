"""What ``gpulab check-config`` and ``gpulab check-auth`` ask of the authenticator settings.

Runs in the ``gpulab`` command. :func:`auth_errors` lists every problem of the configured gpulab
authenticator (its traits, its group mapping); :func:`explain_claims` answers an admin's "what
would this login give?": from a token's claims (a JSON object, or a JWT whose payload is read
*without* verifying its signature — for looking only) to the username, the mapped groups (and
what was dropped, and why), admin and allowed status, the group policies that apply, the profiles
the user may pick and the GPU-hour budget rule.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from traitlets import TraitError
from traitlets.config import Config

from ..lab.config import GPULab, Lab
from ..lab.policy import PolicyContext
from ..lab.profiles import entitled_in
from .configured import authenticator
from .groupmap import ClaimError
from .groupsowner import groups_owner

__all__ = [
    "auth_errors",
    "auth_warnings",
    "authenticator",
    "claims_from_hub",
    "explain_claims",
    "read_claims",
]


def auth_errors(config: Config) -> list[str]:
    """Every problem of the configured gpulab authenticator's settings (``[]`` without one)."""
    try:
        auth = authenticator(config)
    except TraitError as e:
        return [f"authenticator: {e}"]
    except ImportError as e:
        return [f"c.JupyterHub.authenticator_class: {e} (pip install the missing package)"]
    if auth is None:
        return []
    errors = auth.mapping_problems()
    if auth.manage_groups and "JupyterHub" in config and config.JupyterHub.get("load_groups"):
        errors.append(
            "c.JupyterHub.load_groups: the authenticator manages groups (manage_groups), so "
            "JupyterHub refuses to start with load_groups; remove it (groups come from the "
            "identity provider)"
        )
    return errors


def auth_warnings(config: Config, lab: Lab) -> list[str]:
    """Group policies and profiles naming a group that no login can be in under the
    configured mapping (e.g. an Entra ID rename that lacks it); SSO without the
    ``JUPYTERHUB_CRYPT_KEY`` the hub needs to start."""
    try:
        owner = groups_owner(config)
    except (TraitError, ImportError):
        return []  # reported by auth_errors
    out = []
    if owner.kind == "oidc" and not os.environ.get("JUPYTERHUB_CRYPT_KEY"):
        out.append(
            "JUPYTERHUB_CRYPT_KEY is not set here: the hub stores the provider's tokens "
            "(to refresh groups) encrypted and exits at start without it in its environment "
            "(openssl rand -hex 32)"
        )
    named = {g: f"group policy '{g}'" for g in lab.policies}
    for p in lab.profiles:
        for g in p.groups or ():
            named.setdefault(g, f"profile '{p.slug}' (groups)")
    return out + [
        f"{where} names group '{g}', which the authenticator's group mapping never produces "
        "(add it to group_rename, group_patterns or context_groups)"
        for g, where in sorted(named.items())
        if owner.can_produce(g) is False
    ]


def claims_from_hub(auth, api_url: str, token: str, user: str) -> dict:
    """The claims of ``user``'s last login, from the hub's stored ``auth_state`` (``GET
    <api_url>/users/<user>`` with a token holding ``admin:auth_state``); :class:`ValueError`
    saying what is missing otherwise."""
    import requests

    url = f"{api_url.rstrip('/')}/users/{requests.utils.quote(user, safe='')}"
    try:
        r = requests.get(url, headers={"Authorization": f"token {token}"}, timeout=10)
    except requests.RequestException as e:
        raise ValueError(f"the hub at {api_url} did not answer: {e}") from None
    if r.status_code in (401, 403):
        raise ValueError(f"the hub refused the token ({r.status_code}); it needs admin:auth_state")
    if r.status_code == 404:
        raise ValueError(f"the hub has no user {user!r} (or the token may not see them)")
    r.raise_for_status()
    state = r.json().get("auth_state")
    if not state:
        raise ValueError(
            f"the hub returned no auth_state for {user!r}: the token needs admin:auth_state, "
            "c.Authenticator.enable_auth_state must be on, and the user must have logged in"
        )
    return auth.claims_in(state)


def read_claims(text: str) -> dict:
    """Claims from a JSON object or a JWT (payload only, signature NOT verified);
    :class:`ValueError` naming the problem otherwise."""
    text = text.strip()
    if text.count(".") == 2 and not text.startswith("{"):
        import jwt

        try:
            return jwt.decode(text, options={"verify_signature": False})
        except jwt.PyJWTError as e:
            raise ValueError(f"not a readable JWT: {e}") from None
    try:
        claims = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(claims, Mapping):
        raise ValueError("the claims must be a JSON object")
    return dict(claims)


def explain_claims(auth, claims: Mapping, lab: Lab | None) -> dict:
    """What a login with ``claims`` gives under ``auth`` (a gpulab authenticator) and ``lab``.

    Returns ``{"username", "groups", "dropped": [[value, why]], "admin", "allowed", "error",
    "policies": [{"group", "max_slices_per_user", "gpu_hours", "period", …}], "profiles":
    [slug], "budget"}``; ``error`` is the login error the user would see (then no groups)."""
    out: dict = {"error": None, "groups": [], "dropped": [], "policies": [], "profiles": []}
    try:
        who = auth.explain(claims)
    except ClaimError as e:
        out.update(error=e.message, reason=e.reason, detail=e.log_message)
        return out
    out.update(who)
    if lab is not None:
        ctx = PolicyContext.for_user(out["groups"], bool(out["admin"]), lab)
        out["policies"] = [
            {
                "group": p.group,
                "profiles": list(p.profiles) if p.profiles is not None else None,
                "max_slices_per_user": p.max_slices_per_user,
                "gpu_hours": p.gpu_hours,
                "period": p.period if p.gpu_hours is not None else None,
            }
            for p in ctx.policies
        ]
        out["profiles"] = [p.slug for p in entitled_in(lab.profiles, ctx)]
        hours = [p for p in ctx.policies if p.gpu_hours is not None]
        if ctx.policies and len(hours) == len(ctx.policies):
            best = max(hours, key=lambda p: p.gpu_hours)
            out["budget"] = f"{best.gpu_hours:g} GPU-hours per {best.period} ({best.group})"
        else:
            out["budget"] = None
        out["user_limit"] = ctx.user_limit
    return out


def format_report(r: dict) -> str:
    """The human form of :func:`explain_claims`' answer."""
    if r["error"]:
        return f"login refused ({r['reason']}): {r['error']}\n  log: {r['detail']}"
    lines = [
        f"username: {r['username']}",
        f"groups:   {', '.join(r['groups']) or '(none)'}",
    ]
    lines += [f"  dropped {v!r}: {why}" for v, why in r["dropped"]]
    lines.append(f"admin:    {'yes' if r['admin'] else 'no'}")
    lines.append(f"allowed:  {'yes' if r['allowed'] else 'NO (not in allowed_groups/users)'}")
    for extra in ("course", "lti_roles"):
        if r.get(extra):
            lines.append(f"{extra}: {r[extra]}")
    if "user_limit" in r:
        pols = ", ".join(p["group"] for p in r["policies"]) or "(none: no limits)"
        lines.append(f"policies: {pols}")
        lim = r["user_limit"]
        lines.append(f"slices at once: {'unlimited' if lim is None else lim}")
        lines.append(f"budget:   {r['budget'] or 'none'}")
        lines.append(f"profiles: {', '.join(r['profiles']) or '(none)'}")
    return "\n".join(lines)


def check_auth_command(args, config: Config) -> int:
    """``gpulab check-auth`` (``args``: ``claims``, ``hub_user``, ``hub_url``, ``json``) under
    ``config``; prints the report; returns the exit status (0 allowed, 1 refused, 2 usage)."""
    auth = authenticator(config)
    if auth is None:
        print(
            "gpulab: c.JupyterHub.authenticator_class is not a gpulab authenticator "
            "(gpulab-oidc, gpulab-lti13); there is no group mapping to check",
            file=sys.stderr,
        )
        return 2
    if (args.claims is None) == (args.hub_user is None):
        print("gpulab: check-auth takes CLAIMS or --hub-user NAME (one of them)", file=sys.stderr)
        return 2
    try:
        if args.hub_user is not None:
            token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
            if not token:
                raise ValueError("--hub-user needs JUPYTERHUB_API_TOKEN (with admin:auth_state)")
            claims = claims_from_hub(auth, args.hub_url, token, args.hub_user)
        else:
            text = sys.stdin.read() if args.claims == "-" else None
            if text is None:
                path = Path(args.claims)
                text = path.read_text() if path.is_file() else args.claims
            claims = read_claims(text)
    except ValueError as e:
        print(f"gpulab: claims: {e}", file=sys.stderr)
        return 2
    lab = GPULab(config=config).load()
    report = explain_claims(auth, claims, lab)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 1 if report["error"] or not report["allowed"] else 0

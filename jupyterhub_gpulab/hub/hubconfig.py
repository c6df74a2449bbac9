"""Declare the gpulab service in a JupyterHub config: one call, ``configure_service(c, ...)``.

What it adds (existing ``services``, ``load_roles`` and scopes of ``c`` are kept)::

    c.JupyterHub.services        += the managed service "gpulab" (command, url, OAuth settings)
    c.JupyterHub.custom_scopes   += custom:gpulab:admin (implies custom:gpulab:read),
                                    custom:gpulab:read (implies custom:gpulab:metrics),
                                    custom:gpulab:metrics (the service's /metrics)
    c.JupyterHub.load_roles      += gpulab-admin  (custom:gpulab:admin) for ``admin_groups`` and
                                    ``admin_users`` (default: c.Authenticator.admin_users)
                                    gpulab-reader (custom:gpulab:read)  for ``reader_groups``
                                    gpulab-service (the hub scopes the service itself needs)
    every user (the ``user`` role)  += access:services!service=gpulab, so the service appears in
                                    the hub's "Services" menu on every hub page, home included,
                                    and each user may open their own page there.
    c.JupyterHub.template_vars["announcement_home"]
                                 = the culler's warnings to the user on the hub's home page
                                    (after any announcement the config already set)

The service decides every permission from the scopes a request's token carries, never from the
owner's admin flag: a hub admin's token limited to ``access:services!service=gpulab`` may only
open its owner's user page. JupyterHub admins get ``custom:gpulab:admin`` through the
``gpulab-admin`` role (JupyterHub refuses any change to its own ``admin`` role).

This module imports nothing heavy: it runs inside ``jupyterhub_config.py``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

#: The environment naming the Docker engine (docker-py's ``kwargs_from_env``): the service asks
#: the engine the hub's spawner asks.
ENGINE_ENV = ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")

ADMIN_SCOPE = "custom:gpulab:admin"
READ_SCOPE = "custom:gpulab:read"
METRICS_SCOPE = "custom:gpulab:metrics"

CUSTOM_SCOPES = {
    ADMIN_SCOPE: {
        "description": "Steer GPU allocation: drain devices, release allocations, stop servers, "
        "re-read the inventory.",
        "subscopes": [READ_SCOPE],
    },
    READ_SCOPE: {
        "description": "See every GPU, slice, allocation, group usage and refusal.",
        "subscopes": [METRICS_SCOPE],
    },
    METRICS_SCOPE: {
        "description": "Scrape the gpulab service's Prometheus metrics (counts, no user names).",
    },
}

#: Hub API scopes the service's own token needs: list users and their servers with last
#: activity and groups (admin page, user page), stop servers (admin action), read groups.
SERVICE_SCOPES = [
    "list:users",
    "read:users:name",
    "read:users:groups",
    "read:users:activity",
    "read:servers",
    "admin:servers",
    "list:groups",
    "read:groups",
]


def config_value(section, key: str, empty):
    """``section[key]`` (``empty`` when unset), also where the config file extended it in place:
    ``c.JupyterHub.load_roles.append(...)`` before any assignment holds a ``LazyConfigValue``."""
    from traitlets.config import LazyConfigValue

    value = section[key] if section and key in section else empty
    return value.get_value(empty) if isinstance(value, LazyConfigValue) else value


def access_scope(name: str) -> str:
    return f"access:services!service={name}"


def _roles(c) -> list[dict]:
    return list(c.JupyterHub.load_roles) if "load_roles" in c.JupyterHub else []


def _names(groups: Iterable[str] | str) -> list[str]:
    # a lone group name is one group, not its letters
    return [groups] if isinstance(groups, str) else list(groups)


def _merge_scopes(role: dict, scopes: Iterable[str]) -> dict:
    merged = dict(role)
    have = list(merged.get("scopes", []))
    merged["scopes"] = have + [s for s in scopes if s not in have]
    return merged


def configure_service(
    c,
    *,
    name: str = "gpulab",
    config_file: str | os.PathLike = "jupyterhub_config.py",
    url: str = "http://127.0.0.1:10101",
    admin_groups: Iterable[str] = (),
    reader_groups: Iterable[str] = (),
    admin_users: Iterable[str] | None = None,
    managed: bool = True,
    api_token: str | None = None,
) -> None:
    """Add the gpulab service, its scopes and roles to JupyterHub config ``c``. Deprecated in
    ``jupyterhub_config.py``: call ``jupyterhub_gpulab.configure`` (which calls this).

    - ``config_file``: the ``jupyterhub_config.py`` the service reads ``c.GPULab`` from (pass
      ``__file__`` from that file); made absolute here.
    - ``url``: where the service listens (the hub's proxy routes ``/services/<name>/`` to it).
    - ``admin_groups`` / ``reader_groups``: JupyterHub groups granted ``custom:gpulab:admin`` /
      ``custom:gpulab:read``.
    - ``admin_users``: users granted ``custom:gpulab:admin`` by name; by default the JupyterHub
      admins in ``c.Authenticator.admin_users`` (so set those before this call). An admin made
      in the hub's admin panel is not a gpulab admin until named here or in an admin group.
    - ``managed=False``: the hub does not start the service (run ``python -m
      jupyterhub_gpulab.service`` yourself, with the ``JUPYTERHUB_*`` environment a managed
      service gets); give it an ``api_token`` then.

    Example, in ``jupyterhub_config.py``::

        from jupyterhub_gpulab.hub.hubconfig import configure_service
        configure_service(c, config_file=__file__, admin_groups=["gpu-admins"],
                          reader_groups=["instructors"])
    """
    from .hublog import log_through

    log_through()  # in the hub: the lab's module loggers write through its log
    config_file = os.path.abspath(os.fspath(config_file))
    admin_groups, reader_groups = _names(admin_groups), _names(reader_groups)
    if admin_users is None:
        admin_users = config_value(c.Authenticator, "admin_users", set())
    admin_users = sorted(_names(admin_users))
    service: dict = {
        "name": name,
        "url": url,
        "display": True,
        "oauth_no_confirm": True,
        "oauth_client_allowed_scopes": [ADMIN_SCOPE, READ_SCOPE],
        "info": {"description": "GPU allocation: slices, usage, admin actions"},
    }
    if managed:
        # This file runs in the hub process: the service exits when that process is gone (a
        # hub killed with SIGKILL leaves its managed services running, holding their port).
        service["command"] = [
            sys.executable,
            "-m",
            "jupyterhub_gpulab.service",
            "--config",
            config_file,
            "--hub-pid",
            str(os.getpid()),
        ]
        # The service evaluates the same config file, so it must see what the hub saw: the hub's
        # working directory (relative paths, the default ledger location), the GPULAB_*
        # variables a config may read, and the Docker engine the spawner asks (DOCKER_HOST and
        # its TLS settings: on a Swarm, the manager; courses ask it where servers run). JupyterHub
        # passes managed services none of these by default.
        service["cwd"] = os.getcwd()
        service["environment"] = {
            k: v for k, v in os.environ.items() if k.startswith("GPULAB_") or k in ENGINE_ENV
        }
    if api_token:
        service["api_token"] = api_token
    services = list(c.JupyterHub.services) if "services" in c.JupyterHub else []
    if any(s.get("name") == name for s in services):
        raise ValueError(f"a service named {name!r} is already in c.JupyterHub.services")
    c.JupyterHub.services = services + [service]

    scopes = dict(c.JupyterHub.custom_scopes) if "custom_scopes" in c.JupyterHub else {}
    scopes.update(CUSTOM_SCOPES)
    c.JupyterHub.custom_scopes = scopes

    access = access_scope(name)
    roles = _roles(c)
    taken = {r.get("name") for r in roles}
    for role in ("gpulab-admin", "gpulab-reader", "gpulab-service"):
        if role in taken:
            raise ValueError(f"a role named {role!r} is already in c.JupyterHub.load_roles")
    roles += [
        {
            "name": "gpulab-admin",
            "description": "Steer GPU allocation in the gpulab service",
            "scopes": [ADMIN_SCOPE, access],
            "groups": admin_groups,
            "users": admin_users,
        },
        {
            "name": "gpulab-reader",
            "description": "See GPU allocation and usage in the gpulab service",
            "scopes": [READ_SCOPE, access],
            "groups": reader_groups,
        },
        {
            "name": "gpulab-service",
            "description": "What the gpulab service itself may do on the hub",
            "scopes": list(SERVICE_SCOPES),
            "services": [name],
        },
    ]
    roles = _grant_users(c, roles, [access])
    c.JupyterHub.load_roles = roles
    _grant_servers(c, roles, access)
    # servers read their slice and GPU-hours at the service's own address (not the proxy's,
    # which containers may not reach): JupyterLab's status bar entry, jupyterlab-gpulab
    c.GPUDockerSpawner.service_api_url = f"{url.rstrip('/')}/services/{name}/api/"
    # the spawn form's "join the waitlist" (relative to base_url, which may be set later)
    c.GPUDockerSpawner.waitlist_url = f"services/{name}/me#my-waitlist"
    _announce_warnings(c, name)


#: The scopes of JupyterHub's ``server`` role, which a server's token gets by default.
SERVER_ROLE_SCOPES = ("users:activity!user", "access:servers!server")


def _grant_servers(c, roles: list[dict], access: str) -> None:
    """Each server's own ``$JUPYTERHUB_API_TOKEN`` may reach the service (its status bar entry
    reads ``GET api/me`` with it): ``access`` joins ``c.Spawner.server_token_scopes`` (JupyterHub
    4+; the token gets the subset its owner holds, and every user holds ``access``). An unset
    list starts from the ``server`` role's scopes, as JupyterHub's default does (the config's
    own ``server`` role, if it redefines one); a callable is left alone."""
    have = c.Spawner.server_token_scopes if "server_token_scopes" in c.Spawner else None
    if callable(have):
        return
    if have is None:
        server = next((r for r in roles if r.get("name") == "server" and "scopes" in r), None)
        have = list(server["scopes"]) if server else list(SERVER_ROLE_SCOPES)
    c.Spawner.server_token_scopes = list(have) + ([access] if access not in have else [])


def configure_prometheus(
    c, *, api_token: str, name: str = "prometheus", service: str = "gpulab"
) -> None:
    """Let Prometheus scrape the hub's ``/hub/metrics`` and the gpulab service's
    ``/services/<service>/metrics`` with ``api_token`` (Prometheus's ``authorization:
    credentials``): a service ``name`` with no process and a role granting ``read:metrics``,
    ``custom:gpulab:metrics`` and access to the gpulab service. Call after
    :func:`configure_service`. Deprecated in ``jupyterhub_config.py``: ``jupyterhub_gpulab.
    configure(c, …, prometheus_token=…)`` calls this.

    ``configure_prometheus(c, api_token=os.environ["GPULAB_PROMETHEUS_TOKEN"])``
    """
    services = list(c.JupyterHub.services) if "services" in c.JupyterHub else []
    if any(s.get("name") == name for s in services):
        raise ValueError(f"a service named {name!r} is already in c.JupyterHub.services")
    c.JupyterHub.services = services + [{"name": name, "api_token": api_token}]
    roles = _roles(c)
    if any(r.get("name") == name for r in roles):
        raise ValueError(f"a role named {name!r} is already in c.JupyterHub.load_roles")
    c.JupyterHub.load_roles = roles + [
        {
            "name": name,
            "description": "Scrape the hub's and gpulab's Prometheus metrics",
            "scopes": ["read:metrics", METRICS_SCOPE, access_scope(service)],
            "services": [name],
        }
    ]


def _announce_warnings(c, name: str) -> None:
    """The user's culler warnings on the hub's home page (:mod:`.announce`), after the home
    page's (or the global) announcement the config already has."""
    from .announce import HomeAnnouncement

    tvars = dict(c.JupyterHub.template_vars) if "template_vars" in c.JupyterHub else {}
    before = tvars.get("announcement_home", tvars.get("announcement"))
    # relative to the home page (<base_url>hub/home), so base_url may be set later in the file
    tvars["announcement_home"] = HomeAnnouncement(c, f"../services/{name}/me", before)
    c.JupyterHub.template_vars = tvars


def _grant_users(c, roles: list[dict], scopes: list[str]) -> list[dict]:
    """Every user may use the service: JupyterHub 6's ``extra_user_scopes``, or, where the
    config redefines the ``user`` role (which makes JupyterHub ignore ``extra_user_scopes``),
    that role's scopes."""
    for i, role in enumerate(roles):
        if role.get("name") == "user" and "scopes" in role:
            roles[i] = _merge_scopes(role, scopes)
            return roles
    extra = set(c.JupyterHub.extra_user_scopes) if "extra_user_scopes" in c.JupyterHub else set()
    c.JupyterHub.extra_user_scopes = extra | set(scopes)
    return roles

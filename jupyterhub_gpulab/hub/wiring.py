"""One way to configure a lab in ``jupyterhub_config.py``: :func:`configure` (also
``jupyterhub_gpulab.configure``).

It makes the calls the example configuration used to make one by one, in the order they need::

    1. sign-on     (auth.presets.configure_sso)       the authenticator, before the service reads
                                                       c.Authenticator.admin_users
    2. service     (hub.hubconfig.configure_service)  the gpulab service, its scopes and roles
    3. metrics     (hub.hubconfig.configure_prometheus)  a Prometheus token, when one is given
    4. courses     (courses.hubhook.configure_courses)   the course hook, staff roles, pre-start
                                                       tokens; course servers outside
                                                       named_server_limit_per_user

and does **no I/O while the config file loads**. The config file runs in every process that
reads the lab's settings (the hub, the gpulab service, the ``gpulab`` command); only the hub needs
the courses' roles and pre-start tokens, which come from the ledger (the courses admins stored)
and from the service's cookie secret (created when missing). So ``c.JupyterHub.load_roles`` and
``c.JupyterHub.services`` are set to :class:`AtHubStart` lists: they hold what the config file
knows, and JupyterHub's own config loading (``traitlets``' ``DeferredConfig``, evaluated when the
``JupyterHub`` application takes its settings at start) adds the courses' entries then, opening
the ledger and reading (or writing) the secret in the hub process only.

The four functions stay as they are (deprecated in favour of this one: tests and older configs
call them); they make the same entries, the courses' at config load.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping
from typing import Any

from traitlets.config import Config, DeferredConfig


class _CourseEntries:
    """The course roles and services of config ``c``, computed once, at the hub's start."""

    def __init__(self, c: Config, service: str):
        self.c, self.service = c, service
        self._done: tuple[list, list] | None = None

    def get(self) -> tuple[list, list]:
        if self._done is None:
            from ..courses.hubhook import configure_courses

            # the whole file has run by now: the courses it declares, the ledger's URL, the
            # service's cookie secret file. configure_courses works on a copy of it, so what the
            # config file set stays as it was (a second hub start in one process computes anew).
            scratch = copy.deepcopy(self.c)
            for key in ("load_roles", "services"):
                if isinstance(scratch.JupyterHub.get(key), AtHubStart):
                    scratch.JupyterHub[key] = list(scratch.JupyterHub[key])
            configure_courses(scratch, service=self.service)
            self._done = (list(scratch.JupyterHub.load_roles), list(scratch.JupyterHub.services))
        return self._done


class AtHubStart(list, DeferredConfig):
    """A list setting whose final value is made when the ``JupyterHub`` application loads its
    config (``DeferredConfig.get_value``), not when the config file runs.

    As a list it holds what the config file set (what the service and ``gpulab`` read from the
    same file, e.g. the gpulab roles the service's login scopes come from); ``get_value`` returns
    the whole list with the courses' entries, ``which`` 0 (roles) or 1 (services)."""

    def __init__(self, items: Iterable[Any], entries: _CourseEntries, which: int):
        super().__init__(items)
        self.entries, self.which = entries, which

    def get_value(self, trait) -> list:
        return list(self.entries.get()[self.which])

    def __deepcopy__(self, memo):
        return AtHubStart(copy.deepcopy(list(self), memo), self.entries, self.which)


def configure(
    c: Config,
    *,
    config_file: str | os.PathLike,
    url: str = "http://127.0.0.1:10101",
    admin_groups: Iterable[str] = (),
    reader_groups: Iterable[str] = (),
    admin_users: Iterable[str] | None = None,
    sso: Mapping[str, Any] | None = None,
    prometheus_token: str | None = None,
    courses: bool = True,
    name: str = "gpulab",
    managed: bool = True,
    api_token: str | None = None,
) -> None:
    """Set up JupyterHub config ``c`` for the lab: sign-on, the gpulab service, metrics and
    courses, in that order, with no I/O until the hub starts (module docstring). Call it last
    in ``jupyterhub_config.py``, after the ``c.GPULab``, ``c.GPULabCourses`` and
    ``c.Authenticator`` settings it reads.

    - ``config_file``: the ``jupyterhub_config.py`` the service reads (pass ``__file__``).
    - ``url``: where the service listens, an address the containers reach (e.g.
      ``"http://172.17.0.1:10101"``, the Docker bridge's); the hub's proxy routes
      ``/services/<name>/`` to it.
    - ``admin_groups`` / ``reader_groups`` / ``admin_users``: who holds ``custom:gpulab:admin``
      / ``custom:gpulab:read`` (``admin_users`` default: ``c.Authenticator.admin_users``).
    - ``sso``: campus sign-on, the keywords of ``configure_sso`` with ``"provider"`` (one of
      ``auth.presets.PRESETS``), e.g. ``{"provider": "keycloak", "issuer": "https://sso.
      example.edu/realms/campus", "client_id": "jupyterhub", "client_secret": …,
      "callback_url": "https://hub.example.edu/hub/oauth_callback", "admin_groups":
      ["gpu-admins"], "refresh_age": "5m"}``; ``None``: the authenticator ``c`` already names.
    - ``prometheus_token``: a token Prometheus scrapes ``/hub/metrics`` and the service's
      ``metrics`` with; ``None``: no Prometheus service.
    - ``courses=False``: no course hook, roles or pre-start tokens.
    - ``name``, ``managed``, ``api_token``: as ``configure_service`` (a service the hub does
      not start needs its own ``api_token``).

    Raises ``ValueError`` for an unknown SSO provider, a missing ``issuer``/``tenant``, or a
    service or role name the config already uses.
    """
    from ..auth.presets import configure_sso
    from .hubconfig import configure_prometheus, configure_service

    if sso is not None:
        options = dict(sso)
        if "provider" not in options:
            raise ValueError('sso= needs "provider": one of keycloak, entra, okta, auth0, cilogon')
        configure_sso(c, options.pop("provider"), **options)
    configure_service(
        c,
        name=name,
        config_file=config_file,
        url=url,
        admin_groups=admin_groups,
        reader_groups=reader_groups,
        admin_users=admin_users,
        managed=managed,
        api_token=api_token,
    )
    if prometheus_token:
        configure_prometheus(c, api_token=prometheus_token, service=name)
    if not courses:
        return
    before = c.Spawner.pre_spawn_hook if "pre_spawn_hook" in c.Spawner else None
    entries = _CourseEntries(c, name)
    c.JupyterHub.load_roles = AtHubStart(c.JupyterHub.load_roles, entries, 0)
    c.JupyterHub.services = AtHubStart(c.JupyterHub.services, entries, 1)
    c.Spawner.pre_spawn_hook = _course_hook(c, before)
    base = (
        c.JupyterHub.named_server_limit_per_user
        if "named_server_limit_per_user" in c.JupyterHub
        else 0
    )
    if base:
        c.JupyterHub.named_server_limit_per_user = _server_limit(c, base)


def _server_limit(c: Config, base):
    """``named_server_limit_per_user`` with course servers outside ``base``
    (:func:`~..courses.hubhook.make_server_limit`), made at its first use in the hub."""
    made: list = []

    async def limit(handler):
        if not made:
            from ..courses.hubhook import make_server_limit
            from ..lab.config import GPULab

            made.append(make_server_limit(GPULab(config=c).db_url, base))
        return await made[0](handler)

    return limit


def _course_hook(c: Config, before):
    """The course hook of config ``c`` (:func:`~..courses.hubhook.make_pre_spawn_hook`, after
    ``before``), made at the first spawn: the lab's settings are read in the hub then, never
    while the config file loads (a setting may wait for NVML: :mod:`.demo`), and the hook reads
    the ledger only when a server starts."""
    made: list = []

    async def hook(spawner):
        if not made:
            from ..courses.config import GPULabCourses
            from ..courses.hubhook import make_pre_spawn_hook
            from ..lab.config import GPULab

            made.append(
                make_pre_spawn_hook(GPULab(config=c).db_url, GPULabCourses(config=c), before)
            )
        return await made[0](spawner)

    return hook

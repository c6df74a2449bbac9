"""The running-server record: one server as the hub's REST API describes it.

Read by the service (:mod:`~jupyterhub_gpulab.hubapi.client`: who runs what, for the pages
and the admin's actions; :mod:`~jupyterhub_gpulab.fairuse.cullplan`: what the culler looks at)
from the hub's user models (``GET /hub/api/users``, each with ``servers``). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from ..clock import as_utc


def hub_time(text: str | None) -> datetime | None:
    """A JupyterHub timestamp (``2026-03-02T12:00:00.123Z``) as an aware UTC datetime."""
    if not text:
        return None
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return as_utc(dt)


def server_state(model: Mapping) -> str:
    """``pending`` (starting, stopping), ``running`` (ready) or ``stopped``."""
    if model.get("pending"):
        return "pending"
    if model.get("ready"):
        return "running"
    return "stopped"


@dataclass(frozen=True)
class HubServer:
    """One hub server. ``name`` is ``""`` for the default server; ``state`` is
    :func:`server_state`'s; ``last_activity`` and ``started`` are aware UTC datetimes (``None``:
    never, or not told); ``url`` is its path on the proxy; ``groups`` and ``admin`` are its
    user's; ``profile`` is the slug in its ``user_options`` (``None`` when it has none)."""

    user: str
    name: str
    state: str
    last_activity: datetime | None = None
    url: str | None = None
    started: datetime | None = None
    groups: tuple[str, ...] = ()
    admin: bool = False
    profile: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.user, self.name)

    @classmethod
    def from_model(cls, user: Mapping, name: str, server: Mapping) -> HubServer:
        """From the hub's user model ``user`` and its server model ``server`` named ``name``."""
        options = server.get("user_options") or {}
        profile = options.get("profile") if isinstance(options, Mapping) else None
        return cls(
            user=user["name"],
            name=name,
            state=server_state(server),
            last_activity=hub_time(server.get("last_activity")),
            url=server.get("url"),
            started=hub_time(server.get("started")),
            groups=tuple(user.get("groups") or ()),
            admin=bool(user.get("admin")),
            profile=profile if isinstance(profile, str) else None,
        )


def servers_in(users: Iterable[Mapping]) -> list[HubServer]:
    """Every server in the hub's user models ``users``, in their order."""
    return [
        HubServer.from_model(u, name, srv)
        for u in users
        for name, srv in (u.get("servers") or {}).items()
    ]

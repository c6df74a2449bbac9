"""What the example ``jupyterhub_config.py`` needs besides settings, with no I/O while it loads.

The config file runs in every process that reads the lab's settings (the hub, the gpulab service,
the ``gpulab`` command), and before any of them needs a GPU, a folder or an engine. So:

- :class:`Host`: whether this host serves the **demo lab** (declared devices, nothing attached):
  ``GPULAB_DEMO`` set, or NVML seeing no GPU. :meth:`Host.pick` gives a setting its real or its
  demo value; where only NVML can say which, the value is a traitlets ``DeferredConfig``, and
  NVML is asked (once per process, :func:`~jupyterhub_gpulab.inventory.discover`) when a
  process first builds a configurable that reads it (the hub's spawner, the service, ``gpulab
  check-config``), never while the file loads.
- :class:`StateDir`: the paths of the lab's state (databases, cookie secrets, the proxy's pid
  file) in one folder, made (mode 0700: the hub's user only) by the first process that reads one
  of them, not by the file.
- the demo lab's content: :data:`INVENTORY` (one A100 in MIG mode, one A40, one T4 in four
  seats), :data:`GROUPS` (the dummy login's users), :data:`COURSE` (``dl101``), and
  :func:`local_sso` (the sign-on settings of the demo's local OpenID Connect provider).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from traitlets.config import DeferredConfig

__all__ = ["COURSE", "GROUPS", "INVENTORY", "Host", "StateDir", "local_sso"]


class Host:
    """Whether this host serves the demo lab: ``GPULAB_DEMO`` non-empty in ``environ``, else
    NVML seeing no GPU (asked at most once, when a deferred setting is first read)."""

    def __init__(self, environ: Mapping[str, str] = os.environ):
        self._demo: bool | None = True if environ.get("GPULAB_DEMO") else None

    @property
    def known(self) -> bool:
        """Whether the answer is known without asking NVML."""
        return self._demo is not None

    def demo(self) -> bool:
        """The answer; asks NVML the first time it is not known (no driver: a demo, warned)."""
        if self._demo is None:
            from ..inventory import discover

            self._demo = not discover().devices
        return self._demo

    def pick(self, real: Any, demo: Any) -> Any:
        """``demo`` on the demo lab, else ``real``: the value itself when known, else a
        ``DeferredConfig`` that traitlets resolves when a configurable loads the setting."""
        if self.known:
            return demo if self._demo else real
        return _Pick(self, real, demo)


class _Pick(DeferredConfig):
    def __init__(self, host: Host, real: Any, demo: Any):
        self.host, self.real, self.demo = host, real, demo

    def get_value(self, trait) -> Any:
        return self.demo if self.host.demo() else self.real

    def __repr__(self) -> str:
        return f"<demo {self.demo!r} where NVML sees no GPU, else {self.real!r}>"


class StateDir:
    """The lab's state folder ``path``: :meth:`file` and :meth:`sqlite` name what is in it."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.path.abspath(os.fspath(path))

    def file(self, name: str) -> str:
        """The path of ``name`` in the folder (a ``str``), which makes the folder when a
        configurable first reads it."""
        return _InFolder(os.path.join(self.path, name), self.path)

    def sqlite(self, name: str) -> str:
        """The SQLAlchemy URL of SQLite database ``name`` in the folder (as :meth:`file`)."""
        return _InFolder(f"sqlite:///{os.path.join(self.path, name)}", self.path)


class _InFolder(str, DeferredConfig):
    """A ``str`` setting (what the file and raw readers see) whose folder is made (0700) when
    traitlets loads it into a configurable."""

    def __new__(cls, value: str, folder: str):
        self = super().__new__(cls, value)
        self.folder = folder
        return self

    def __getnewargs__(self):
        return str(self), self.folder

    def get_value(self, trait) -> str:
        os.makedirs(self.folder, mode=0o700, exist_ok=True)
        return str(self)


#: The demo lab's devices (``c.GPULab.inventory``): what images are matched against (a CUDA 13
#: image needs compute capability >= 7.5 and driver 580).
INVENTORY = [
    {
        "uuid": "GPU-0d3a7a3c-5b7e-4c1e-9d6f-a10000000000",
        "index": 0,
        "name": "NVIDIA A100-SXM4-80GB",
        "memory": "80GiB",
        "compute_capability": "8.0",
        "driver_version": "580.95.05",
        "mig": [
            {"uuid": "MIG-1b2c3d4e-0000-4000-8000-000000000001", "profile": "3g.40gb"},
            {"uuid": "MIG-1b2c3d4e-0000-4000-8000-000000000002", "profile": "2g.20gb"},
            {"uuid": "MIG-1b2c3d4e-0000-4000-8000-000000000003", "profile": "1g.10gb"},
            {"uuid": "MIG-1b2c3d4e-0000-4000-8000-000000000004", "profile": "1g.10gb"},
        ],
    },
    {
        "uuid": "GPU-0d3a7a3c-5b7e-4c1e-9d6f-a40000000001",
        "index": 1,
        "name": "NVIDIA A40",
        "memory": "48GiB",
        "compute_capability": "8.6",
        "driver_version": "580.95.05",
    },
    {
        "uuid": "GPU-0d3a7a3c-5b7e-4c1e-9d6f-740000000002",
        "index": 2,
        "name": "Tesla T4",
        "memory": "16GiB",
        "compute_capability": "7.5",
        "driver_version": "580.95.05",
        "shared": {"seats": 4, "memory_per_seat": "3.5GiB", "compute_share": 0.25},
    },
]


def local_sso(hub_url: str, environ: Mapping[str, str] = os.environ) -> dict:
    """``configure(sso=...)`` for the demo's local OpenID Connect provider (``scripts/demo-idp.sh``,
    ``GPULAB_DEMO_AUTH=oidc``), which plays a Keycloak realm: the settings of a campus Keycloak,
    but the issuer (``GPULAB_IDP_ISSUER``, ``GPULAB_IDP_CLIENT_ID``, ``GPULAB_IDP_CLIENT_SECRET``
    override them); ``hub_url``: the hub's public origin."""
    return {
        "provider": "keycloak",
        "issuer": environ.get("GPULAB_IDP_ISSUER", "http://127.0.0.1:9000/realms/campus"),
        "client_id": environ.get("GPULAB_IDP_CLIENT_ID", "jupyterhub"),
        "client_secret": environ.get("GPULAB_IDP_CLIENT_SECRET", "gpulab-demo-secret"),
        "callback_url": f"{hub_url}/hub/oauth_callback",
        "admin_groups": ["gpu-admins"],
        "refresh_age": "1m",
    }


#: The dummy login's groups (``c.JupyterHub.load_groups``), the demo course's roster and staff
#: included. With SSO the provider's claims give them (``scripts/idp/demo-users.json``).
GROUPS = {
    "students": {"users": ["student1", "student2", "student3"]},
    "researchers": {"users": ["researcher1"]},
    "instructors": {"users": ["instructor1"]},
    "dl101": {"users": ["student1", "student2", "student3"]},
    "dl101-staff": {"users": ["instructor1"]},
}

#: The demo course (``c.GPULabCourses.courses``): instructor1 runs it from
#: ``/services/gpulab/courses/dl101``. A T4 seat each: the demo's four seats hold the roster of
#: three (two MIG slices would not), and the default policy opens the profile to the roster
#: group (a course is saved only if its roster group may use its profile).
COURSE = {
    "slug": "dl101",
    "title": "Deep learning 101 (demo)",
    "term": "demo",
    "roster_group": "dl101",
    "staff_group": "dl101-staff",
    "profiles": ["tensorflow-seat"],
    "assignments": [{"name": "hw1", "due": "2030-01-15T23:59"}],
}

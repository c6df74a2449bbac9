"""Plain JupyterHub's idle culler, ``jupyterhub-idle-culler`` (2.0), as a rule: not gpulab's code.

Its ``handle_server`` (``jupyterhub_idle_culler/__init__.py``) stops a ready server when
``now - last_activity >= --timeout`` (``default_cull_arbiter``; ``started`` when the hub has no
``last_activity``), every ``--cull-every`` seconds (default ``timeout // 2``), with no warning;
``--max-age`` is off (0) by default. "Active" is the hub's ``last_activity``: the proxy's traffic
on the server's route (an open tab) and the server's own activity reports (kernels, terminals),
refreshed every ``JupyterHub.last_activity_interval`` (5 min) (its README, "How it works").
Its defaults: ``--timeout`` 600 s; Zero to JupyterHub configures ``cull.timeout`` 3600 s and
``cull.every`` 600 s.
"""

from __future__ import annotations

from collections.abc import Iterable


def idle_culler_stops(servers: Iterable, minute: int, timeout_min: int) -> list:
    """The servers (``hub_activity``: the hub's ``last_activity``, minutes) that the idle
    culler stops at ``minute`` with ``--timeout`` of ``timeout_min`` minutes."""
    return [s for s in list(servers) if minute - s.hub_activity >= timeout_min]

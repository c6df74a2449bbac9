"""gpulab's metrics in the hub process, on JupyterHub's own registry: they appear at
``/hub/metrics`` with JupyterHub's (same authentication: the ``read:metrics`` scope, or
``c.JupyterHub.authenticate_prometheus = False``).

Named as JupyterHub names its own (``<noun>_<verb>_<unit>``, prefix ``gpulab_``); every label
value is created up front (profiles when the lab is loaded), so a series exists at 0 before its
first event and ``rate()`` and alerts work from the start. No label carries a user name.

==========================================  ===============================================
``gpulab_server_spawn_total``               starts of a server by ``profile`` (slug;
                                            ``none`` when refused before a profile was
                                            chosen) and ``outcome``: ``success`` (its
                                            object runs), ``refused`` (a gpulab
                                            refusal), ``failure`` (anything else)
``gpulab_server_spawn_refused_total``       refusals by ``reason``: the
                                            :class:`~jupyterhub_gpulab.errors.SpawnRefused`
                                            reasons (:data:`~..errors.STATUS_BY_REASON`)
``gpulab_slice_claim_duration_seconds``     the ledger's claim transaction (histogram) by
                                            slice ``kind`` and ``outcome`` (``claimed``,
                                            ``refused``)
``gpulab_slice_release_total``              allocations this hub closed, by ``reason``
                                            (the spawner's and the reconcile's end reasons)
==========================================  ===============================================

Releases by the gpulab service (admin actions, the culler) are counted by the service
(``/services/gpulab/metrics``), which closes them.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import REGISTRY, Counter, Histogram

from ..errors import STATUS_BY_REASON

#: ``outcome`` of a start (module docstring).
SPAWN_OUTCOMES = ("success", "refused", "failure")
#: ``profile`` of a refusal made before any profile was chosen (a bad or missing choice).
NO_PROFILE = "none"
SLICE_KINDS = ("gpu", "mig", "shared")
CLAIM_OUTCOMES = ("claimed", "refused")
#: End reasons of allocations closed in the hub: the spawner core's (start failed, stopped,
#: the container gone, exited, or not this server's) and the continuous reconcile's.
HUB_RELEASE_REASONS = (
    "stopped",
    "failed",
    "container-gone",
    "exited",
    "container-mismatch",
    "reconciled:no-server",
    "reconciled:not-held",
)
#: Claim buckets (seconds): the ledger's claim takes ~1 ms on SQLite, more on a busy PostgreSQL.
CLAIM_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, float("inf"))


class _ConfiguredProfiles:
    """Creates each configured profile's ``gpulab_server_spawn_total`` series at the hub's
    first scrape: the spawners' runtime (which also calls :func:`prepare`) exists only from
    the first spawn, and a series born at its first event is invisible to ``increase()``.
    Registered before the counters, so it runs first in every scrape; reads the slugs of
    ``c.GPULab.profiles`` from the running hub's configuration; collects nothing itself."""

    def __init__(self):
        self.done = False

    def describe(self):
        return []

    def collect(self):
        if not self.done:
            try:
                from jupyterhub.app import JupyterHub

                from ..lab.config import GPULab

                if JupyterHub.initialized():
                    profiles = GPULab(config=JupyterHub.instance().config).profiles
                    slugs = [
                        p["slug"]
                        for p in profiles
                        if isinstance(p, dict) and isinstance(p.get("slug"), str)
                    ]
                    prepare(slugs)
                    self.done = True
            except Exception:  # a bad profile list is the spawner's to report
                self.done = True
        return iter(())


REGISTRY.register(_ConfiguredProfiles())

SERVER_SPAWN = Counter(
    "gpulab_server_spawn",
    "Server starts through gpulab's spawner, by profile and outcome",
    ["profile", "outcome"],
)
SERVER_SPAWN_REFUSED = Counter(
    "gpulab_server_spawn_refused",
    "Spawns gpulab refused, by reason (the SpawnException reasons)",
    ["reason"],
)
SLICE_CLAIM_DURATION = Histogram(
    "gpulab_slice_claim_duration_seconds",
    "Time of the ledger's claim transaction, by slice kind and outcome",
    ["kind", "outcome"],
    buckets=CLAIM_BUCKETS,
)
SLICE_RELEASE = Counter(
    "gpulab_slice_release",
    "Allocations closed by this hub, by end reason",
    ["reason"],
)

for _reason in STATUS_BY_REASON:
    SERVER_SPAWN_REFUSED.labels(reason=_reason)
for _kind in SLICE_KINDS:
    for _outcome in CLAIM_OUTCOMES:
        SLICE_CLAIM_DURATION.labels(kind=_kind, outcome=_outcome)
for _reason in HUB_RELEASE_REASONS:
    SLICE_RELEASE.labels(reason=_reason)


def prepare(profiles: Iterable[str]) -> None:
    """Create the ``gpulab_server_spawn_total`` series of each profile slug at 0."""
    for slug in (*profiles, NO_PROFILE):
        for outcome in SPAWN_OUTCOMES:
            SERVER_SPAWN.labels(profile=slug, outcome=outcome)


def spawn_finished(profile: str | None, outcome: str) -> None:
    """Count one start of a ``profile`` (slug; ``None``: none chosen) ending in ``outcome``."""
    SERVER_SPAWN.labels(profile=profile or NO_PROFILE, outcome=outcome).inc()


def spawn_refused(reason: str) -> None:
    """Count one refusal with a :data:`~..errors.STATUS_BY_REASON` ``reason``."""
    SERVER_SPAWN_REFUSED.labels(reason=reason).inc()


class HubMetrics:
    """A ledger listener (:mod:`jupyterhub_gpulab.ledger.events`) feeding the claim and release
    metrics; the hub's runtime registers one on its ledger."""

    def claimed(self, claim, seconds: float) -> None:
        SLICE_CLAIM_DURATION.labels(kind=str(claim.slice.kind), outcome="claimed").observe(seconds)

    def claim_refused(self, request, seconds: float) -> None:
        SLICE_CLAIM_DURATION.labels(kind=str(request.kind), outcome="refused").observe(seconds)

    def released(self, allocation_id: int, slice_id: str, reason: str) -> None:
        SLICE_RELEASE.labels(reason=reason).inc()

"""One lab per hub process: the validated configuration, the ledger, and the inventory sync.

Every spawner of a hub shares one :class:`LabRuntime` (one database engine, one inventory read),
built on first use from ``c.GPULab``, and one continuous reconcile (:mod:`.reconcile`) started
by the first spawner that runs on the hub's event loop. ``c.GPULab`` is read once per hub
configuration (:func:`runtime_for`): every spawner of a hub holds the same ``Config`` object.
"""

from __future__ import annotations

import logging
import threading

from traitlets.config import Config

from ..hub import metrics
from ..inventory import gpu_instance_ids
from ..lab.config import GPULab, Lab
from ..ledger import ForeignContainer, close_shared_ledgers, shared_ledger
from ..ledger.jobmap import JobMap
from .claimoutlook import ClaimOutlook
from .engine import EngineSurvey
from .reconcile import Reconciler

log = logging.getLogger(__name__)

_lock = threading.Lock()
_runtimes: dict[str, LabRuntime] = {}
#: ``id(config) -> (config, runtime)``: the config is kept, so its id is not reused
_by_config: dict[int, tuple[Config, LabRuntime]] = {}


class LabRuntime:
    """The lab (:class:`~jupyterhub_gpulab.lab.config.Lab`) and its :class:`Ledger`, for one process."""

    def __init__(self, gpulab: GPULab):
        self.gpulab = gpulab
        self.lab: Lab = gpulab.load()
        for w in self.lab.warnings:
            log.warning("gpulab inventory: %s", w)
        self.ledger = shared_ledger(gpulab.db_url, auto_upgrade=gpulab.db_auto_upgrade)
        self.ledger.fairshare_half_life = gpulab.fairshare_half_life
        metrics.prepare(p.slug for p in self.lab.profiles)
        if not any(isinstance(x, metrics.HubMetrics) for x in self.ledger.listeners):
            self.ledger.listeners.append(metrics.HubMetrics())
        #: this lab's id and name: on every container label; only such containers are ours
        self.identity = self.ledger.name_lab(gpulab.lab_name.strip())
        if self.lab.inventory.source == "agents":
            # every node's GPUs come from its agent, through the service (none on this host)
            report = None
            log.info("gpulab: %s; the nodes' GPUs come from their agents", self.identity.describe())
        else:
            report = self._sync_own_inventory()
        if gpulab.dcgm_job_mapping_dir:
            self._keep_job_map(gpulab.dcgm_job_mapping_dir)
        self.engine = EngineSurvey()
        self._foreign: dict[str, tuple[str, ...]] | None = None
        self.reconciler: Reconciler | None = None
        #: whether a start's claim needs the refusal read first (:mod:`.claimoutlook`)
        self.outlook = ClaimOutlook()
        self.sync_report = report

    def _sync_own_inventory(self):
        report = self.ledger.sync_inventory(self.lab.inventory, node=self.lab.node)
        log.info(
            "gpulab: %s; %d device(s), %d slice(s) from %s (added %d, vanished %d)",
            self.identity.describe(),
            len(self.lab.inventory.devices),
            len(self.lab.inventory.slices),
            self.lab.inventory.source,
            len(report.added),
            len(report.vanished),
        )
        return report

    def _keep_job_map(self, directory: str) -> None:
        """Keep dcgm-exporter's job-mapping files in ``directory`` (:mod:`..ledger.jobmap`)."""
        if any(isinstance(x, JobMap) for x in self.ledger.listeners):
            return
        jobmap = JobMap(directory, self.ledger, self.lab.node, gpu_instance_ids)
        try:
            jobmap.sync()
        except OSError as e:
            log.error(
                "gpulab: cannot write dcgm-exporter's job-mapping files in %s: %s", directory, e
            )
        self.ledger.listeners.append(jobmap)

    def our_containers(self, backend, rows: list[dict]) -> list[dict]:
        """This lab's containers among ``rows`` (``docker ps -a``: docker-py's
        ``APIClient.containers(all=True)``), in any state; running containers of others that
        hold this lab's GPUs are recorded and logged on the way (see :mod:`.engine`), inspected
        through ``backend`` (the lab's :class:`~jupyterhub_gpulab.backends.Backend`). Blocking
        (engine and database calls): run it in a thread."""
        survey = self.engine.look(
            backend, self.identity, self.lab.inventory, self.ledger, rows=rows
        )
        try:
            self._report_foreign(survey.foreign)
        except Exception:  # the report must not stop the reconcile
            log.exception("gpulab: could not record other labs' containers")
        return survey.ours

    def start_reconciler(
        self,
        *,
        list_objects,
        remove_object,
        users,
        interval_s: float,
        node: str | None = "",
        log=log,
    ) -> Reconciler:
        """Start the continuous reconcile on the running event loop, once per runtime (and loop):
        see :mod:`.reconcile`. ``list_objects`` and ``remove_object`` are the spawner backend's
        (:mod:`.core`), ``users`` returns JupyterHub's in-memory users, ``interval_s`` the
        seconds between passes, ``node`` the node whose allocations it reconciles (default this
        hub's; ``None``: every node's), ``log`` the hub's log."""
        if self.reconciler is None:
            self.reconciler = Reconciler(
                self.ledger,
                self.lab.node if node == "" else node,
                list_objects=list_objects,
                remove_object=remove_object,
                users=users,
                interval_s=interval_s,
                log=log,
            )
        self.reconciler.start()
        return self.reconciler

    def _report_foreign(self, found: list[ForeignContainer]) -> None:
        """Record other containers holding our GPUs for the admin page; log each one once."""
        now = {f.container_id: f.devices for f in found}
        if now or self._foreign is None or self._foreign:
            self.ledger.record_foreign(self.lab.node, found)
        for f in found:
            if (self._foreign or {}).get(f.container_id) != f.devices:
                log.warning(
                    "gpulab: %s, in this lab's inventory (%s) too: two ledgers hand out the "
                    "same GPU. Take it out of one lab's inventory (c.GPULab.inventory, or drain "
                    "it there), or stop that container.",
                    f.describe(),
                    self.identity.describe(),
                )
        for cid in set(self._foreign or {}) - set(now):
            log.info("gpulab: container %s no longer holds a GPU of this lab", cid[:12])
        self._foreign = now


def get_runtime(gpulab: GPULab) -> LabRuntime:
    """The process's runtime for ``gpulab.db_url``, built on first call (raises
    :class:`~jupyterhub_gpulab.errors.ConfigError` if the configuration is invalid)."""
    key = gpulab.db_url
    with _lock:
        rt = _runtimes.get(key)
        if rt is None:
            rt = _runtimes[key] = LabRuntime(gpulab)
        return rt


def runtime_for(config: Config) -> LabRuntime:
    """The process's runtime for the hub configuration ``config`` (a spawner's ``self.config``,
    one object for every spawner of a hub): ``c.GPULab`` is read (a :class:`GPULab` copies every
    configured value: ~2.6 ms for a 1,200-slice lab) on the first call for that object only.
    Raises as :func:`get_runtime`."""
    with _lock:
        known = _by_config.get(id(config))
    if known is not None and known[0] is config:
        return known[1]
    rt = get_runtime(GPULab(config=config))
    with _lock:
        _by_config[id(config)] = (config, rt)
    return rt


def forget_runtimes() -> None:
    """Drop every runtime and close the ledgers (tests that build several labs in one process)."""
    with _lock:
        for rt in _runtimes.values():
            if rt.reconciler is not None:
                rt.reconciler.stop()
        _runtimes.clear()
        _by_config.clear()
    close_shared_ledgers()

"""Who else runs on this Docker engine: which containers are this lab's, and which others hold
GPUs of this lab's inventory.

Several labs (each a ledger and a hub: staging beside production, two departments on one GPU
server) may share one engine. Each lab labels its containers with its id
(``org.jupyter.gpulab.lab-id``, see :mod:`.container`) and touches only its own; a container of
another lab, or one started by hand, that holds one of our GPUs is reported, because two ledgers
then hand out the same device.

**Whose container** (:func:`owner`):

- labelled with our lab id: ours; with another lab id: that lab's (``OTHER``);
- gpulab labels without a lab id (made before lab ids existed): ours when its allocation label
  names an allocation of our ledger for the same user and server whose recorded container is
  this one (or none yet); otherwise another lab's. Without an allocation label (a CPU-only
  server) it cannot be told (``UNKNOWN``): it holds no GPU, the reconcile pass never looks at it,
  and our spawner may reuse its name, as before;
- no gpulab labels: not gpulab's (``NONE``).

**Which GPUs a container holds** (:func:`attached`):

- a device request for the ``nvidia`` driver (or none) with the ``gpu`` capability: its device
  ids (UUIDs or indices); ``Count: -1`` is every GPU, ``Count: n`` the first n (the engine sets
  ``NVIDIA_VISIBLE_DEVICES=0,…,n-1``);
- a CDI device request ``nvidia.com/gpu=<uuid|index|all>``;
- ``NVIDIA_VISIBLE_DEVICES`` (UUIDs, indices, ``all``; ``none``/``void``/empty: nothing) when
  the NVIDIA runtime reads it: the container runs the ``nvidia`` runtime (its own or the engine's
  default), or it is a gpulab container (its hub attached the slice that way, ``attach_mode =
  "env"``). Images such as ``nvidia/cuda`` set the variable to ``all`` without holding anything
  under ``runc``.

:func:`held` maps those onto our inventory: GPU UUIDs, MIG UUIDs, and indices of this host.
Everything but :meth:`EngineSurvey.look` is pure.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..inventory import Inventory, SliceKind
from ..ledger import Allocation, ForeignContainer, LabIdentity
from .container import (
    LABEL_ALLOCATION,
    LABEL_LAB,
    LABEL_LAB_NAME,
    LABEL_SERVER,
    LABEL_SLICE,
    LABEL_USER,
)

log = logging.getLogger(__name__)

OURS, OTHER, UNKNOWN, NONE = "ours", "other", "unknown", "none"


def allocation_label(labels: Mapping[str, str]) -> int | None:
    """The allocation id a container's labels name, or ``None`` (none, or not a number)."""
    raw = labels.get(LABEL_ALLOCATION)
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


def owner(
    labels: Mapping[str, str],
    container_id: str,
    lab_uuid: str | None,
    allocations: Mapping[int, Allocation],
) -> str:
    """``OURS``, ``OTHER``, ``UNKNOWN`` or ``NONE`` for a container with ``labels`` (module
    docstring). ``lab_uuid``: our lab's id (``None``: we have no ledger yet, so nothing is
    ours); ``allocations``: our ledger's rows for the allocation ids legacy containers name."""
    lab = labels.get(LABEL_LAB)
    if lab:
        return OURS if lab == lab_uuid else OTHER
    if LABEL_USER not in labels:
        return NONE
    aid = allocation_label(labels)
    if aid is None:
        return UNKNOWN if LABEL_ALLOCATION not in labels else OTHER
    a = allocations.get(aid) if lab_uuid else None
    if (
        a is not None
        and a.user == labels.get(LABEL_USER)
        and a.server_name == labels.get(LABEL_SERVER, "")
        and a.slice_id == labels.get(LABEL_SLICE, a.slice_id)
        and a.container_id in (None, container_id)
    ):
        return OURS
    return OTHER


@dataclass(frozen=True)
class Attached:
    """GPUs a container asks for: ``ids`` (UUIDs or host indices as strings), or ``every``."""

    ids: frozenset[str] = frozenset()
    every: bool = False
    by: str = ""

    def __bool__(self) -> bool:
        return self.every or bool(self.ids)


_NOTHING = {"", "none", "void"}


def _split(value: str) -> tuple[frozenset[str], bool]:
    parts = {p.strip() for p in value.split(",")} - {""}
    if parts & {"all"}:
        return frozenset(), True
    if not parts or parts <= _NOTHING:
        return frozenset(), False
    return frozenset(parts - _NOTHING), False


def attached(info: Mapping, *, default_runtime: str = "runc", gpulab: bool = False) -> Attached:
    """The GPUs the container described by ``info`` (``docker inspect``'s answer) holds; see
    the module docstring for the rules. ``default_runtime``: the engine's (``docker info``);
    ``gpulab``: the container carries gpulab labels."""
    host = info.get("HostConfig") or {}
    ids: set[str] = set()
    every = False
    by = []
    for req in host.get("DeviceRequests") or []:
        driver = (req.get("Driver") or "").lower()
        caps = {c for group in req.get("Capabilities") or [] for c in group}
        if driver == "cdi":
            for dev in req.get("DeviceIDs") or []:
                kind, _, name = dev.partition("=")
                if kind == "nvidia.com/gpu" and name:
                    got, all_ = _split(name)
                    ids |= got
                    every |= all_
                    by.append("CDI device request")
            continue
        if driver not in ("", "nvidia") or (driver == "" and "gpu" not in caps):
            continue
        count = req.get("Count") or 0
        if count < 0:
            every = True
        elif count > 0:
            ids |= {str(i) for i in range(count)}
        ids |= set(req.get("DeviceIDs") or [])
        by.append("device request")
    env = dict(
        line.split("=", 1) for line in (info.get("Config") or {}).get("Env") or [] if "=" in line
    )
    runtime = host.get("Runtime") or default_runtime
    if "NVIDIA_VISIBLE_DEVICES" in env and (gpulab or runtime == "nvidia"):
        got, all_ = _split(env["NVIDIA_VISIBLE_DEVICES"])
        if got or all_:
            ids |= got
            every |= all_
            by.append("NVIDIA_VISIBLE_DEVICES")
    return Attached(frozenset(ids), every, " and ".join(dict.fromkeys(by)))


def held(att: Attached, inventory: Inventory) -> tuple[str, ...]:
    """Ids of our devices and MIG instances that ``att`` reaches, in inventory order: a GPU
    UUID or index reaches that device (and every MIG instance on it), ``every`` all of them."""
    out: list[str] = []
    for d in inventory.devices:
        if att.every or d.uuid in att.ids or str(d.index) in att.ids:
            out.append(d.uuid)
    whole = set(out)
    for s in inventory.slices:
        if s.kind is SliceKind.MIG and s.device_uuid not in whole and s.visible_id in att.ids:
            out.append(s.visible_id)
    return tuple(out)


@dataclass
class Survey:
    """One look at the engine: our containers (``ours``: their ``docker ps`` rows), other
    running containers holding our GPUs (``foreign``), and the names of other labs' running
    containers (``other_labs``: container name → the lab's labels)."""

    ours: list[dict] = field(default_factory=list)
    foreign: list[ForeignContainer] = field(default_factory=list)
    other_labs: dict[str, LabIdentity | None] = field(default_factory=dict)


class EngineSurvey:
    """Looks at the running containers of one engine for one lab. Keeps what it learnt of each
    container's GPUs (they cannot change after creation), so a container is inspected once."""

    def __init__(self) -> None:
        self._attached: dict[str, Attached] = {}
        self._default_runtime: str | None = None

    def look(
        self,
        backend,
        lab: LabIdentity | None,
        inventory: Inventory,
        ledger=None,
        rows: list[dict] | None = None,
    ) -> Survey:
        """List the engine's running containers and sort them for ``lab`` (``None``: a lab
        without a ledger yet, so nothing is ours). ``backend``: the lab's
        :class:`~jupyterhub_gpulab.backends.Backend` (its ``containers``, ``inspect_container``
        and ``info``). ``ledger`` answers ``allocations_by_id`` for containers from before lab
        ids. ``rows``: a listing already made (``containers(all=True)``, for the reconcile):
        ``ours`` then holds our containers in any state, the rest looks at running ones only.
        Blocking (engine and database calls): run it in a thread."""
        containers = backend.containers(all=False) if rows is None else rows
        legacy = {
            aid
            for c in containers
            if LABEL_LAB not in (c.get("Labels") or {})
            and (aid := allocation_label(c.get("Labels") or {})) is not None
        }
        allocations = ledger.allocations_by_id(legacy) if legacy and ledger is not None else {}
        survey = Survey()
        seen = set()
        for c in containers:
            cid, labels = c["Id"], c.get("Labels") or {}
            seen.add(cid)
            who = owner(labels, cid, lab.uuid if lab else None, allocations)
            name = ((c.get("Names") or ["/?"])[0]).lstrip("/")
            if who == OURS:
                survey.ours.append(c)
                continue
            if c.get("State", "running") != "running":
                continue
            if who == OTHER:
                other = labels.get(LABEL_LAB)
                survey.other_labs[name] = (
                    LabIdentity(other, labels.get(LABEL_LAB_NAME)) if other else None
                )
            att = self._attached_to(backend, cid, gpulab=who != NONE)
            ours = held(att, inventory) if att else ()
            if ours:
                survey.foreign.append(
                    ForeignContainer(
                        container_id=cid,
                        container_name=name,
                        lab_uuid=labels.get(LABEL_LAB),
                        lab_name=labels.get(LABEL_LAB_NAME),
                        user=labels.get(LABEL_USER),
                        devices=ours,
                        attached_by=att.by,
                    )
                )
        for gone in set(self._attached) - seen:
            del self._attached[gone]
        return survey

    def _attached_to(self, backend, cid: str, *, gpulab: bool) -> Attached:
        if cid not in self._attached:
            if self._default_runtime is None:
                self._default_runtime = (backend.info() or {}).get("DefaultRuntime") or "runc"
            try:
                info = backend.inspect_container(cid)
            except Exception:  # gone between the listing and now
                log.debug("Could not inspect container %s", cid[:12], exc_info=True)
                return Attached()
            self._attached[cid] = attached(
                info, default_runtime=self._default_runtime, gpulab=gpulab
            )
        return self._attached[cid]

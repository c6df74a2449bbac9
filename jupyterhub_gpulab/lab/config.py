"""``c.GPULab``: the lab's configuration, shared by the spawner (in the hub), the service and the CLI.

Everything here is read from ``jupyterhub_config.py``; :meth:`GPULab.load` validates it all at once
and raises :class:`~..errors.ConfigError` listing every problem (``gpulab check-config`` prints
them). Example::

    c.GPULab.db_url = "sqlite:////srv/jupyterhub/gpulab.sqlite"
    c.GPULab.inventory = [{"uuid": "GPU-…", "index": 0, "name": "NVIDIA A40", "memory": "48GiB"}]
    c.GPULab.profiles = [{"slug": "cpu", "display_name": "CPU only", "image": "…"}]
    c.GPULab.group_policies = {"students": {"max_slices_per_user": 1}}
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from datetime import date, timezone, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from traitlets import Bool, Dict, Enum, List, Unicode, default
from traitlets.config import Config, PyFileConfigLoader

from ..clock import midnight_utc
from ..errors import ConfigError
from ..inventory import Inventory, InventoryError, load_inventory, load_shared
from ..inventory.layoutschedule import LayoutSchedule
from .migschedule import MigScheduleTraits
from .policy import GroupPolicy
from .policyload import load_policies, load_policy
from .profile import Profile
from .profiles import load_profiles
from .term import Term
from .traits import ChoiceEnum, Duration

#: ``c.GPULab.seat_overuse_action``'s values (what :mod:`..fairuse.seatguard` decides).
SEAT_ACTIONS = ("kill-process", "stop-server")


@dataclass(frozen=True)
class Lab:
    """The validated lab: what :meth:`GPULab.load` returns."""

    inventory: Inventory
    profiles: tuple[Profile, ...]
    policies: dict[str, GroupPolicy]
    default_policy: GroupPolicy | None
    node: str
    warnings: tuple[str, ...] = field(default_factory=tuple)
    tz: tzinfo = timezone.utc
    term: Term | None = None
    #: ``c.GPULab.mig_schedule``, parsed (:mod:`..inventory.layoutschedule`)
    schedule: LayoutSchedule = field(default_factory=LayoutSchedule)

    def profile(self, slug: str) -> Profile | None:
        return next((p for p in self.profiles if p.slug == slug), None)


class GPULab(MigScheduleTraits):
    """Configuration of the GPU lab (inventory, profiles, group policies, ledger database)."""

    db_url = Unicode(
        config=True,
        help="""SQLAlchemy URL of the ledger database, shared by the hub and the gpulab service.

        Default: ``sqlite:///gpulab.sqlite`` in the hub's working directory (WAL mode, a 30 s busy
        timeout). For several hub replicas use PostgreSQL:
        ``c.GPULab.db_url = "postgresql+psycopg://gpulab:secret@db/gpulab"``
        (install the ``postgres`` extra).
        """,
    )

    @default("db_url")
    def _default_db_url(self):
        return "sqlite:///" + str(Path(os.getcwd()) / "gpulab.sqlite")

    db_auto_upgrade = Bool(
        False,
        config=True,
        help="""Upgrade an older ledger schema at start instead of refusing to start.

        Off by default, as in JupyterHub: back up, then run ``gpulab upgrade-db``.
        """,
    )

    node_name = Unicode(
        config=True,
        help="""Name of this Docker host in the ledger (one node today). Default: the hostname.""",
    )

    @default("node_name")
    def _default_node_name(self):
        return socket.gethostname()

    lab_name = Unicode(
        "",
        config=True,
        help="""A name people know this lab by (at most 64 characters), shown next to its id.

        Each ledger is one lab with a random id, made once; every container the lab starts is
        labelled with both, so two labs on one Docker engine (staging beside production) never
        touch each other's containers, and each names the other when it finds it holding one of
        its GPUs. ``c.GPULab.lab_name = "staging"``
        """,
    )

    inventory_source = Unicode(
        "auto",
        config=True,
        help="""Where devices come from: ``"auto"`` (``inventory`` if declared, else NVML),
        ``"nvml"`` (ask the driver), ``"declared"`` (``inventory`` only), or ``"agents"``: every
        node's GPUs come from its node agent (``gpulab node-agent``), none from the hub's host
        (a lab of several nodes: the Swarm backend, ``c.JupyterHub.spawner_class =
        "gpulab-swarm"``).
        """,
    )

    inventory = List(
        Dict(),
        config=True,
        help="""Devices declared by hand (vGPU hosts, hosts the hub cannot probe, demos, tests).

        One dict per GPU: ``uuid`` (``GPU-…`` as ``nvidia-smi -L`` prints), ``index``, ``name``,
        ``memory`` (``"48GiB"``), and either ``mig`` (a list of ``{"uuid": "MIG-…", "profile":
        "1g.10gb"}``) or ``shared`` (``{"seats": 4, "memory_per_seat": "4GiB", "compute_share":
        0.25}``) or neither (a whole GPU). See :mod:`jupyterhub_gpulab.inventory.declared`.
        """,
    )

    shared_devices = Dict(
        config=True,
        help="""Split NVML-discovered GPUs into seats: ``{"GPU-uuid": {"seats": 4,
        "memory_per_seat": "4GiB", "compute_share": 0.25}}``. Memory caps are enforced with MPS
        where the host runs an MPS daemon, else soft. On a declared inventory it splits the
        whole GPUs it names as their own ``"shared"`` key would; naming a GPU declared with
        ``"mig"`` or ``"shared"`` is an error. GPUs of node agents' reports are split the same
        way.
        """,
    )

    seat_overcommit = Enum(
        ["warn", "refuse"],
        "warn",
        config=True,
        help="""What to do with a GPU shared in seats that do not fit once each seat's CUDA context
        (~300 MiB per process, outside every framework's cap) is counted, e.g. 24 seats of 1 GiB
        on a 24 GiB Tesla P40 (~31 GiB): ``"warn"`` keeps the seats and ``gpulab check-config``
        warns with the most seats that fit and the largest cap for this many; ``"refuse"`` makes
        it an error, for a declared GPU (``c.GPULab.inventory``) and an NVML-discovered one
        split by ``shared_devices`` alike: ``gpulab check-config`` fails naming what fits, the
        gpulab service does not start, and the hub refuses every spawn as misconfigured (its
        log says why) until the layout fits. NVML's memory figure is the card's usable memory (less than
        its nominal size with ECC on), so check on the host. Node agents' GPUs always warn: a
        node's report is never refused. ``c.GPULab.seat_overcommit = "refuse"``
        """,
    )

    seat_overuse_grace = Duration(
        "10s",
        config=True,
        help="""How long a shared seat may hold more GPU memory than its cap, as the host sees it
        (NVML's per-process ``usedGpuMemory`` of the seat's container's processes, which a
        student cannot change), before ``seat_overuse_action`` is taken; the student is warned
        meanwhile. Seconds, or ``"30s"``/``"2m"``. Checked at every sample
        (``c.GPULabService.sample_interval``), so action comes within the grace plus one
        interval. ``0`` acts at the second over-cap read. Seats on devices whose NVML cannot
        list per-process memory (vGPU guests) are "soft": never acted on.
        ``c.GPULab.seat_overuse_grace = "30s"``
        """,
    )

    seat_overuse_action = ChoiceEnum(
        list(SEAT_ACTIONS),
        "kill-process",
        config=True,
        help="""What ends a seat's overuse once ``seat_overuse_grace`` has passed:
        ``"kill-process"`` ends the seat's largest GPU processes (``kill -KILL`` run inside the
        server's container) until the rest fit the cap, and the server keeps running;
        ``"stop-server"`` stops the server (its allocation ends ``culled:seat-memory``).
        Either is recorded with its reason and told to the student.
        ``c.GPULab.seat_overuse_action = "stop-server"``
        """,
    )

    profiles = List(
        Dict(),
        config=True,
        help="""What users pick: a list of dicts with ``slug``, ``display_name``, ``description``,
        ``image``, ``slice`` (``None``; ``{"kind": "gpu", "min_memory": "24GiB", "model":
        "A100"}``; ``{"kind": "mig", "mig_profile": "1g.10gb"}``; ``{"kind": "shared"}``),
        ``cpu_limit`` (cores), ``mem_limit`` (``"16G"``), ``env``, ``groups`` (empty: everyone),
        ``default``. See :mod:`jupyterhub_gpulab.lab.profiles`.
        """,
    )

    group_policies = Dict(
        config=True,
        help="""Per JupyterHub group: ``profiles`` allowed, ``max_slices_per_user`` (all named
        servers count), ``max_slices`` (the whole group), ``priority``. How several groups
        combine: :mod:`jupyterhub_gpulab.lab.policy`. The key ``admin`` applies to JupyterHub admins.
        """,
    )

    default_policy = Dict(
        None,
        allow_none=True,
        config=True,
        help="""The policy of users in none of ``group_policies``' groups (same keys as one
        group's policy). ``None``: no limits.""",
    )

    quota_timezone = Unicode(
        "UTC",
        config=True,
        help="""Time zone of the GPU-hour periods: a ``day`` starts at local midnight, a ``week``
        on Monday 00:00 (IANA name, e.g. ``"Europe/Berlin"``).""",
    )

    term_start = Unicode(
        "",
        config=True,
        help="""First day of the teaching term (ISO date, ``"2026-09-07"``), for policies whose
        ``period`` is ``"term"``. The term is ``[term_start, term_end)`` in ``quota_timezone``.""",
    )

    term_end = Unicode(
        "",
        config=True,
        help="""The day after the term's last day (ISO date, ``"2026-12-19"``).""",
    )

    fairshare_half_life = Duration(
        0,
        config=True,
        help="""Half-life of the GPU use that orders the waitlist among users of one priority
        (Slurm-style fair share): who used fewer GPU-hours lately is offered a slice first.

        A GPU-hour used one half-life ago counts half (weighted by the slice's share, as usage
        accounting counts it); the policy's ``priority`` still comes first and first come breaks
        ties. Seconds or a duration (``"7d"``); 0 (default): first come within a priority. See
        :mod:`jupyterhub_gpulab.ledger.fairshare`.
        ``c.GPULab.fairshare_half_life = "7d"``
        """,
    )

    dcgm_job_mapping_dir = Unicode(
        "",
        config=True,
        help="""Folder where gpulab keeps dcgm-exporter's HPC job-mapping files (one per GPU index,
        or ``<index>.<GPU instance id>`` per MIG instance, listing the holders' job ids
        ``user`` or ``user/server``), rewritten on every claim and release by the hub and the
        service. Run dcgm-exporter with ``--hpc-job-mapping-dir`` (``DCGM_HPC_JOB_MAPPING_DIR``)
        set to the same folder and its GPU metrics carry ``hpc_job``. Empty (default): none.
        See :mod:`jupyterhub_gpulab.ledger.jobmap`.
        ``c.GPULab.dcgm_job_mapping_dir = "/run/gpulab/dcgm-job-map"``
        """,
    )

    def _fair_use_settings(self, errors: list[str]):
        """``(tz, term)`` from the traits, appending problems to ``errors``."""

        try:
            tz = ZoneInfo(self.quota_timezone)
        except (ZoneInfoNotFoundError, ValueError):
            errors.append(
                f"c.GPULab.quota_timezone {self.quota_timezone!r} is not a known time zone; "
                "write an IANA name such as 'UTC' or 'Europe/Berlin'"
            )
            tz = timezone.utc
        term = None
        if self.term_start or self.term_end:
            try:
                start, end = (
                    midnight_utc(date.fromisoformat(d), tz)
                    for d in (self.term_start, self.term_end)
                )
                term = Term(start, end)
            except (ValueError, ConfigError):
                errors.append(
                    f"c.GPULab.term_start / term_end ({self.term_start!r}, {self.term_end!r}) must "
                    "be two ISO dates with the end after the start, e.g. '2026-09-07' and "
                    "'2026-12-19'"
                )
        return tz, term

    def read_inventory(self, nvml=None) -> Inventory:
        """The inventory alone (NVML or declared); raises :class:`ConfigError` for a bad one."""
        try:
            shared = load_shared(self.shared_devices) if self.shared_devices else None
            return load_inventory(
                self.inventory_source,
                self.inventory,
                node=self.node_name,
                nvml=nvml,
                shared=shared,
                overcommit=self.seat_overcommit,
            )
        except InventoryError as e:
            raise ConfigError([f"c.GPULab.{m}" for m in e.errors]) from None

    def load(self, nvml=None) -> Lab:
        """Validate everything and read the inventory; raise :class:`ConfigError` listing every
        problem (inventory, profiles and policies together)."""
        errors: list[str] = []
        inventory = Inventory()
        try:
            inventory = self.read_inventory(nvml)
        except ConfigError as e:
            errors.extend(e.errors)
        profiles: tuple[Profile, ...] = ()
        try:
            profiles = load_profiles(self.profiles)
        except ConfigError as e:
            errors.extend(f"c.GPULab.{m}" for m in e.errors)
        # Policies are checked against every slug written, so one bad profile does not make every
        # policy that names a good one look wrong too.
        slugs = [p.slug for p in profiles] or [
            e["slug"]
            for e in self.profiles
            if isinstance(e, dict) and isinstance(e.get("slug"), str)
        ]
        policies: dict[str, GroupPolicy] = {}
        try:
            policies = load_policies(self.group_policies, slugs)
        except ConfigError as e:
            errors.extend(f"c.GPULab.{m}" for m in e.errors)
        default_policy = None
        if self.default_policy is not None:
            try:
                default_policy = load_policy(
                    "(default)", self.default_policy, slugs, where="default_policy"
                )
            except ConfigError as e:
                errors.extend(f"c.GPULab.{m}" for m in e.errors)
        tz, term = self._fair_use_settings(errors)
        schedule = self.layout_schedule(tz, errors)
        if len(self.lab_name) > 64 or not self.lab_name.isprintable():
            errors.append(
                f"c.GPULab.lab_name {self.lab_name!r} must be at most 64 printable characters, "
                "e.g. 'staging'"
            )
        if term is None and any(p.gpu_hours and p.period == "term" for p in policies.values()):
            errors.append(
                "c.GPULab.group_policies: a policy counts GPU-hours per 'term' but "
                "c.GPULab.term_start / term_end are not set"
            )
        if errors:
            raise ConfigError(errors)
        warnings = list(inventory.warnings)
        for p in profiles:
            if inventory.source == "agents":
                break  # the nodes' GPUs are known once their agents report
            if p.wants_gpu and not any(p.slice.matches(s) for s in inventory.slices):
                warnings.append(
                    f"profile {p.slug!r} asks for {p.slice.describe()}, which no GPU in this "
                    f"inventory ({inventory.source}) provides: users will see it greyed out"
                )
        return Lab(
            inventory=inventory,
            profiles=profiles,
            policies=policies,
            default_policy=default_policy,
            node=self.node_name,
            warnings=tuple(warnings),
            tz=tz,
            term=term,
            schedule=schedule,
        )


def load_config_file(path: str | os.PathLike) -> Config:
    """Load a ``jupyterhub_config.py`` the way JupyterHub does (``c = get_config()``), without
    starting anything. Raises ``FileNotFoundError`` for a missing file."""
    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no config file at {path}")
    loader = PyFileConfigLoader(path.name, str(path.parent))
    return loader.load_config()

"""The labs of the term, as an admin configures them: ``c.GPULab`` traits loaded by the product's
own :meth:`~jupyterhub_gpulab.lab.config.GPULab.load` and run by its
:class:`~jupyterhub_gpulab.spawner.runtime.LabRuntime` (the hub's ledger and inventory sync),
and each lab section as the course record an instructor writes (``courses.model``).

The labs, on the same demand (``semester.py`` runs every one):

- ``static``: plain JupyterHub, one whole GPU per server, Zero to JupyterHub's idle culler
  (``cull.timeout`` 3600 s, ``cull.every`` 600 s);
- ``plain``: plain JupyterHub on gpulab's layout (the MIG slices a device plugin would offer:
  students a ``1g.10gb``, researchers a whole GPU), ``jupyterhub-idle-culler``'s own defaults
  (``--timeout`` 600 s, ``--cull-every`` 300 s);
- ``today``: gpulab without courses: entitlement, GPU-hour budget, image needs, the claim, the
  GPU-aware culler (the service's pass and defaults);
- ``gpulab``: as ``today`` plus every section's reservation, the waitlist, and researchers'
  priority with preemption on (``c.GPULabService.preemption = True``);
- the levers of issue 22 item 3b, each ``gpulab`` with one more setting (``semester.py``'s
  ``levers`` compares each with ``gpulab``): ``fairshare``, the waitlist's fair share
  (``c.GPULab.fairshare_half_life`` :data:`FAIRSHARE_HALF_LIFE`); ``session``, a maximum session
  length on the research profile (its ``max_age``, :data:`RESEARCH_MAX_SESSION`; the culler warns
  ``cull_warn_before`` ahead, then stops the server);
- the levers of issue 22 items 2 and 3 (:mod:`.levers` acts them out): ``keep``, a warned user
  at the keyboard clicks Keep (the service's ``keep_server``, ``keeps_per_day`` of their group,
  the product's default 2); ``cpu``, they move to the CPU profile (``move_to_cpu``); ``spare``,
  the culler spares a GPU-idle server whose user was active within :data:`SPARE` while a slice
  of its kind is free and nobody queues for one (``c.GPULabService.gpu_idle_spare_active``,
  :mod:`jupyterhub_gpulab.fairuse.spare`); ``signal``, the spare with the JupyterLab
  extension's interaction report (``jupyterhub_gpulab.service.presence``): at the keyboard is
  a keystroke in the last :data:`SPARE` minutes, not an open tab;
  ``mig-research``, a researcher refused a whole GPU takes a ``3g.40gb`` instance (profile
  ``research-mig``), which exists outside class time because :data:`SCHEDULE` re-lays the first
  ``--layout-gpus`` MIG GPUs ``2x3g.40gb`` (the class layout has no 3g instance: 3c needs a
  layout that has one); ``layout``, the same schedule with the research layout ``1x7g.80gb``
  (a whole H100 as one instance, taken through ``research-mig`` on ``7g.80gb``); ``all``, every
  lever at once (fair share, session, the spare on the interaction report, keep then CPU when
  the allowance is spent, the ``2x3g.40gb`` schedule).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta, timezone

from jupyterhub_gpulab.courses.model import DAYS
from jupyterhub_gpulab.courses.parse import parse_course
from jupyterhub_gpulab.lab.config import GPULab
from jupyterhub_gpulab.lab.images import LABEL_CUDA, LABEL_MIN_CC, LABEL_MIN_DRIVER

from .demand import TERM_START

IMG = "quay.io/jupyter/pytorch-notebook:cuda12-2026-11-30"
#: the image's gpulab labels (``image_labels`` in :data:`.data.INPUTS`)
IMAGE_LABELS = {LABEL_CUDA: "12", LABEL_MIN_DRIVER: "525.60.13", LABEL_MIN_CC: "5.0"}
#: a booking's lead, grace (minutes) and seats; ``--lead``/``--seats`` change them
BOOKING = {"lead": 60, "grace": 10, "seats": 12}
NODE = "gpu-host"
#: the levers' settings (seconds); ``--half-life-days`` / ``--research-max-hours`` change them
FAIRSHARE_HALF_LIFE = {"s": 7 * 86400}
RESEARCH_MAX_SESSION = {"s": 4 * 3600}
#: ``c.GPULabService.gpu_idle_spare_active`` in the ``spare`` and ``all`` labs (seconds;
#: ``--spare-minutes`` changes it): "active in the last 5 minutes", the hub's refresh
#: (``hubsim``: every 5 min, ``JupyterHub.last_activity_interval``); ``gpu_idle_spare_longest``
#: the product's default 1 h unless ``--spare-longest-minutes`` sets it
SPARE = {"s": 5 * 60, "longest": 3600}
#: the MIG layout schedule's settings: how many MIG GPUs it covers (``--layout-gpus``), its drain
#: lead; class time is the booked sections (``follow_bookings``), no fixed class window
SCHEDULE = {"gpus": 1, "drain_lead": "30m"}

PROFILES = [
    {"slug": "student-1g", "display_name": "PyTorch (1g.10gb)", "image": IMG,
     "slice": {"kind": "mig", "mig_profile": "1g.10gb"}, "idle_timeout": 3600,
     "gpu_idle_timeout": 20 * 60, "max_age": 8 * 3600},
    {"slug": "research-gpu", "display_name": "PyTorch (full H100)", "image": IMG,
     "slice": {"kind": "gpu"}, "idle_timeout": 7200, "gpu_idle_timeout": 30 * 60,
     "max_age": 72 * 3600},
    {"slug": "static-gpu", "display_name": "Whole GPU (static lab)", "image": IMG,
     "slice": {"kind": "gpu"}},
    {"slug": "cpu", "display_name": "CPU only (Move to CPU)", "image": IMG, "slice": None,
     "default": True},
]  # fmt: skip
#: the research profile on a MIG instance (``mig-research``, ``layout``, ``all``); its
#: ``mig_profile`` is the lab's ``research_mig``
RESEARCH_MIG = {
    "slug": "research-mig",
    "display_name": "PyTorch (MIG instance)",
    "image": IMG,
    "idle_timeout": 7200,
    "gpu_idle_timeout": 30 * 60,
    "max_age": 72 * 3600,
}


@dataclass(frozen=True)
class LabSpec:
    """One lab: ``key`` (JSON), ``name``, ``stock`` (plain JupyterHub: ``(timeout_s,
    cull_every_s)`` of its idle culler, else ``None``: gpulab's service culls), ``whole``
    (every GPU whole), and gpulab's levers."""

    key: str
    name: str
    stock: tuple[int, int] | None
    whole: bool = False
    reservations: bool = False
    waitlist: bool = False
    priority: bool = False
    fairshare: bool = False
    max_session: bool = False
    keep: bool = False
    cpu: bool = False
    #: the culler spares a GPU-idle user at the keyboard while nobody needs the slice
    #: (``c.GPULabService.gpu_idle_spare_active`` :data:`SPARE`)
    spare: bool = False
    #: every server's JupyterLab extension reports its user's last interaction
    #: (``service.presence``), so the spare asks the keyboard, not the hub's view of the tab
    signal: bool = False
    #: the research layout the schedule re-lays to outside class (``None``: no schedule); the
    #: ``research-mig`` profile takes its instances
    research_layout: str | None = None

    def profile_for(self, kind: str) -> str:
        if self.whole:
            return "static-gpu"
        return "research-gpu" if kind == "research" else "student-1g"

    @property
    def research_mig(self) -> str | None:
        """The MIG profile of the research layout (``"3g.40gb"``), or ``None``."""
        return self.research_layout.split("x", 1)[1] if self.research_layout else None


LABS = (
    LabSpec("static", "static whole GPUs, Zero to JupyterHub's idle culler", (3600, 600), True),
    LabSpec("plain", "plain JupyterHub on the same slices, stock idle culler", (600, 300)),
    LabSpec("today", "gpulab: slices, budgets, GPU-aware culler", None),
    LabSpec("gpulab", "gpulab + reservations + waitlist + priority", None, False, True, True,
            True),
    LabSpec("fairshare", "gpulab + fair share among researchers", None, False, True, True,
            True, fairshare=True),
    LabSpec("session", "gpulab + a maximum research session", None, False, True, True, True,
            max_session=True),
    LabSpec("keep", "gpulab + Keep at a warning", None, False, True, True, True, keep=True),
    LabSpec("cpu", "gpulab + Move to CPU at a warning", None, False, True, True, True,
            cpu=True),
    LabSpec("spare", "gpulab + GPU idle spared at the keyboard while a slice is free", None,
            False, True, True, True, spare=True),
    LabSpec("signal", "gpulab + the spare on JupyterLab's interaction report", None, False,
            True, True, True, spare=True, signal=True),
    LabSpec("mig-research", "gpulab + research on 3g.40gb (schedule 2x3g.40gb)", None, False,
            True, True, True, research_layout="2x3g.40gb"),
    LabSpec("layout", "gpulab + layout schedule (1x7g.80gb for research)", None, False, True,
            True, True, research_layout="1x7g.80gb"),
    LabSpec("all", "gpulab + every lever", None, False, True, True, True, fairshare=True,
            max_session=True, keep=True, cpu=True, spare=True, signal=True,
            research_layout="2x3g.40gb"),
)  # fmt: skip
#: lever → the lab that turns it on (off: ``gpulab``)
LEVERS = {"fairshare": "fairshare", "research_max_session": "session", "keep": "keep",
          "move_to_cpu": "cpu", "gpu_idle_spare": "spare",
          "interaction_signal": "signal", "mig_research": "mig-research",
          "layout_schedule": "layout", "all": "all"}  # fmt: skip


def _h100(i: int, mig: bool) -> dict:
    d = {"uuid": f"GPU-{i:08d}-0000-4000-8000-0000000000{i:02d}", "index": i,
         "name": "NVIDIA H100 80GB HBM3", "memory": "80GiB", "compute_capability": "9.0",
         "driver_version": "570.86.15"}  # fmt: skip
    if mig:
        d["mig"] = [
            {"uuid": f"MIG-{i:08d}-{j:04d}-4000-8000-000000000000", "profile": "1g.10gb"}
            for j in range(7)
        ]
    return d


def inventory(spec: LabSpec, mig_gpus: int, research_gpus: int) -> list[dict]:
    n = mig_gpus + research_gpus
    return [_h100(i, not spec.whole and i < mig_gpus) for i in range(n)]


def group_policies(spec: LabSpec) -> dict:
    if spec.stock is not None:  # plain JupyterHub: a profile list per group, nothing else
        return {
            "students": {"profiles": ["student-1g", "static-gpu"]},
            "researchers": {"profiles": ["research-gpu", "static-gpu"]},
        }
    research = ["research-gpu", "cpu"] + (["research-mig"] if spec.research_mig else [])
    return {
        "students": {
            "profiles": ["student-1g", "cpu"], "max_slices_per_user": 1,
            "gpu_hours": 4, "period": "week", "preemptible": spec.priority,
        },
        "researchers": {
            "profiles": research, "max_slices_per_user": 1,
            "priority": 10 if spec.priority else 0,
        },
    }  # fmt: skip


def mig_schedule(spec: LabSpec, mig_gpus: int) -> list[dict]:
    """``c.GPULab.mig_schedule``: the first ``SCHEDULE["gpus"]`` MIG GPUs in the class layout
    during booked sections (their seats' lead included) and ``spec.research_layout`` outside."""
    if not spec.research_layout:
        return []
    uuids = [_h100(i, True)["uuid"] for i in range(min(SCHEDULE["gpus"], mig_gpus))]
    if not uuids:  # --layout-gpus 0: research-mig only where a layout has 3g instances
        return []
    return [{"gpus": uuids, "class_layout": "7x1g.10gb",
             "research_layout": spec.research_layout, "class_windows": [],
             "follow_bookings": True, "drain_lead": SCHEDULE["drain_lead"]}]  # fmt: skip


def gpulab_config(spec: LabSpec, db_url: str, mig_gpus: int, research_gpus: int) -> GPULab:
    """The lab's ``c.GPULab`` (declared inventory: the simulated H100s)."""
    profiles = [dict(p) for p in PROFILES]
    if spec.research_mig:
        profiles.append(
            {**RESEARCH_MIG, "slice": {"kind": "mig", "mig_profile": spec.research_mig}}
        )
    if spec.max_session:
        for p in profiles:
            if p["slug"] == "research-gpu":
                p["max_age"] = RESEARCH_MAX_SESSION["s"]
    return GPULab(
        db_url=db_url, node_name=NODE, inventory_source="declared",
        inventory=inventory(spec, mig_gpus, research_gpus), profiles=profiles,
        group_policies=group_policies(spec), lab_name=spec.key,
        fairshare_half_life=FAIRSHARE_HALF_LIFE["s"] if spec.fairshare else 0,
        mig_schedule=mig_schedule(spec, mig_gpus),
    )  # fmt: skip


def section_course(group: str, day: int, hour: int, weeks: int):
    """A lab section as the course record an instructor writes: ``BOOKING["seats"]`` seats of
    the student profile kept from ``BOOKING["lead"]`` minutes before each 2-hour session,
    released ``BOOKING["grace"]`` minutes in; no pre-start (its students start their own
    course servers, the named server ``<section>``, when they arrive)."""
    first = TERM_START.date() + timedelta(days=day)
    return parse_course(
        {
            "slug": group, "profiles": ["student-1g"], "prestart": False,
            "reserve": BOOKING["seats"], "reserve_lead_minutes": BOOKING["lead"],
            "grace_minutes": BOOKING["grace"],
            "sessions": {"weekly": [{
                "days": [DAYS[day]], "start": f"{hour:02d}:00", "end": f"{hour + 2:02d}:00",
                "from": first.isoformat(),
                "until": (first + timedelta(weeks=weeks - 1)).isoformat(),
            }]},
        }
    )  # fmt: skip


UTC = timezone.utc

"""Shared by the MIG layout tests (``gpulab mig-layout``, the service's layout pass, bookings on
a scheduled GPU): the ledger must match what the fake NVML holds after every change; a stand-in
hub that records stops; the service's lab config with a weekday class schedule."""

from __future__ import annotations

from traitlets.config import Config

from jupyterhub_gpulab.hubapi.stopper import ServerStopper
from jupyterhub_gpulab.inventory import discover
from jupyterhub_gpulab.lab.config import GPULab

CLASS, RESEARCH = "7x1g.10gb", "2x3g.40gb"


class RecordingHub:
    """Stands in for the hub's REST API: every stop succeeds at once and is recorded."""

    def __init__(self):
        self.stops: list[tuple[str, str]] = []
        self.stopper = ServerStopper(self)

    async def stop(self, user: str, name: str = "") -> bool:
        self.stops.append((user, name))
        return True

    async def wait_stopped(self, user: str, name: str = "", timeout: float = 120) -> bool:
        return True


def scheduled_gpulab(db: str, **schedule) -> GPULab:
    """The service's config: NVML on node ``gpu1``, Berlin time, the class layout on weekdays
    08:00–18:00 with a 30-minute drain lead, the research layout otherwise (``schedule``
    overrides keys of the entry)."""
    c = Config()
    c.GPULab.db_url = db
    c.GPULab.node_name = "gpu1"
    c.GPULab.inventory_source = "nvml"
    c.GPULab.quota_timezone = "Europe/Berlin"
    c.GPULab.profiles = [{"slug": "cpu", "display_name": "CPU", "image": "x"}]
    c.GPULab.mig_schedule = {
        "class_layout": CLASS,
        "research_layout": RESEARCH,
        "class_windows": [{"days": ["mon", "tue", "wed", "thu", "fri"],
                           "start": "08:00", "end": "18:00"}],
        "drain_lead": "30m",
        **schedule,
    }  # fmt: skip
    return GPULab(config=c)


def ledger_matches_nvml(ledger, nvml, uuid, node: str = "gpu1") -> list[str]:
    """The ledger's slices in service on ``uuid`` are exactly NVML's MIG devices, and no open
    allocation sits on a slice that is gone; returns their profiles, sorted."""
    nvml_side = {(s.id, s.mig_profile) for s in discover(node=node, nvml=nvml).slices
                 if s.device_uuid == uuid}  # fmt: skip
    rows = [s for s in ledger.slices() if s["device_uuid"] == uuid]
    assert {(s["id"], s["mig_profile"]) for s in rows if s["present"]} == nvml_side
    gone = {s["id"] for s in rows if not s["present"]}
    assert not [a for a in ledger.open_allocations() if a.slice_id in gone]
    return sorted(p for _, p in nvml_side)

"""Shared by the MIG layout tests (``gpulab mig-layout`` and the service's layout pass): the
ledger must match what the fake NVML holds after every change."""

from __future__ import annotations

from jupyterhub_gpulab.inventory import discover


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

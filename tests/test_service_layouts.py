"""The service's MIG layout pass (issue 22, lever 3a) against the fake NVML and a real SQLite
ledger: an H100 follows the timetable (research layout at night, class layout from 30 minutes
before the weekday class window), holders of research instances are warned and then stopped,
the service's own inventory shows the new instances without anyone pressing "Re-read
inventory", and a service killed mid-change is finished by the next one.

The hub is the one stand-in: :class:`RecordingHub` answers the stop requests (a real hub's stop
is the culler's, tested in test_service_culling_e2e.py through the same stopper)."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest
from fake_nvml import FakeNVML
from miglayout_support import RecordingHub, ledger_matches_nvml, scheduled_gpulab

from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.ledger import Ledger
from jupyterhub_gpulab.ledger.models import NoFreeSlice
from jupyterhub_gpulab.service.layouts import END_REASON, RULE, LayoutKeeper, LayoutTraits
from jupyterhub_gpulab.service.state import LabState

pytestmark = pytest.mark.unit

BERLIN = ZoneInfo("Europe/Berlin")
SMALL = SliceRequest(kind=SliceKind.MIG, mig_profile="1g.10gb")
BIG = SliceRequest(kind=SliceKind.MIG, mig_profile="3g.40gb")


def local(hh: int, mm: int = 0) -> datetime:
    """Monday 7 December 2026 in Berlin, as aware UTC."""
    return datetime(2026, 12, 7, hh, mm, tzinfo=BERLIN).astimezone(timezone.utc)


@pytest.fixture
def clock_start():
    return local(7, 0)


class Lab:
    """One H100 in MIG mode (7 × 1g.10gb at first), a ledger and a service's state on them."""

    def __init__(self, tmp_path, **schedule):
        self.db = f"sqlite:///{tmp_path / 'gpulab.sqlite'}"
        self.nvml = FakeNVML.h100_mig_lab(1)
        self.uuid = self.nvml.gpus[0].uuid
        self.ledger = Ledger(self.db, auto_upgrade=True)
        self.hub = RecordingHub()
        self.schedule = schedule
        self.start_service()

    def start_service(self):
        """A (new) service: its state reads NVML and syncs the ledger, as at start."""
        self.state = LabState(
            scheduled_gpulab(self.db, **self.schedule), self.ledger, nvml=self.nvml
        )
        self.state.sync()
        self.keeper = LayoutKeeper(self.state, self.hub, LayoutTraits())

    async def step(self):
        (done,) = await self.keeper.run_pass()
        return done

    def device(self):
        return next(d for d in self.ledger.devices() if d["uuid"] == self.uuid)

    def service_profiles(self):
        """The MIG profiles the service's own inventory offers (its pages, its culler)."""
        return sorted(s.mig_profile for s in self.state.inventory.slices)


@pytest.fixture
def lab(tmp_path):
    lab = Lab(tmp_path)
    yield lab
    lab.ledger.close()


async def test_a_gpu_follows_the_timetable_and_its_holders_are_warned_then_stopped(lab, at):
    # 07:00, an empty class layout outside class time: re-laid for research at once
    done = await lab.step()
    assert done.relaid == 0 and done.decision.next_change_at == local(7, 30)
    assert ledger_matches_nvml(lab.ledger, lab.nvml, lab.uuid) == ["3g.40gb"] * 2
    assert lab.service_profiles() == ["3g.40gb"] * 2  # no manual "Re-read inventory"
    assert not lab.device()["drained"]
    held = lab.ledger.claim(BIG, user="rita", profile="research", server_name="train")

    at.now = local(7, 35)  # in the drain lead: drained, Rita warned with the time
    done = await lab.step()
    assert done.drained and done.warned == ["rita/train"] and done.relaid is None
    assert lab.device()["drained"] and "MIG re-layout to 7x1g.10gb" in lab.device()["drain_reason"]
    (w,) = lab.ledger.warnings("rita")
    assert w.rule == RULE and w.due_at == local(8, 0)
    assert "stop the server before 08:00 CET" in w.message
    with pytest.raises(NoFreeSlice):  # nothing new lands on it meanwhile
        lab.ledger.claim(BIG, user="rob", profile="research")

    at.now = local(8, 0)  # class starts: Rita's server is stopped and she is told why
    done = await lab.step()
    assert done.stopped == ["rita/train"] and lab.hub.stops == [("rita", "train")]
    assert lab.ledger.get(held.allocation.id).end_reason == END_REASON
    assert [w.rule for w in lab.ledger.warnings("rita")] == [END_REASON]

    at.now = local(8, 1)  # empty now: the class layout, in service
    done = await lab.step()
    assert done.relaid == 0 and done.decision.phase == "class"
    assert ledger_matches_nvml(lab.ledger, lab.nvml, lab.uuid) == ["1g.10gb"] * 7
    assert lab.service_profiles() == ["1g.10gb"] * 7 and not lab.device()["drained"]
    assert lab.ledger.claim(SMALL, user="sam", profile="class").slice.mig_profile == "1g.10gb"

    at.now = local(12, 0)  # in class, as it should be: nothing to do
    done = await lab.step()
    assert not (done.drained or done.warned or done.stopped) and done.relaid is None


async def test_a_service_killed_mid_change_is_finished_by_the_next_service(lab, at):
    lab.nvml.fail_next("nvmlDeviceCreateGpuInstanceWithPlacement", KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):  # the service dies after destroying the class layout
        await lab.keeper.run_pass()
    assert lab.device()["drained"]  # between layouts: nothing lands on it
    lab.start_service()  # the hub restarts it; its first sync sees the half-laid GPU
    ledger_matches_nvml(lab.ledger, lab.nvml, lab.uuid)
    done = await lab.step()
    assert done.relaid == 0
    assert ledger_matches_nvml(lab.ledger, lab.nvml, lab.uuid) == ["3g.40gb"] * 2
    assert not lab.device()["drained"] and not lab.nvml.gpus[0].empty_gis


async def test_a_process_nvml_reports_in_use_keeps_the_layout_until_it_ends(lab, at):
    busy = lab.nvml.gpus[0].migs[2]
    lab.nvml.start_process(busy.uuid, 4242)  # a process the ledger does not know of
    done = await lab.step()
    assert done.relaid == 1  # refused at the busy instance, which stays
    assert busy in lab.nvml.gpus[0].migs
    assert set(ledger_matches_nvml(lab.ledger, lab.nvml, lab.uuid)) == {"1g.10gb"}
    busy.pids.clear()
    assert (await lab.step()).relaid == 0
    assert ledger_matches_nvml(lab.ledger, lab.nvml, lab.uuid) == ["3g.40gb"] * 2


async def test_a_gpu_an_admin_drained_is_left_alone(lab, at):
    lab.ledger.set_drained(lab.uuid, True, "fan noise")
    done = await lab.step()
    assert done.relaid is None and done.decision.relay_due
    assert ledger_matches_nvml(lab.ledger, lab.nvml, lab.uuid) == ["1g.10gb"] * 7
    assert lab.device()["drain_reason"] == "fan noise"


async def test_a_schedule_for_other_gpus_changes_nothing(tmp_path, at):
    lab = Lab(tmp_path, gpus=["GPU-someone-else"])
    try:
        assert await lab.keeper.run_pass() == []
        assert len(lab.nvml.gpus[0].migs) == 7
    finally:
        lab.ledger.close()

"""The culler's GPU-idle clock is kept in the ledger (migration 0009), so a restarted gpulab
service continues it instead of starting it over (engine-free: SQLite and the culler's rules;
the service's own restart is in test_service_culling.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import sqlalchemy as sa
from ledger_support import lab_inventory

from jupyterhub_gpulab.fairuse.culler import Limits, Server, Settings, gpu_idle_since
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.inventory.model import Utilization
from jupyterhub_gpulab.ledger import Ledger, db

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)


def _server(kept):
    restarted = T0 + timedelta(minutes=15)  # the service came back; its history is empty
    samples = [Utilization(0.0, 2**30, at=restarted + timedelta(seconds=10 * i)) for i in range(6)]
    return Server(
        user="ann", name="", profile="seat", started_at=T0,
        limits=Limits(gpu_idle_timeout=20 * 60), has_gpu=True, samples=samples,
        idle_since_kept=kept,
    ), samples[-1].at  # fmt: skip


def test_a_kept_clock_continues_after_a_restart():
    server, now = _server(T0 + timedelta(minutes=1))
    assert gpu_idle_since(server, now, Settings(threshold_percent=5.0)) == T0 + timedelta(minutes=1)


def test_a_kept_clock_from_before_the_servers_start_is_ignored():
    server, now = _server(T0 - timedelta(hours=1))  # another server's, on a reused id
    assert gpu_idle_since(server, now, Settings(threshold_percent=5.0)) == T0 + timedelta(
        minutes=15
    )


def test_migration_0009_adds_the_clocks_and_goes_back(tmp_path):
    from alembic import command

    url = f"sqlite:///{tmp_path / 'clocks.sqlite'}"
    engine = db.make_engine(url)
    db.upgrade(engine, "0008")
    assert "gpu_idle_clocks" not in sa.inspect(engine).get_table_names()
    db.upgrade(engine)
    engine.dispose()
    led = Ledger(url)
    led.sync_inventory(lab_inventory())
    held = led.claim(SliceRequest(kind=SliceKind.GPU), user="a", profile="p").allocation
    led.set_idle_clocks({held.id: T0})
    assert led.idle_clocks() == {held.id: T0}
    led.set_idle_clocks({})  # busy again: the clock goes
    assert led.idle_clocks() == {}
    led.close()
    engine = db.make_engine(url)
    command.downgrade(db.alembic_config(engine), "0008")
    assert db.current_revision(engine) == "0008"
    assert "gpu_idle_clocks" not in sa.inspect(engine).get_table_names()
    db.upgrade(engine)
    assert "gpu_idle_clocks" in sa.inspect(engine).get_table_names()
    engine.dispose()

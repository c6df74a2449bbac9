"""The database keeps ``slices.held_by`` (the mirror the claim's search walks) in step with the open
allocations, on SQLite and PostgreSQL (migration 0011): an open allocation marks its slice held,
closing it frees the slice, whatever statement does it; the admin page's holder column and the
next claim's search read that mark. And the claim's counts of open allocations by group and by
booking still walk their partial indexes, which now leave out rows with neither.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from ledger_support import backends, lab_inventory, lab_url, seats_lab

from jupyterhub_gpulab import clock
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.ledger import Ledger, NoFreeSlice, db
from jupyterhub_gpulab.ledger.queries import open_count
from jupyterhub_gpulab.ledger.schema import allocations

SEAT = SliceRequest(kind=SliceKind.SHARED)
ONE_SEAT = seats_lab(1, seats=1, memory_per_seat="4GiB")


@pytest.fixture(params=backends())
def ledger(request, tmp_path):
    led = Ledger(lab_url(request.param, tmp_path, ONE_SEAT))
    yield led
    led.close()


def held(ledger: Ledger) -> dict[str, int | None]:
    return {s["id"]: s["held_by"] for s in ledger.slices()}


def test_a_claim_marks_its_slice_held_and_its_release_frees_it_for_the_next(ledger):
    first = ledger.claim(SEAT, user="ann", profile="p")
    assert held(ledger) == {first.slice.id: first.allocation.id}
    with pytest.raises(NoFreeSlice):  # the search sees the one seat held
        ledger.claim(SEAT, user="bob", profile="p")
    assert ledger.release(first.allocation.id, "stopped")
    assert held(ledger) == {first.slice.id: None}
    again = ledger.claim(SEAT, user="bob", profile="p")
    assert again.slice.id == first.slice.id
    assert held(ledger) == {first.slice.id: again.allocation.id}
    assert ledger.double_allocations() == []


def test_closing_an_allocation_by_any_statement_frees_its_slice(ledger):
    got = ledger.claim(SEAT, user="ann", profile="p")
    with ledger.engine.begin() as conn:  # not through Ledger.release: an admin's SQL, a script
        conn.execute(
            allocations.update()
            .where(allocations.c.id == got.allocation.id)
            .values(ended_at=clock.utcnow(), end_reason="admin")
        )
    assert held(ledger) == {got.slice.id: None}
    assert ledger.claim(SEAT, user="bob", profile="p").slice.id == got.slice.id


def test_an_open_allocation_inserted_by_hand_marks_its_slice_and_a_second_is_refused(ledger):
    (sid,) = held(ledger)
    row = {
        "slice_id": sid, "user": "ann", "server_name": "", "profile": "p", "node": "local",
        "share": 1.0, "started_at": clock.utcnow(),
    }  # fmt: skip
    with ledger.engine.begin() as conn:
        aid = conn.execute(allocations.insert().returning(allocations.c.id), row).scalar_one()
    assert held(ledger) == {sid: aid}
    with pytest.raises(sa.exc.IntegrityError), ledger.engine.begin() as conn:
        conn.execute(allocations.insert(), dict(row, user="mallory"))
    assert held(ledger) == {sid: aid}


def test_the_claims_counts_by_group_and_booking_walk_their_partial_indexes(tmp_path):
    led = Ledger(lab_url("sqlite", tmp_path, ONE_SEAT))
    try:
        with led.engine.connect() as conn:
            for column, index in (
                (allocations.c.charge_group, "ix_allocations_open_group"),
                (allocations.c.booking_id, "ix_allocations_open_booking"),
                (allocations.c.user, "ix_allocations_open_user"),
            ):
                q = sa.select(open_count(column, sa.bindparam("v")))
                sql = str(q.compile(led.engine, compile_kwargs={"literal_binds": False}))
                plan = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", ("x",)).all()
                assert index in " ".join(str(r[-1]) for r in plan), (column.name, plan)
    finally:
        led.close()


def test_migration_0011_keeps_the_open_slices_held_and_goes_back(tmp_path):
    from alembic import command

    url = f"sqlite:///{tmp_path / 'm.sqlite'}"
    led = Ledger(url)
    led.sync_inventory(lab_inventory(ONE_SEAT))
    led.close()
    engine = db.make_engine(url)
    command.downgrade(db.alembic_config(engine), "0010")
    with engine.begin() as conn:
        triggers = conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type='trigger'")
        assert triggers.all() == []
        # a lab at 0010 with one open allocation, its mirror written as the ledger of then did
        (sid,) = conn.exec_driver_sql("SELECT id FROM slices").scalars().all()
        aid = conn.execute(
            allocations.insert().returning(allocations.c.id),
            {"slice_id": sid, "user": "ann", "server_name": "", "profile": "p",
             "node": "local", "share": 1.0, "started_at": clock.utcnow()},
        ).scalar_one()  # fmt: skip
        conn.exec_driver_sql("UPDATE slices SET held_by = ?", (aid,))
    db.upgrade(engine)
    engine.dispose()
    led = Ledger(url)
    try:
        assert held(led) == {sid: aid}
        with pytest.raises(NoFreeSlice):
            led.claim(SEAT, user="bob", profile="p")
        assert led.release(aid, "stopped")
        assert led.claim(SEAT, user="bob", profile="p").slice.id == sid
    finally:
        led.close()

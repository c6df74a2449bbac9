"""The SQLite engine under the ledger: its WAL is checkpointed off the claim path, and a thread's
transactions keep one connection (and so its page cache)."""

from __future__ import annotations

import os
import sqlite3

import pytest
import sqlalchemy as sa
from ledger_support import lab_inventory

from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.ledger import Ledger, db

SEAT = SliceRequest(kind=SliceKind.SHARED)


def test_the_checkpointer_moves_the_wal_into_the_database(tmp_path):
    path = tmp_path / "c.sqlite"
    engine = db.make_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (x TEXT)")
        conn.exec_driver_sql("INSERT INTO t VALUES (?)", [("x" * 500,) for _ in range(200)])
    before = os.path.getsize(path)
    checkpointer = db.Checkpointer(engine)
    busy, frames, done = checkpointer.checkpoint()
    checkpointer.stop()
    assert (busy, done) == (0, frames) and frames > 0
    assert os.path.getsize(path) > before
    with engine.connect() as conn:  # the engine is still usable, the rows all there
        assert conn.exec_driver_sql("SELECT count(*) FROM t").scalar_one() == 200
    engine.dispose()


def test_a_storm_of_claims_meets_a_checkpoint_only_in_a_pause_or_after_the_longest_wait(tmp_path):
    """A checkpoint syncs the files, and a claim committing meanwhile waits on the disk: the
    checkpointer waits for this process's claims to pause, and a storm that never pauses gets
    one every ``max_wait_s``, not one a second."""
    ledger = Ledger(f"sqlite:///{tmp_path / 'q.sqlite'}")
    ledger.sync_inventory(lab_inventory())
    cp = ledger._checkpointer
    try:
        cp._checkpoint_now()  # what the inventory sync wrote is moved; nothing pending
        assert not cp.due(cp._checkpointed_at + cp.quiet_s)
        c = ledger.claim(SEAT, user="ann", profile="p")
        wrote = cp._wrote_at
        assert not cp.due(wrote + cp.quiet_s / 2), "checkpointed in the middle of the claims"
        assert cp.due(wrote + cp.quiet_s), "the claims paused, but their writes stay in the WAL"
        cp._checkpointed_at -= cp.max_wait_s  # the storm has gone on for max_wait_s
        assert cp.due(wrote + cp.quiet_s / 2), "a storm that never pauses is never checkpointed"
        assert ledger.release(c.allocation.id, "stopped")
    finally:
        ledger.close()


def test_one_thread_keeps_its_connection_after_another_was_opened(tmp_path):
    engine = db.make_engine(f"sqlite:///{tmp_path / 'p.sqlite'}")
    first, second = engine.connect(), engine.connect()  # two pooled, as with the checkpointer
    first.close()
    second.close()
    used = []
    for _ in range(4):
        with engine.begin() as conn:
            conn.exec_driver_sql("SELECT 1")
            used.append(id(conn.connection.dbapi_connection))
    assert len(set(used)) == 1
    engine.dispose()


def test_claims_and_releases_reuse_the_connection_the_checkpointer_shared(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    ledger.sync_inventory(lab_inventory())
    used = []

    @sa.event.listens_for(ledger.engine, "begin")
    def _begin(conn):
        used.append(id(conn.connection.dbapi_connection))

    held = ledger.engine.connect()  # a second connection in the pool, as a checkpoint makes
    ledger._checkpointer.checkpoint()
    held.close()
    for i in range(3):
        c = ledger.claim(SEAT, user=f"u{i}", profile="p")
        assert ledger.release(c.allocation.id, "stopped")
    assert len(set(used)) == 1
    ledger.close()


def test_the_checkpointer_never_takes_a_connection_from_the_claims_pool(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'k.sqlite'}")
    ledger.sync_inventory(lab_inventory())
    checkouts = []
    sa.event.listen(ledger.engine, "checkout", lambda *args: checkouts.append(args[0]))
    with ledger.engine.connect():  # a claim in flight holds the pool's one connection
        c = ledger.claim(SEAT, user="u0", profile="p")  # another claim, its own connection
        ledger.release(c.allocation.id, "stopped")
        checkouts.clear()
        for _ in range(3):
            busy, frames, done = ledger._checkpointer.checkpoint()
            assert busy == 0 and done == frames
    assert checkouts == [], "the checkpointer borrowed a pooled connection"
    assert ledger.engine.pool.checkedin() == 2  # the two claims' connections, no third
    ledger.close()


def other_writer(path):
    """A second process's connection: it fails at once instead of waiting for the lock."""
    return sqlite3.connect(path, timeout=0, isolation_level=None)


def test_a_write_transaction_holds_the_write_lock_from_its_begin(tmp_path):
    path = tmp_path / "w.sqlite"
    ledger = Ledger(f"sqlite:///{path}")
    other = other_writer(path)
    # nothing written yet: BEGIN IMMEDIATE took the lock up front
    with ledger._write(), pytest.raises(sqlite3.OperationalError, match="locked"):
        other.execute("BEGIN IMMEDIATE")
    other.execute("BEGIN IMMEDIATE")  # committed: the lock is free again
    other.execute("ROLLBACK")
    with ledger._read() as conn:  # a read takes no write lock…
        conn.exec_driver_sql("SELECT count(*) FROM slices").scalar_one()
        other.execute("BEGIN IMMEDIATE")
        other.execute(
            "INSERT INTO cull_warnings (user, server_name, rule, message, due_at,"
            " created_at) VALUES ('u', '', 'r', 'm', '2026-01-01', '2026-01-01')"
        )
        other.execute("COMMIT")
        # …and sees one snapshot: not the row committed after it began
        assert conn.exec_driver_sql("SELECT count(*) FROM cull_warnings").scalar_one() == 0
    other.close()
    ledger.close()


def test_a_home_relative_database_is_one_file_for_the_claims_and_the_checkpointer(
    tmp_path, monkeypatch
):
    """``c.GPULab.db_url = "sqlite:///~/lab/gpulab.sqlite"`` means the admin's home: the claims
    and the WAL checkpointer work on that one file, and no folder named ``~`` appears where the
    hub was started."""
    home, started_in = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    started_in.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(started_in)
    ledger = Ledger("sqlite:///~/lab/gpulab.sqlite")
    try:
        ledger.sync_inventory(lab_inventory())
        ledger.claim(SEAT, user="ann", profile="seat")
        busy, frames, done = ledger._checkpointer.checkpoint()
    finally:
        ledger.close()
    assert (busy, done) == (0, frames) and frames > 0  # it moved the claims' WAL
    with sqlite3.connect(home / "lab" / "gpulab.sqlite") as conn:
        assert conn.execute("SELECT count(*) FROM allocations").fetchone() == (1,)
    assert list(started_in.iterdir()) == []

"""The SQLite engine under the ledger: its WAL is checkpointed off the claim path."""

from __future__ import annotations

import os

from jupyterhub_gpulab.ledger import db


def test_the_checkpointer_moves_the_wal_into_the_database(tmp_path):
    path = tmp_path / "c.sqlite"
    engine = db.make_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (x TEXT)")
        conn.exec_driver_sql("INSERT INTO t VALUES (?)", [("x" * 500,) for _ in range(200)])
    before = os.path.getsize(path)
    busy, frames, done = db.Checkpointer(engine).checkpoint()
    assert (busy, done) == (0, frames) and frames > 0
    assert os.path.getsize(path) > before
    with engine.connect() as conn:  # the engine is still usable, the rows all there
        assert conn.exec_driver_sql("SELECT count(*) FROM t").scalar_one() == 200
    engine.dispose()

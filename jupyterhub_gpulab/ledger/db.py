"""Engines and schema versions for the ledger database.

SQLite (the default, a file next to the hub's database) is opened in WAL mode with a busy timeout,
and every write transaction starts with ``BEGIN IMMEDIATE`` so that two processes serialise on the
write lock up front instead of failing at commit. PostgreSQL is used by URL
(``postgresql+psycopg://user:pass@host/db``); there the claim path locks candidate rows with
``FOR UPDATE SKIP LOCKED`` and the partial unique index settles any remaining race.

The schema is managed by Alembic (``migrations/``). A fresh database is created at the newest
revision; an older one is refused with the command that upgrades it, as JupyterHub does.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from ..errors import ConfigError

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).with_name("migrations")

#: WAL size (pages of 4 KiB) at which a commit checkpoints by itself if no Checkpointer runs.
SAFETY_CHECKPOINT_PAGES = 20000

#: Seconds without a commit of this process after which the Checkpointer checkpoints its writes.
QUIET_S = 0.25
#: Seconds at most between two checkpoints, however busy the writes (:class:`Checkpointer`).
MAX_WAIT_S = 5.0

#: Option on a connection that asks for a read-only (deferred) SQLite transaction.
READ = {"gpulab_read": True}


class SchemaOutOfDate(ConfigError):
    """The database has an older schema; the message gives the upgrade command."""


def sqlite_file(url: str | sa.URL) -> str | None:
    """The file a SQLite ``url`` opens, ``~`` expanded (``sqlite:///~/gpulab.sqlite`` is in the
    home folder, as an admin means it; SQLite itself would open a folder named ``~``); ``None``
    for another database, an in-memory one or none. The one home of that path: the engine, its
    WAL checkpointer and ``gpulab check-config`` all open or check this file."""
    u = sa.make_url(url)
    if u.get_backend_name() != "sqlite" or u.database in (None, "", ":memory:"):
        return None
    return str(Path(u.database).expanduser())


def make_engine(url: str, *, busy_timeout_s: float = 30.0) -> sa.Engine:
    """Return an engine for ``url``, configured for concurrent use by several processes.

    ``busy_timeout_s`` (seconds) is how long a SQLite writer waits for the lock before failing.
    A SQLite file's folder is made when missing (:func:`sqlite_file` names the file).
    """
    u = sa.make_url(url)
    if u.get_backend_name() == "sqlite":
        database = sqlite_file(u)
        if database is not None:
            Path(database).parent.mkdir(parents=True, exist_ok=True)
            u = u.set(database=database)
        # LIFO: a thread gets back the connection it just used. SQLite drops a connection's
        # page cache whenever another connection wrote since its last transaction; with the
        # default FIFO queue the pool's two connections (the checkpointer's checkout made a
        # second until it got a connection of its own) took turns, so every claim and release
        # re-read its B-tree pages from the file:
        # 43 read(2) per claim+release at 10,000 slices, none with LIFO (benchmarks/ledger.py).
        engine = sa.create_engine(
            u,
            connect_args={"timeout": busy_timeout_s, "check_same_thread": False},
            pool_use_lifo=True,
        )

        @sa.event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn, _record):
            # Let us issue BEGIN ourselves (pysqlite's implicit BEGIN is DEFERRED).
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            # NORMAL is safe from corruption in WAL mode; a power loss may drop the last commits.
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
            cur.execute("PRAGMA foreign_keys=ON")
            # Checkpoints (the fsync that moves the WAL into the database) run on a background
            # thread (Checkpointer) instead of inside whichever commit crosses the threshold;
            # the high threshold is only a safety net should that thread not run.
            cur.execute(f"PRAGMA wal_autocheckpoint={SAFETY_CHECKPOINT_PAGES}")
            cur.close()

        @sa.event.listens_for(engine, "begin")
        def _on_begin(conn):
            # Straight to the DBAPI connection: through exec_driver_sql every transaction paid
            # a SQLAlchemy statement execution (its events, context and result) to send BEGIN.
            begin = (
                "BEGIN" if conn.get_execution_options().get("gpulab_read") else "BEGIN IMMEDIATE"
            )
            conn.connection.dbapi_connection.execute(begin).close()

        return engine
    return sa.create_engine(u, pool_pre_ping=True, pool_size=5, max_overflow=10)


def alembic_config(engine: sa.Engine | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if engine is not None:
        cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False))
        cfg.attributes["engine"] = engine
    return cfg


def head_revision() -> str:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(engine: sa.Engine) -> str | None:
    with engine.connect().execution_options(**READ) as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    """Apply migrations up to ``revision``."""
    command.upgrade(alembic_config(engine), revision)


def ensure_schema(engine: sa.Engine, *, auto_upgrade: bool = False) -> None:
    """Create a fresh database at the newest schema; refuse an older one unless ``auto_upgrade``.

    Raises :class:`SchemaOutOfDate` naming ``gpulab upgrade-db`` when the schema is behind.
    """
    current = current_revision(engine)
    head = head_revision()
    if current == head:
        return
    if current is None:
        inspector = sa.inspect(engine)
        if inspector.has_table("allocations"):
            raise SchemaOutOfDate(
                [
                    f"The ledger database at {engine.url.render_as_string(hide_password=True)} has "
                    "gpulab tables but no schema version; back it up and run `gpulab upgrade-db`."
                ]
            )
        log.info("Creating the gpulab ledger schema (revision %s)", head)
        upgrade(engine)
        return
    if auto_upgrade:
        log.warning("Upgrading the gpulab ledger schema from %s to %s", current, head)
        upgrade(engine)
        return
    raise SchemaOutOfDate(
        [
            f"The ledger database is at schema {current}, this gpulab needs {head}. Back up the "
            "database, then run `gpulab upgrade-db -f jupyterhub_config.py` "
            "(or set c.GPULab.db_auto_upgrade = True)."
        ]
    )


class Checkpointer:
    """Moves a SQLite WAL into the database on a daemon thread, between this process's writes.

    SQLite's automatic checkpoint runs inside the commit that crosses its threshold and costs that
    commit an fsync (~3 ms here, measured by ``benchmarks/ledger.py``); done here, claims and
    releases never pay it. PASSIVE checkpoints never block readers or writers, but a claim that
    commits while one syncs the files waits on the disk: at 10,000 slices the claims that overlapped
    a checkpoint every second were ~2 % of all and ~0.5 ms slower, which is the benchmark's p99.
    So it checkpoints when this process's writes pause (``quiet_s`` after its last commit), and
    while they go on (a storm of starts) only every ``max_wait_s``: a storm meets one checkpoint
    where it met five, each doing about as much syncing. ``max_wait_s`` also bounds how long
    another process's commits (a CLI, the service) wait, and how much the WAL grows; commits
    left when it stops are checkpointed then. ``interval_s``: how often the thread looks.

    It checkpoints on a connection of its own, opened on first use and never in the engine's
    pool: borrowing a pooled one took the claim's connection from it (a claim in flight made the
    pool open a second, which the LIFO pool then handed to the next claim with a cold page cache)
    and could make a claim wait for a checkout.
    """

    def __init__(
        self,
        engine: sa.Engine,
        interval_s: float = 0.1,
        *,
        quiet_s: float = QUIET_S,
        max_wait_s: float = MAX_WAIT_S,
    ):
        self.engine = engine
        self.interval_s, self.quiet_s, self.max_wait_s = interval_s, quiet_s, max_wait_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpulab-wal-checkpoint", daemon=True)
        self._conn: sqlite3.Connection | None = None
        self._conn_lock = threading.Lock()
        #: monotonic time of this process's last commit, and whether one came since the last
        #: checkpoint (set by the engine's commit event: one attribute write per commit)
        self._wrote_at = 0.0
        self._pending = False
        self._checkpointed_at = time.monotonic()
        sa.event.listen(engine, "commit", self._committed)

    def _committed(self, _conn) -> None:
        self._wrote_at = time.monotonic()
        self._pending = True

    def due(self, now: float) -> bool:
        """Whether the thread checkpoints at monotonic time ``now`` (class docstring)."""
        if now - self._checkpointed_at >= self.max_wait_s:
            return True
        return self._pending and now - self._wrote_at >= self.quiet_s

    @staticmethod
    def wanted(engine: sa.Engine) -> bool:
        return sqlite_file(engine.url) is not None

    def start(self) -> Checkpointer:
        self._thread.start()
        return self

    def checkpoint(self) -> tuple[int, int, int]:
        """One PASSIVE checkpoint: ``(busy, wal frames, frames checkpointed)``, SQLite's row.

        In autocommit mode, outside any transaction: inside the ``BEGIN IMMEDIATE`` that the
        engine's begin hook issues SQLite refuses it ("database table is locked")."""
        with self._conn_lock:
            if self._conn is None:
                # autocommit (isolation_level None); used by this thread and by callers of this
                # method, one at a time under the lock
                self._conn = sqlite3.connect(
                    sqlite_file(self.engine.url), isolation_level=None, check_same_thread=False
                )
            cur = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            busy, log_frames, done = cur.fetchone()
            cur.close()
        return busy, log_frames, done

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self.due(time.monotonic()):
                self._checkpoint_now()

    def _checkpoint_now(self) -> None:
        self._pending = False
        self._checkpointed_at = time.monotonic()
        try:
            self.checkpoint()
        except Exception:  # a locked or closed database must not kill the thread
            log.debug("WAL checkpoint failed; retrying later", exc_info=True)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if sa.event.contains(self.engine, "commit", self._committed):
            sa.event.remove(self.engine, "commit", self._committed)
        if self._pending:
            self._checkpoint_now()
        with self._conn_lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

"""The work a start and a poll cost the hub, counted where JupyterHub sees it (issue 26 item 3,
issue 21 item 6): a storm of starts queues every one of these behind the hub's one event loop.

JupyterHub's own ``User.spawn`` and ``User.stop`` run here in the test's process, on a real hub
database (``orm``), with gpulab's real spawner on the declared lab; only the Docker engine is
stood in (:class:`~enginefree_support.EngineRecorder`) and the single-user server's readiness
check is skipped. The same spawns through plain DockerSpawner (the same stand-in engine) are the
floor gpulab is measured against.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import sqlalchemy as sa
from e2e_support import LAB, PROFILES
from enginefree_support import NO_ENGINE, EngineFreeSpawner, EngineRecorder
from jupyterhub import orm, roles
from jupyterhub.oauth.provider import make_provider
from jupyterhub.objects import Hub
from jupyterhub.user import User
from traitlets.config import Config

from jupyterhub_gpulab.errors import SpawnRefused
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.ledger import aio
from jupyterhub_gpulab.spawner import runtime as runtime_module
from jupyterhub_gpulab.spawner.runtime import forget_runtimes

IMAGE = "gpulab/singleuser:engine-free"


def hub_config(tmp_path) -> Config:
    c = Config()
    c.GPULab.db_url = f"sqlite:///{tmp_path}/gpulab.sqlite"
    c.GPULab.node_name = "hubwork"
    c.GPULab.inventory_source = "declared"
    c.GPULab.inventory = LAB
    c.GPULab.profiles = [{**p, "image": IMAGE} for p in PROFILES]
    c.GPULab.group_policies = {"researchers": {"max_slices_per_user": 3}}
    c.DockerSpawner.pull_policy = "never"
    c.DockerSpawner.client_kwargs = NO_ENGINE
    c.DockerSpawner.image = IMAGE
    c.DockerSpawner.remove = True  # as gpulab requires: both sides remove a stopped container
    return c


class HubWork:
    """A hub database and its users, as JupyterHub's app sets them up for ``User.spawn``; counts
    the commits that write JupyterHub's database (``writing_commits``) and the rollbacks of its
    session (``rollbacks``)."""

    def __init__(self, tmp_path, spawner_class):
        self.tmp_path = tmp_path
        self.config = hub_config(tmp_path)
        self.engine_url = f"sqlite:///{tmp_path}/jupyterhub-{spawner_class.__name__}.sqlite"
        self.db = orm.new_session_factory(self.engine_url)()
        for role in roles.get_default_roles():
            roles.create_role(self.db, role)
        self.db.add(orm.OAuthClient(identifier="jupyterhub"))
        self.db.commit()
        self.spawner_class = spawner_class
        # the hub's OAuth provider on the same session, as JupyterHub's app makes it
        self.oauth_provider = make_provider(lambda: self.db, "/hub/api/oauth2", "/hub/login")
        self.writing_commits = 0  # commits that wrote something: a transaction and an fsync
        self.rollbacks = 0
        self._wrote = False
        sa.event.listen(self.db.get_bind(), "before_cursor_execute", self._statement)
        sa.event.listen(self.db, "after_commit", self._committed)
        sa.event.listen(self.db, "after_soft_rollback", self._rolled_back)

    def _statement(self, conn, cursor, statement, params, context, executemany):
        if statement.lstrip().split(" ", 1)[0] in ("INSERT", "UPDATE", "DELETE"):
            self._wrote = True

    def _committed(self, session):
        self.writing_commits += self._wrote
        self._wrote = False

    def _rolled_back(self, session, previous_transaction):
        self.rollbacks += 1

    def user(self, name: str, groups=()) -> User:
        orm_user = orm.User(name=name)
        self.db.add(orm_user)
        for g in groups:
            group = self.db.query(orm.Group).filter_by(name=g).one_or_none() or orm.Group(name=g)
            orm_user.groups.append(group)
        self.db.commit()
        roles.assign_default_roles(self.db, orm_user)
        settings = {
            "config": self.config,
            "hub": Hub(),
            "spawner_class": self.spawner_class,
            "base_url": "/",
            "internal_ssl": False,
            "oauth_provider": self.oauth_provider,
        }  # no "users": no continuous reconcile (it would close the test's own claims)
        user = User(orm_user, settings)

        async def up(spawner):  # no single-user server answers here
            return spawner

        user._wait_up = up
        return user

    def saved_options(self, user: User) -> dict:
        """What JupyterHub's database holds as ``user``'s next default options (a new session,
        as the hub reads it after a restart)."""
        with orm.new_session_factory(self.engine_url)() as fresh:
            return fresh.query(orm.Spawner).filter_by(user_id=user.id, name="").one().user_options


@pytest.fixture
def hubwork(tmp_path):
    made = []

    def make(spawner_class=EngineFreeSpawner) -> HubWork:
        made.append(HubWork(tmp_path, spawner_class))
        return made[-1]

    yield make
    for h in made:
        for user in list(h.db.query(orm.User)):
            for spawner in list(User(user, {"config": h.config}).spawners.values()):
                spawner.stop_polling()
        h.db.close()
    forget_runtimes()


async def other_requests_ending(db, done: asyncio.Event) -> None:
    """What every request handler of the hub does as it ends (``BaseHandler.finish``): roll back
    the session's uncommitted changes; here at each turn of the event loop while a spawn runs."""
    while not done.is_set():
        if db.dirty:
            db.rollback()
        await asyncio.sleep(0)


async def spawn_amid_other_requests(hub: HubWork, user: User, options=None):
    done = asyncio.Event()
    others = asyncio.create_task(other_requests_ending(hub.db, done))
    try:
        await user.spawn("", options=options)
    finally:
        done.set()
        await others


async def test_a_refused_choice_is_not_saved_even_when_other_requests_end_during_the_start(
    hubwork,
):
    """A researcher asks for the lab's one A40 while it is taken: refused. The request's options
    must not become her next default, though JupyterHub saved them before ``start()``: her next
    start without options runs the default profile. Cleared inside ``start()`` the clearing was
    uncommitted across the start's awaits, and another request ending rolled it back."""
    hub = hubwork()
    ann = hub.user("ann", ["researchers"])
    rt = ann.spawner.runtime()
    rt.ledger.claim(SliceRequest(kind=SliceKind.GPU), user="rita", profile="a40")
    with pytest.raises(SpawnRefused, match="No free whole GPU slice"):
        await spawn_amid_other_requests(hub, ann, {"profile": "a40"})
    assert not hub.saved_options(ann)  # nothing saved: NULL or {}
    assert hub.rollbacks == 0  # the start left nothing uncommitted for a request to roll back
    await spawn_amid_other_requests(hub, ann)  # no options: the default, not the refused A40
    assert ann.spawner.user_options == {"profile": "mig"}
    assert hub.rollbacks == 0
    await ann.stop("")


async def test_a_start_and_stop_write_the_hub_s_database_as_often_as_plain_dockerspawner(hubwork):
    """A gpulab start and stop make no more writing commits to JupyterHub's database than plain
    DockerSpawner's, a second start with the same options included: JupyterHub's save of the
    options writes nothing for a gpulab server (its copy stays empty, savedoptions.py), as it
    writes nothing for plain DockerSpawner's unchanged copy (plain DockerSpawner's first start
    writes it), and the kept last profile rides the stop's state commit. Cleared after
    JupyterHub had saved it, every start with options wrote once more: under a burst each
    writing commit is one more transaction and fsync on the hub's event loop per start (issue
    21 item 6: the largest part of gpulab's refusals' cost over a bare hub)."""
    commits = {}
    for cls in (EngineFreeSpawner, EngineRecorder):
        hub = hubwork(cls)
        users = [hub.user(f"u{i}", ["researchers"]) for i in range(3)]
        for again in (False, True):
            before = hub.writing_commits
            for u in users:
                await u.spawn("", options={"profile": "mig"})
                await u.stop("")
            commits[cls.__name__, again] = hub.writing_commits - before
        assert hub.rollbacks == 0
    for again in (False, True):
        assert commits["EngineFreeSpawner", again] <= commits["EngineRecorder", again], commits


async def test_a_refused_request_s_options_never_reach_the_hub_s_database(hubwork):
    """JupyterHub saves a start's options on the server's row before ``start()`` runs: for a
    gpulab server nothing of a refused request is ever written there, not even for the moment
    before it is cleared, and a row saved by an older gpulab is cleared at the next start."""
    hub = hubwork()
    ann = hub.user("ann", ["researchers"])
    rt = ann.spawner.runtime()
    rt.ledger.claim(SliceRequest(kind=SliceKind.GPU), user="rita", profile="a40")
    written = []

    def count(conn, cursor, statement, params, context, executemany):
        if statement.lstrip().startswith("UPDATE spawners") and "user_options" in statement:
            written.append(params)

    sa.event.listen(hub.db.get_bind(), "before_cursor_execute", count)
    try:
        with pytest.raises(SpawnRefused, match="No free whole GPU slice"):
            await ann.spawn("", options={"profile": "a40"})
    finally:
        sa.event.remove(hub.db.get_bind(), "before_cursor_execute", count)
    assert written == []
    assert not hub.saved_options(ann)  # nothing saved: NULL or {}
    # a row an older gpulab left with saved options (written past the ORM)
    with hub.db.get_bind().begin() as conn:
        conn.execute(
            sa.text("UPDATE spawners SET user_options = :o WHERE user_id = :u"),
            {"o": '{"profile": "a40"}', "u": ann.id},
        )
    hub.db.expire_all()
    assert hub.saved_options(ann) == {"profile": "a40"}
    await ann.spawn("", options={"profile": "mig"})
    assert not hub.saved_options(ann)  # nothing saved: NULL or {}
    await ann.stop("")


async def test_the_lab_s_configuration_is_read_once_per_hub_not_once_per_spawner(
    hubwork, monkeypatch
):
    """Each spawner's first start read ``c.GPULab`` afresh (a copy of every configured value,
    ~2.6 ms for a 1,200-slice lab) though every spawner of a hub holds the same configuration:
    under a storm of 1,000 first starts, seconds of the hub's event loop. A reconfigured hub (a
    new configuration, after ``forget_runtimes``) gets a lab of its own."""
    built = []

    class CountedGPULab(runtime_module.GPULab):
        def __init__(self, **kwargs):
            built.append(kwargs["config"])
            super().__init__(**kwargs)

    monkeypatch.setattr(runtime_module, "GPULab", CountedGPULab)
    hub = hubwork()
    users = [hub.user(f"u{i}", ["researchers"]) for i in range(4)]
    for u in users:
        await u.spawn("", options={"profile": "cpu"})
    assert built == [hub.config]
    assert len({id(u.spawner.runtime()) for u in users}) == 1
    for u in users:
        await u.stop("")

    forget_runtimes()
    hub.config = hub_config(hub.tmp_path)
    hub.config.GPULab.profiles = [
        {**p, "image": IMAGE, "default": p["slug"] == "seat"} for p in PROFILES
    ]
    ann = hub.user("ann", ["researchers"])
    await ann.spawn("")
    assert built[1:] == [hub.config]
    assert ann.spawner.user_options == {"profile": "seat"}  # the new configuration's default
    await ann.stop("")


async def test_a_poll_of_a_running_server_reads_the_ledger_once(hubwork):
    """JupyterHub polls every running server (``poll_interval``) and every failed start: the
    container's lookup already reads the allocation its labels name, and ``poll()`` reused to
    read it again. An allocation closed elsewhere is still seen on that one read: re-adopted."""
    hub = hubwork()
    ann = hub.user("ann", ["researchers"])
    await ann.spawn("", options={"profile": "mig"})
    sp = ann.spawner
    ledger = sp.runtime().ledger
    reads = []

    def count(conn, cursor, statement, params, context, executemany):
        if statement.lstrip().startswith("SELECT") and "FROM allocations" in statement:
            reads.append(statement)

    sa.event.listen(ledger.engine, "before_cursor_execute", count)
    try:
        assert await sp.poll() is None
        assert len(reads) == 1, reads
        first = sp.allocation_id
        ledger.release(first, "admin")
        reads.clear()
        assert await sp.poll() is None  # still running, and holding its slice again
        again = sp.allocation_id
        # the container's labels still name the first allocation: this poll reads its own
        assert await sp.poll() is None
    finally:
        sa.event.remove(ledger.engine, "before_cursor_execute", count)
    assert again not in (None, first)
    assert sp.allocation_id == again  # not re-adopted again on the labels' closed allocation
    assert [a.id for a in ledger.open_allocations("ann")] == [sp.allocation_id]
    await ann.stop("")


async def test_a_burst_s_claims_reach_a_sqlite_ledger_one_at_a_time_in_the_order_asked(
    hubwork, monkeypatch
):
    """Twelve researchers ask at once for the lab's one A40, free: one gets it, eleven are
    refused. The claims that reach the SQLite ledger (those whose start read the A40 free:
    the others are refused on that read, ledger/readrefusal.py) must reach it one after
    another, in the order the starts asked: on the loop's thread pool they met at SQLite's
    lock, and every writer that found it taken slept in SQLite's busy handler (1, 2, 5, 10 …
    100 ms) however soon it freed (issue 21 item 6)."""
    hub = hubwork()
    users = [hub.user(f"r{i}", ["researchers"]) for i in range(12)]
    ledger = users[0].spawner.runtime().ledger
    real_claim, inside, order = ledger.claim, [], []

    def claim(request, **kw):
        inside.append(kw["user"])
        try:
            assert inside == [kw["user"]], f"claims met at the lock: {inside}"
            order.append(kw["user"])
            time.sleep(0.005)  # a claim that takes a while: a second thread would come in
            return real_claim(request, **kw)
        finally:
            inside.remove(kw["user"])

    monkeypatch.setattr(ledger, "claim", claim)
    got = await asyncio.gather(
        *(u.spawn("", options={"profile": "a40"}) for u in users), return_exceptions=True
    )
    refused = [e for e in got if isinstance(e, SpawnRefused)]
    assert len(refused) == 11 and all("No free whole GPU slice" in e.message for e in refused)
    [winner] = [u.name for u, g in zip(users, got) if not isinstance(g, BaseException)]
    assert order and order[0] == winner
    assert order == [u.name for u in users if u.name in order]  # in the order asked
    for u in users:
        await u.stop("")


async def test_a_postgresql_ledger_s_writes_are_not_queued_behind_each_other():
    """PostgreSQL has no single writer (the claim locks rows, SKIP LOCKED): a hub's writes to it
    run side by side on the loop's threads, as every other ledger call."""

    class PostgresLedger:
        dialect = "postgresql"

    running, most = [], []

    def write(i):
        running.append(i)
        most.append(len(running))
        time.sleep(0.02)
        running.remove(i)
        return i

    ledger = PostgresLedger()
    got = await asyncio.gather(*(aio.write(ledger, write, i) for i in range(4)))
    assert got == [0, 1, 2, 3]
    assert max(most) > 1


class SqliteLedger:
    """What :mod:`~jupyterhub_gpulab.ledger.aio` reads of a ledger: a SQLite one has one writer."""

    dialect = "sqlite"


async def test_container_records_asked_while_the_writer_is_busy_are_written_in_one_go():
    """Each start records its container on the ledger's one writing thread; under a storm
    hundreds ask while the writer is busy with the claims, and one transaction writes them all
    (aio.write_batched); one asked after the writer took the batch goes in the next."""
    ledger, gate, calls = SqliteLedger(), threading.Event(), []

    def record(rows):
        calls.append(list(rows))

    busy = asyncio.ensure_future(aio.write(ledger, gate.wait))  # the writer, deciding claims
    asked = [asyncio.ensure_future(aio.write_batched(ledger, record, i)) for i in range(5)]
    await asyncio.sleep(0.05)
    asked[2].cancel()  # a start given up on: its container is recorded all the same
    gate.set()
    await busy
    got = await asyncio.gather(*asked, return_exceptions=True)
    assert [type(g).__name__ for g in got] == ["NoneType"] * 2 + ["CancelledError"] + [
        "NoneType"
    ] * 2
    await aio.write_batched(ledger, record, 9)
    assert calls == [[0, 1, 2, 3, 4], [9]]


async def test_a_failed_batch_of_container_records_fails_every_start_in_it():
    ledger, gate = SqliteLedger(), threading.Event()

    def record(rows):
        raise OSError(f"disk full writing {len(rows)} rows")

    busy = asyncio.ensure_future(aio.write(ledger, gate.wait))
    asked = [asyncio.ensure_future(aio.write_batched(ledger, record, i)) for i in range(3)]
    await asyncio.sleep(0.05)
    gate.set()
    await busy
    got = await asyncio.gather(*asked, return_exceptions=True)
    assert [str(g) for g in got] == ["disk full writing 3 rows"] * 3


async def test_a_batch_of_container_records_that_never_ran_takes_no_later_record():
    """A batch's task cancelled before the writer took it (the loop stopping) closes the batch:
    a later record goes in a batch of its own and is written."""
    ledger, gate, calls = SqliteLedger(), threading.Event(), []
    busy = asyncio.ensure_future(aio.write(ledger, gate.wait))
    asked = asyncio.ensure_future(aio.write_batched(ledger, calls.append, 1))
    await asyncio.sleep(0.05)
    [(_, task)] = [v for k, v in aio._batches.items() if k[1] is ledger]
    task.cancel()
    await asyncio.gather(asked, return_exceptions=True)
    gate.set()
    await busy
    await asyncio.wait_for(aio.write_batched(ledger, calls.append, 2), 5)
    assert calls == [[2]]


async def test_a_named_server_created_with_options_starts_with_them(hubwork):
    """JupyterHub 6 creates a named server with its options (``PUT …/servers/<name>`` stores
    them on the server's row) and starts it later without any (``POST``): it starts with the
    options it was created with, which only then are cleared."""
    hub = hubwork()
    ann = hub.user("ann", ["researchers"])
    sp = ann.get_or_create_spawner("tf", "tf")
    sp.user_options = sp.orm_spawner.user_options = {"profile": "seat"}  # what PUT does
    hub.db.commit()
    await ann.spawn("tf")
    assert ann.spawners["tf"].user_options == {"profile": "seat"}
    assert ann.spawners["tf"].profile_slug == "seat"
    await ann.stop("tf")

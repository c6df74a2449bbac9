"""GPUDockerSpawner's rules without a Docker engine: entitlement, the GPU-hour budget checked before
any slice is claimed, ``void`` for CPU profiles, release on stop and on a failed start.

Everything is real but the engine: JupyterHub's own ``User``/``orm`` objects and spawner, the
ledger on SQLite, the declared lab. Only DockerSpawner's one Docker seam, ``docker(method,
…)`` (every engine call goes through it), is answered by :class:`EngineRecorder`, which keeps the
containers it was asked to create in a dict and records every call. The same rules on a real
engine and a real hub: test_spawner_e2e.py and test_spawner_lifecycle.py.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa
from docker.errors import APIError
from e2e_support import LAB, PROFILES
from enginefree_support import NO_ENGINE, EngineFreeSpawner, spawner_maker
from form_support import radios
from jupyterhub import orm
from traitlets.config import Config

from jupyterhub_gpulab import clock
from jupyterhub_gpulab.errors import SpawnRefused
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.lab.config import GPULab
from jupyterhub_gpulab.ledger.readrefusal import PendingRefusals
from jupyterhub_gpulab.ledger.schema import allocations
from jupyterhub_gpulab.spawner import reserve
from jupyterhub_gpulab.spawner.backendbase import EngineBackend
from jupyterhub_gpulab.spawner.reserve import refusals_written
from jupyterhub_gpulab.spawner.runtime import forget_runtimes, get_runtime

IMAGE = "gpulab/singleuser:engine-free"
NODE = "enginefree"


def lab_config(tmp_path, **gpulab) -> Config:
    c = Config()
    c.GPULab.db_url = f"sqlite:///{tmp_path}/gpulab.sqlite"
    c.GPULab.node_name = NODE
    c.GPULab.inventory_source = "declared"
    c.GPULab.inventory = LAB
    c.GPULab.profiles = [{**p, "image": IMAGE} for p in PROFILES]
    c.GPULab.group_policies = {
        "students": {"profiles": ["mig", "seat", "cpu"], "max_slices_per_user": 1},
        "researchers": {"max_slices_per_user": 3},
    }
    for name, value in gpulab.items():
        setattr(c.GPULab, name, value)
    c.DockerSpawner.pull_policy = "never"
    # an engine no call may reach: only the docker() seam answers
    c.DockerSpawner.client_kwargs = NO_ENGINE
    c.GPUDockerSpawner.attach_mode = "device_request"
    return c


@pytest.fixture
def lab(tmp_path):
    """``lab(**gpulab_traits)`` -> ``make(user, groups=(), admin=False)`` giving a spawner for that
    user, all sharing one hub database, one lab and one ledger."""
    db = orm.new_session_factory("sqlite://")()
    made: dict = {}

    def configure(**gpulab):
        config = lab_config(tmp_path, **gpulab)
        rt = get_runtime(GPULab(config=config))
        rt.reconciled = True  # reconcile lists containers on the engine itself (Docker tests)
        made["config"], made["ledger"] = config, rt.ledger
        make = spawner_maker(config, db)
        make.ledger = rt.ledger
        return make

    yield configure
    forget_runtimes()
    db.close()


def rows(ledger) -> list:
    """Every allocation row the ledger ever wrote, closed ones too."""
    with ledger.engine.connect() as conn:
        return list(conn.execute(sa.select(allocations)))


def env_of(spawner: EngineFreeSpawner) -> dict[str, str]:
    [(_args, kwargs)] = spawner.calls("create_container")
    env = kwargs["environment"]
    return env if isinstance(env, dict) else dict(e.split("=", 1) for e in env)


# -- entitlement --------------------------------------------------------------------------------


async def test_a_profile_the_user_is_not_entitled_to_is_refused_before_anything_happens(lab):
    make = lab()
    sp = make("ann", ["students"])
    sp.user_options = {"profile": "a40"}  # researchers only
    with pytest.raises(SpawnRefused) as e:
        await sp.start()
    assert e.value.status_code == 400 and "a40" in e.value.message
    assert "'mig'" in e.value.message  # says what she may pick
    assert sp.engine_calls == [] and rows(make.ledger) == []
    assert make.ledger.refusals_since(clock.utcnow() - timedelta(minutes=1)) == {"not-entitled": 1}


async def test_a_full_lab_refuses_without_a_database_write_and_records_what_the_user_saw(
    lab, monkeypatch
):
    # issue 21 item 6: the refusal's claim took SQLite's write lock on the ledger's writing
    # thread, queued behind every other spawn of a burst; it is decided on a read now, and its
    # record is written after the refusal, with the others' refused meanwhile
    make = lab()
    winner = make("rita", ["researchers"])
    winner.user_options = {"profile": "a40"}  # the lab's one A40
    await winner.start()
    refused = [make(u, ["researchers"]) for u in ("rolf", "ruth", "rex")]
    writes = []

    @sa.event.listens_for(make.ledger.engine, "begin")
    def _begin(conn):
        if not conn.get_execution_options().get("gpulab_read"):
            writes.append(conn)

    flushes = []
    flush = PendingRefusals.flush
    monkeypatch.setattr(PendingRefusals, "flush", lambda *a: flushes.append(1) or flush(*a))
    told = []
    for sp in refused:
        sp.user_options = {"profile": "a40"}
        with pytest.raises(SpawnRefused) as e:
            await sp.start()
        told.append(e.value)
    assert writes == []  # none on the refusals' way
    assert {e.status_code for e in told} == {503}
    assert all("No free whole GPU slice (0 of 1 free)" in e.message for e in told)
    await refusals_written()
    since = clock.utcnow() - timedelta(minutes=1)
    sa.event.remove(make.ledger.engine, "begin", _begin)
    assert make.ledger.last_refusals(["rolf", "ruth", "rex"], since) == {
        sp.user.name: ("no-free-slice", e.message) for sp, e in zip(refused, told)
    }
    assert len(writes) == 1 and flushes == [1]  # the three rows in one trip, one transaction
    assert all(sp.engine_calls == [] and sp.allocation_id is None for sp in refused)


async def test_refusals_whose_write_failed_are_written_by_a_later_try(lab, monkeypatch):
    # the ledger could not be written when the flush ran (a locked file, a full disk): the hub
    # tries again a few seconds later, with no new refusal to ask it, and the rows arrive
    from jupyterhub_gpulab.spawner import reserve

    monkeypatch.setattr(reserve, "REFUSALS_RETRY_S", 0.05)
    make = lab()
    winner = make("rita", ["researchers"])
    winner.user_options = {"profile": "a40"}
    await winner.start()
    tries = []
    flush = PendingRefusals.flush

    class Locked:
        def _write(self):
            raise sa.exc.OperationalError("BEGIN IMMEDIATE", {}, Exception("database is locked"))

    def failing_once(pending, ledger):
        tries.append(len(pending))
        return flush(pending, Locked() if len(tries) == 1 else ledger)

    monkeypatch.setattr(PendingRefusals, "flush", failing_once)
    sp = make("rolf", ["researchers"])
    sp.user_options = {"profile": "a40"}
    with pytest.raises(SpawnRefused):
        await sp.start()
    await refusals_written()
    assert tries == [1, 1]
    since = clock.utcnow() - timedelta(minutes=1)
    assert make.ledger.refusals_since(since) == {"no-free-slice": 1}


def count_refusal_reads(monkeypatch) -> list[str]:
    """The users whose start decided its claim on the refusal read, in order."""
    reads: list[str] = []
    real = reserve.refused_without_write

    def counted(*args, **kwargs):
        reads.append(kwargs["user"])
        return real(*args, **kwargs)

    monkeypatch.setattr(reserve, "refused_without_write", counted)
    return reads


async def test_starts_claim_at_once_while_the_last_claim_saw_seats_to_spare(lab, monkeypatch):
    # benchmarks/scale.py: the refusal read ran every rule of the claim on the hub's one loop for
    # each of 1,000 granted starts, and the claim ran them again. While the profile's last claim
    # saw free seats beside its own, a start claims at once; once the last seat is taken, the
    # next start is refused on a read again, without a write (spawner/claimoutlook.py)
    make = lab()
    reads = count_refusal_reads(monkeypatch)
    for i in range(5):  # the T4's five seats
        sp = make(f"s{i}", ["students"])
        sp.user_options = {"profile": "seat"}
        await sp.start()
        assert sp.allocation_id is not None
    assert reads == ["s0"]  # nothing was known of the seats before the first claim
    late = make("s5", ["students"])
    late.user_options = {"profile": "seat"}
    writes = []

    @sa.event.listens_for(make.ledger.engine, "begin")
    def _begin(conn):
        if not conn.get_execution_options().get("gpulab_read"):
            writes.append(conn)

    with pytest.raises(SpawnRefused) as e:
        await late.start()
    sa.event.remove(make.ledger.engine, "begin", _begin)
    assert e.value.reason == "no-free-slice" and "(0 of 5 free)" in e.value.message
    assert reads == ["s0", "s5"] and writes == []  # decided on the read, as before
    await refusals_written()
    assert make.ledger.refusals_since(clock.utcnow() - timedelta(minutes=1)) == {"no-free-slice": 1}


async def test_two_starts_racing_for_the_last_spare_seat_the_second_reads_first(lab, monkeypatch):
    # the last claim saw one seat to spare: the first start takes the way without the read, and
    # a start beside it, still on its way to the writer, does not count on that seat
    make = lab()
    for i in range(4):
        sp = make(f"s{i}", ["students"])
        sp.user_options = {"profile": "seat"}
        await sp.start()
    reads = count_refusal_reads(monkeypatch)
    pair = [make(u, ["students"]) for u in ("tia", "tom")]
    for sp in pair:
        sp.user_options = {"profile": "seat"}
    got = await asyncio.gather(*(sp.start() for sp in pair), return_exceptions=True)
    assert reads == ["tom"]
    refused = [g for g in got if isinstance(g, SpawnRefused)]
    assert len(refused) == 1 and refused[0].reason == "no-free-slice"
    assert len(make.ledger.open_allocations()) == 5  # every seat held once, none twice
    assert make.ledger.double_allocations() == []


async def test_a_claim_the_writer_decided_counts_as_decided_before_its_start_resumes(
    lab, monkeypatch
):
    # under a storm the hub's loop resumes a start long after the writer decided its claim;
    # counted as racing until then, decided claims sent every later start to the read
    make = lab()
    first = make("s0", ["students"])
    first.user_options = {"profile": "seat"}
    await first.start()  # saw three of the T4's five seats to spare
    reads = count_refusal_reads(monkeypatch)
    write = reserve.aio.write

    async def resumed_late(*args, **kwargs):
        out = await write(*args, **kwargs)
        await asyncio.sleep(0.5)  # the loop, busy with the storm, comes back to this start late
        return out

    monkeypatch.setattr(reserve.aio, "write", resumed_late)
    starts = []
    for i, user in enumerate(("tia", "tom", "ted", "tex"), start=2):
        sp = make(user, ["students"])
        sp.user_options = {"profile": "seat"}
        starts.append(asyncio.ensure_future(sp.start()))
        while len(make.ledger.open_allocations()) < i:  # until the writer decided this claim
            await asyncio.sleep(0.01)
    await asyncio.gather(*starts)
    # each claimed at once, tex the last seat: the seats the last decided claim saw were spare
    assert reads == []
    assert len(make.ledger.open_allocations()) == 5 and make.ledger.double_allocations() == []


async def test_a_storm_with_claims_undecided_by_the_dozen_reads_once(lab, monkeypatch):
    # benchmarks/scale.py: the loop sends claims far faster than the writing thread decides them,
    # so hundreds are undecided at once; bounded by the three a claim sees to spare, nearly every
    # start of a storm of 1,000 read first. The first read counts the free seats: as many
    # starts as there are seats beyond the claims on their way claim at once, and the start
    # past the last seat reads again (spawner/claimoutlook.py)
    t4 = [
        {"uuid": f"GPU-t4-{i}", "index": i, "name": "Tesla T4", "memory": "16GiB",
         "shared": {"seats": 12, "memory_per_seat": "1GiB", "compute_share": 0.08}}
        for i in range(3)
    ]  # fmt: skip
    make = lab(inventory=t4)
    reads = count_refusal_reads(monkeypatch)
    write = reserve.aio.write

    async def slow_writer(*args, **kwargs):
        # every start of the storm reaches its claim before one is decided
        await asyncio.sleep(0.05)
        return await write(*args, **kwargs)

    monkeypatch.setattr(reserve.aio, "write", slow_writer)

    async def storm(users):
        made = [make(u, ["students"]) for u in users]
        for sp in made:
            sp.user_options = {"profile": "seat"}
        return await asyncio.gather(*(sp.start() for sp in made), return_exceptions=True)

    got = await storm([f"s{i}" for i in range(30)])
    assert not [g for g in got if isinstance(g, BaseException)]
    assert reads == ["s0"]  # 36 seats seen free: the other 29 claimed at once
    got = await storm([f"t{i}" for i in range(8)])  # 6 seats left for 8 starts
    assert reads == ["s0", "t6", "t7"]  # past the seats seen free, a start reads again
    refused = [g for g in got if isinstance(g, SpawnRefused)]
    assert len(refused) == 2 and {e.reason for e in refused} == {"no-free-slice"}
    assert len(make.ledger.open_allocations()) == 36 and make.ledger.double_allocations() == []


async def test_starts_given_up_while_their_claims_wait_for_the_writer_leave_no_claim_counted(
    lab, monkeypatch
):
    # a start cancelled while its claim is queued for the ledger's writer never has it run, so
    # nothing decides it: counted among the undecided for good, it sent every later start of
    # the profile to the read first (found trying to break the outlook, 2026-12-07)
    make = lab()
    first = make("s0", ["students"])
    first.user_options = {"profile": "seat"}
    await first.start()  # read first: nothing known; counted the five seats
    ledger = make.ledger
    gate = threading.Event()
    busy = asyncio.ensure_future(reserve.aio.write(ledger, gate.wait))  # the writer, busy
    given_up = []
    for user in ("g1", "g2", "g3", "g4"):
        sp = make(user, ["students"])
        sp.user_options = {"profile": "seat"}
        given_up.append(asyncio.ensure_future(sp.start()))
    await asyncio.sleep(0.1)  # each claim queued behind the busy writer
    for task in given_up:
        task.cancel()
    got = await asyncio.gather(*given_up, return_exceptions=True)  # before the writer is free
    assert all(isinstance(g, asyncio.CancelledError) for g in got)
    gate.set()
    await busy
    assert [a.user for a in ledger.open_allocations()] == ["s0"]  # no claim of theirs ran
    reads = count_refusal_reads(monkeypatch)
    for user in ("t1", "t2", "t3"):
        sp = make(user, ["students"])
        sp.user_options = {"profile": "seat"}
        await sp.start()
    assert reads == []  # four seats seen free, none taken by the starts given up
    assert len(ledger.open_allocations()) == 4 and ledger.double_allocations() == []


async def test_a_claim_granted_while_its_start_gives_up_ends_at_once(lab):
    # JupyterHub cancels a start that outruns its start_timeout: a claim the writer was running
    # then was granted to nobody and held its slice until the reconcile found no server
    make = lab()
    sp = make("ann", ["students"])
    sp.user_options = {"profile": "seat"}
    real, granted, gate = sp._reserve, threading.Event(), threading.Event()

    def slow(*args):
        claim = real(*args)
        granted.set()
        gate.wait(5)  # the writer holds the decision while the start is cancelled
        return claim

    sp._reserve = slow
    start = asyncio.ensure_future(sp.start())
    while not granted.is_set():
        await asyncio.sleep(0.01)
    start.cancel()
    with pytest.raises(asyncio.CancelledError):
        await start
    gate.set()
    await reserve.aio.write(make.ledger, lambda: None)  # the writer is done with the claim
    assert make.ledger.open_allocations() == []
    [a] = make.ledger.allocations_between(clock.utcnow() - timedelta(minutes=1), clock.utcnow())
    assert (a.user, a.end_reason) == ("ann", "failed")


async def test_a_claim_granted_before_its_given_up_start_resumed_ends_too(lab, monkeypatch):
    # the writer decided the claim, and the start was cancelled before the loop resumed it
    make = lab()
    write = reserve.aio.write

    async def resumed_late(*args, **kwargs):
        out = await write(*args, **kwargs)
        await asyncio.sleep(0.3)  # the loop, busy with a storm, comes back late
        return out

    monkeypatch.setattr(reserve.aio, "write", resumed_late)
    sp = make("ann", ["students"])
    sp.user_options = {"profile": "seat"}
    start = asyncio.ensure_future(sp.start())
    while not make.ledger.open_allocations():
        await asyncio.sleep(0.01)
    start.cancel()
    with pytest.raises(asyncio.CancelledError):
        await start
    await refusals_written()  # the release, written in the background
    assert make.ledger.open_allocations() == []


async def test_a_claim_no_gpu_can_serve_is_refused_as_misconfigured_and_recorded_so(lab):
    # the refusal built inside the claim's transaction tells the image gate's reason, not "no
    # free slice", and the refusal log holds exactly what the user saw
    from images_support import P40_LAB, cuda13_labels

    profile = {"slug": "torch", "display_name": "PyTorch", "image": IMAGE, "slice": {"kind": "gpu"}}
    make = lab(inventory=P40_LAB[:1], profiles=[profile], group_policies={})
    EngineBackend._label_cache[IMAGE] = (time.monotonic(), cuda13_labels())
    sp = make("ann")
    sp.user_options = {"profile": "torch"}
    try:
        with pytest.raises(SpawnRefused) as e:
            await sp.start()
    finally:
        EngineBackend._label_cache.clear()
    assert e.value.reason == "misconfigured"
    assert "No GPU this profile may use can run its image" in e.value.message
    assert "compute capability 6.1" in e.value.message
    await refusals_written()  # decided on a read: its record follows (ledger/readrefusal.py)
    since = clock.utcnow() - timedelta(minutes=1)
    assert make.ledger.last_refusals(["ann"], since) == {"ann": ("misconfigured", e.value.message)}
    assert rows(make.ledger) == [] and sp.engine_calls == []


async def test_a_burst_of_starts_reads_the_images_labels_once(lab):
    # DockerSpawner runs every engine call on one thread: 40 starts at once each inspected the
    # image there, and a refusal waited behind all of them and the winners' creates
    make = lab()
    spawners = [make(f"s{i}", ["students"]) for i in range(8)]
    EngineBackend._label_cache.clear()
    profile = spawners[0].runtime().lab.profile("mig")
    needs = await asyncio.gather(*(sp.image_requirements(profile) for sp in spawners))
    assert len({n for n in needs}) == 1
    assert sum(len(sp.calls("inspect_image")) for sp in spawners) == 1
    # the next read after the cache's 30 s is a new one
    EngineBackend._label_cache.clear()
    await spawners[0].image_requirements(profile)
    assert sum(len(sp.calls("inspect_image")) for sp in spawners) == 2


async def test_a_burst_after_the_labels_aged_is_answered_at_once_while_one_read_refreshes(lab):
    # a class's burst a minute after the last start waited 3.6-4.1 s for the inspect, queued on
    # DockerSpawner's one engine thread behind the winners' creates: labels between 30 s and
    # LABEL_STALE_S old answer at once while one read runs; older ones are waited for
    make = lab()
    spawners = [make(f"s{i}", ["students"]) for i in range(8)]
    profile = spawners[0].runtime().lab.profile("mig")
    EngineBackend._label_cache.clear()
    try:
        fresh = await spawners[0].image_requirements(profile)
        inspects = sum(len(sp.calls("inspect_image")) for sp in spawners)
        labels = EngineBackend._label_cache[IMAGE][1]
        aged = time.monotonic() - EngineBackend.LABEL_CACHE_S - 30
        EngineBackend._label_cache[IMAGE] = (aged, labels)
        reads = []
        for sp in spawners:  # no start of the burst waits for the read: none awaits it
            sp._read_labels = lambda image, sp=sp: reads.append(sp) or asyncio.sleep(3600)
        needs = await asyncio.wait_for(
            asyncio.gather(*(sp.image_requirements(profile) for sp in spawners)), 5
        )
        assert set(needs) == {fresh} and len(reads) == 1  # one refresh for the whole burst
        refresh = EngineBackend._label_reads[IMAGE]
        refresh.cancel()
        await asyncio.wait([refresh])
        # too old to answer: the start waits for a new read (the engine's inspect)
        too_old = time.monotonic() - EngineBackend.LABEL_STALE_S - 1
        EngineBackend._label_cache[IMAGE] = (too_old, labels)
        del spawners[1]._read_labels
        assert await spawners[1].image_requirements(profile) == fresh
        assert sum(len(sp.calls("inspect_image")) for sp in spawners) == inspects + 1
    finally:
        EngineBackend._label_cache.clear()


# -- the default profile: one rule for the form and a start with no choice ---------------------


async def test_the_form_preselects_what_a_start_without_a_choice_would_run(lab):
    # The form used to preselect the saved slug, else the first pickable row, so a saved choice
    # that no longer applies checked the first row while a start without a choice ran the default.
    by_slug = {p["slug"]: p for p in PROFILES}
    order = [by_slug[s] for s in ("cpu", "seat", "mig", "a40")]  # the default is not first
    make = lab(profiles=[{**p, "image": IMAGE} for p in order])
    for i, (last, runs) in enumerate((("gone", "mig"), ("", "mig"), ("seat", "seat"))):
        sp = make(f"ann{i}", ["students"])
        sp.last_profile = last
        checked = [
            slug for slug, r in radios(await sp._render_options_form()).items() if "checked" in r
        ]
        assert checked == [runs], (last, checked)
        sp.user_options = {}
        assert sp._pick_profile(sp.runtime()).slug == runs


async def test_the_form_tells_a_user_whose_own_server_fills_a_profile_instead_of_the_queue(lab):
    """The researcher's default server holds the lab's one A40; his form for a named server says
    so, where it offered the waitlist for his own slice (issue 25, a small friction)."""
    make = lab(profiles=[{**p, "image": IMAGE} for p in PROFILES])
    sp = make("rita", ["researchers"])
    make.ledger.claim(SliceRequest(kind=SliceKind.GPU), user="rita", profile="a40")
    why = radios(await sp._render_options_form())["a40"]["why"]
    assert why.startswith("All taken right now, 1 by your own server"), why


# -- the GPU-hour budget, checked before any slice is claimed ----------------------------------


def spent_budget(make, user: str, hours: float) -> int:
    """``user`` used a whole A40 for ``hours`` earlier this term; returns that allocation's id."""
    led = make.ledger
    used = led.claim(SliceRequest(kind=SliceKind.GPU), user=user, profile="a40")
    led.release(used.allocation.id, "stopped")
    end = clock.utcnow()
    with led.engine.begin() as conn:
        conn.execute(
            allocations.update()
            .where(allocations.c.id == used.allocation.id)
            .values(started_at=end - timedelta(hours=hours), ended_at=end)
        )
    return used.allocation.id


def budget_lab(lab):
    today = clock.utcnow().date()
    return lab(
        group_policies={
            "students": {
                "profiles": ["mig", "seat", "cpu"],
                "max_slices_per_user": 1,
                "gpu_hours": 1,
                "period": "term",
            },
        },
        term_start=str(today - timedelta(days=30)),
        term_end=str(today + timedelta(days=30)),
    )


async def test_a_spent_budget_is_refused_without_ever_claiming_a_slice(lab):
    make = budget_lab(lab)
    history = spent_budget(make, "ann", hours=2)
    sp = make("ann", ["students"])
    sp.user_options = {"profile": "mig"}
    with pytest.raises(SpawnRefused) as e:
        await sp.start()
    assert e.value.status_code == 429
    assert "You have used 2.0 of 1 GPU-hours this term (students)" in e.value.message
    # no allocation row was ever written: a spawner that claims, checks, then releases fails here
    assert [r.id for r in rows(make.ledger)] == [history]
    assert sp.engine_calls == [] and sp.allocation_id is None


async def test_a_spent_budget_is_told_even_when_no_slice_is_free(lab):
    # the budget is the reason, not the full lab: checked first, it names what to do
    make = budget_lab(lab)
    spent_budget(make, "ann", hours=2)
    for i in range(2):  # both 1g.10gb MIG slices held by others
        make.ledger.claim(
            SliceRequest(kind=SliceKind.MIG, mig_profile="1g.10gb"), user=f"u{i}", profile="mig"
        )
    sp = make("ann", ["students"])
    sp.user_options = {"profile": "mig"}
    with pytest.raises(SpawnRefused) as e:
        await sp.start()
    assert e.value.status_code == 429 and "GPU-hours" in e.value.message


async def test_cpu_profiles_are_never_refused_for_a_budget(lab):
    make = budget_lab(lab)
    spent_budget(make, "ann", hours=2)
    sp = make("ann", ["students"])
    sp.user_options = {"profile": "cpu"}
    assert await sp.start() == ("127.0.0.1", 49153)
    assert make.ledger.open_allocations() == []


async def test_a_spawn_works_out_the_users_policies_once(lab, monkeypatch):
    # Entitlement, the choice, the slice limit and the budget each recomputed the user's
    # policies (four times per spawn); one PolicyContext now carries them through the spawn.
    from jupyterhub_gpulab.lab import policy

    calls = []
    real = policy.applicable_policies

    def counted(*args, **kwargs):
        calls.append(args[:2])
        return real(*args, **kwargs)

    for name, module in list(sys.modules.items()):  # wherever it was imported by name
        if name.startswith("jupyterhub_gpulab") and hasattr(module, "applicable_policies"):
            monkeypatch.setattr(module, "applicable_policies", counted)
    make = budget_lab(lab)
    spent_budget(make, "ann", hours=0.5)
    sp = make("ann", ["students"])
    sp.user_options = {"profile": "mig"}
    assert await sp.start() == ("127.0.0.1", 49153)
    assert [a.user for a in make.ledger.open_allocations()] == ["ann"]
    assert calls == [({"students"}, False)]


# -- what the container gets --------------------------------------------------------------------


async def test_a_cpu_profile_sees_no_gpu(lab):
    make = lab()
    sp = make("ann", ["students"])
    sp.user_options = {"profile": "cpu"}
    await sp.start()
    env = env_of(sp)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    [(_a, kw)] = sp.calls("create_container")
    assert not kw["host_config"].get("DeviceRequests")
    assert "org.jupyter.gpulab.allocation" not in kw["labels"]
    assert make.ledger.open_allocations() == []


async def test_a_gpu_profile_gets_exactly_its_claimed_slice(lab):
    make = lab()
    sp = make("ann", ["students"])
    sp.user_options = {"profile": "mig"}
    await sp.start()
    [held] = make.ledger.open_allocations()
    assert (held.user, held.slice_id, held.id) == ("ann", sp.slice_id, sp.allocation_id)
    assert env_of(sp)["NVIDIA_VISIBLE_DEVICES"] == held.slice_id
    [(_a, kw)] = sp.calls("create_container")
    [request] = kw["host_config"]["DeviceRequests"]
    assert request["DeviceIDs"] == [held.slice_id] and not request.get("Count")
    assert kw["labels"]["org.jupyter.gpulab.allocation"] == str(held.id)
    assert held.container_id == sp.object_id  # the ledger knows the container


# -- every allocation ends ------------------------------------------------------------------


async def test_stop_removes_the_container_and_releases_the_slice(lab):
    make = lab()
    sp = make("ann", ["students"])
    sp.user_options = {"profile": "mig"}
    await sp.start()
    aid = sp.allocation_id
    await sp.stop()
    assert [m for m, _a, _k in sp.engine_calls][-2:] == ["stop", "remove_container"]
    assert sp.containers == {}
    closed = make.ledger.get(aid)
    assert not closed.open and closed.end_reason == "stopped"
    assert sp.allocation_id is None and sp.get_state().get("gpulab_allocation") is None


async def test_a_failed_start_releases_the_slice_and_removes_the_container(lab):
    make = lab()
    sp = make("ann", ["students"])
    sp.user_options = {"profile": "mig"}
    sp.fail["start"] = APIError("cannot start container: out of memory")
    with pytest.raises(APIError):
        await sp.start()
    [row] = rows(make.ledger)
    assert row.ended_at is not None and row.end_reason == "failed"
    assert sp.containers == {} and sp.allocation_id is None


async def test_an_engine_without_the_gpu_runtime_is_a_clear_refusal_and_frees_the_slice(lab):
    make = lab()
    sp = make("ann", ["students"])
    sp.user_options = {"profile": "mig"}
    sp.fail["create_container"] = APIError(
        'could not select device driver "nvidia" with capabilities: [[gpu]]'
    )
    with pytest.raises(SpawnRefused) as e:
        await sp.start()
    assert e.value.status_code == 503 and "GPU runtime is missing" in e.value.message
    assert make.ledger.open_allocations() == []


async def test_a_poll_while_the_start_is_creating_its_container_keeps_the_slice(lab):
    """JupyterHub polls a start slower than ``slow_spawn_timeout``; a poll that came before the
    container existed released the allocation as "container-gone", and the start then ran a
    server on a slice the ledger called free (benchmarks/scale.py, 1,000 starts at once)."""
    make = lab()
    sp = make("ann", ["students"])
    sp.user_options = {"profile": "mig"}
    reached, go = asyncio.Event(), asyncio.Event()
    engine = sp.docker

    async def slow_create(method, *args, **kwargs):
        if method == "create_container":
            reached.set()
            await go.wait()
        return await engine(method, *args, **kwargs)

    sp.docker = slow_create
    start = asyncio.ensure_future(sp.start())
    await asyncio.wait_for(reached.wait(), 30)
    assert await sp.poll() is None  # still starting: not gone
    [held] = make.ledger.open_allocations()
    go.set()
    await start
    assert make.ledger.get(held.id).open and sp.allocation_id == held.id
    assert await sp.poll() is None  # and running


async def test_a_container_gone_from_the_engine_frees_its_slice_at_the_next_poll(lab):
    make = lab()
    sp = make("ann", ["students"])
    sp.user_options = {"profile": "mig"}
    await sp.start()
    aid = sp.allocation_id
    assert await sp.poll() is None
    sp.containers.clear()  # removed behind the hub's back
    assert await sp.poll() == 0
    assert make.ledger.get(aid).end_reason == "container-gone"

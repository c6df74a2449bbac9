"""The ledger's rules, on SQLite and on a real PostgreSQL."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
import sqlalchemy as sa
from ledger_support import LAB, backends, lab_inventory, make_url, new_ledger

from jupyterhub_gpulab import clock
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.ledger import Ledger, NoFreeSlice, QuotaExceeded, SchemaOutOfDate
from jupyterhub_gpulab.units import parse_bytes

GPU = SliceRequest(kind=SliceKind.GPU)
SEAT = SliceRequest(kind=SliceKind.SHARED)


def mig(profile):
    return SliceRequest(kind=SliceKind.MIG, mig_profile=profile)


@pytest.fixture(params=backends())
def ledger(request, tmp_path):
    led = new_ledger(request.param, tmp_path)
    yield led
    led.close()


def claim(ledger, request, user="alice", **kw):
    kw.setdefault("profile", "p")
    return ledger.claim(request, user=user, **kw)


def test_whole_gpu_is_best_fit(ledger):
    # 16 GiB T4 first, then the 24 GiB P40, then the 48 GiB A40.
    got = [claim(ledger, GPU, user=f"u{i}").slice.device_name for i in range(3)]
    assert got == ["Tesla T4", "Tesla P40", "NVIDIA A40"]
    with pytest.raises(NoFreeSlice) as e:
        claim(ledger, GPU, user="u9")
    assert "No free whole GPU slice (0 of 3 free)" in e.value.message


def test_min_memory_and_model_constraints(ledger):
    big = SliceRequest(kind=SliceKind.GPU, min_memory_bytes=parse_bytes("20GiB"))
    assert claim(ledger, big).slice.device_name == "Tesla P40"
    a40 = SliceRequest(kind=SliceKind.GPU, model="a40")
    assert claim(ledger, a40, user="bob").slice.id == "GPU-a40-0001"
    with pytest.raises(NoFreeSlice) as e:
        claim(ledger, a40, user="carol")
    assert "(0 of 1 free)" in e.value.message


def test_mig_profile_is_matched_exactly(ledger):
    first = claim(ledger, mig("1g.5gb"), user="a").slice
    second = claim(ledger, mig("1g.5gb"), user="b").slice
    assert {first.id, second.id} == {"MIG-a100-1g-0", "MIG-a100-1g-1"}
    assert first.visible_id.startswith("MIG-")
    with pytest.raises(NoFreeSlice) as e:
        claim(ledger, mig("1g.5gb"), user="c")
    assert e.value.message.startswith("No free MIG 1g.5gb slice (0 of 2 free)")
    # other profiles are untouched
    assert claim(ledger, mig("3g.20gb"), user="c").slice.id == "MIG-a100-3g-0"


def test_unknown_mig_profile_says_the_lab_has_none(ledger):
    with pytest.raises(NoFreeSlice) as e:
        claim(ledger, mig("7g.80gb"))
    assert "(0 of 0 free)" in e.value.message
    assert "no slice of that kind" in e.value.message


def test_shared_seats_pack_onto_one_device(ledger):
    seats = [claim(ledger, SEAT, user=f"s{i}").slice for i in range(4)]
    assert [s.seat for s in seats] == [0, 1, 2, 3]
    assert {s.visible_id for s in seats} == {"GPU-t4s-0004"}
    # a released seat in the middle is reused before anything else
    ledger.release(ledger.open_allocations(user="s1")[0].id, "stopped")
    assert claim(ledger, SEAT, user="s9").slice.seat == 1


def test_release_is_idempotent_and_frees_the_slice(ledger):
    c = claim(ledger, mig("3g.20gb"))
    assert ledger.release(c.allocation.id, "stopped") is True
    assert ledger.release(c.allocation.id, "stopped") is False
    assert ledger.release(999_999, "stopped") is False
    closed = ledger.get(c.allocation.id)
    assert closed.end_reason == "stopped" and closed.ended_at is not None
    assert claim(ledger, mig("3g.20gb"), user="bob").slice.id == "MIG-a100-3g-0"


def test_user_limit_counts_named_servers(ledger):
    claim(ledger, SEAT, server_name="", user_limit=2)
    claim(ledger, SEAT, server_name="second", user_limit=2)
    with pytest.raises(QuotaExceeded) as e:
        claim(ledger, SEAT, server_name="third", user_limit=2)
    assert "You already hold 2 GPU slices" in e.value.message
    assert "Stop one of your servers" in e.value.message
    # the refused claim held nothing
    assert len(ledger.open_allocations(user="alice")) == 2


def test_group_cap_charges_the_first_group_with_room(ledger):
    groups = [("course-101", 1), ("students", 2)]
    a = claim(ledger, SEAT, user="a", charge_groups=groups)
    b = claim(ledger, SEAT, user="b", charge_groups=groups)
    c = claim(ledger, SEAT, user="c", charge_groups=groups)
    assert [x.allocation.charge_group for x in (a, b, c)] == ["course-101", "students", "students"]
    with pytest.raises(QuotaExceeded) as e:
        claim(ledger, SEAT, user="d", charge_groups=groups)
    assert "course-101 (1 of 1)" in e.value.message and "students (2 of 2)" in e.value.message
    assert ledger.open_by_group() == {"course-101": 1, "students": 2}
    # an uncapped group always has room
    assert (
        claim(ledger, SEAT, user="d", charge_groups=[("staff", None)]).allocation.charge_group
        == "staff"
    )


def test_drained_device_is_never_handed_out(ledger):
    held = claim(ledger, SEAT, user="holder")
    assert ledger.set_drained("GPU-t4s-0004", True, "fan failure")
    with pytest.raises(NoFreeSlice) as e:
        claim(ledger, SEAT)
    assert "(0 of 0 free)" in e.value.message
    assert "out of service for maintenance" in e.value.message
    assert ledger.out_of_service(SEAT) == 4
    # the holder keeps the slice; a rescan does not undrain it
    assert ledger.get(held.allocation.id).open
    ledger.sync_inventory(lab_inventory())
    with pytest.raises(NoFreeSlice):
        claim(ledger, SEAT)
    ledger.set_drained("GPU-t4s-0004", False)
    assert claim(ledger, SEAT).slice.device_uuid == "GPU-t4s-0004"
    assert ledger.set_drained("GPU-nope", True) is False


def test_vanished_slices_are_flagged_and_never_handed_out(ledger):
    held = claim(ledger, mig("1g.5gb"))
    # After a reboot the A100 comes back as one 7g.40gb instance.
    relaid = [dict(d) for d in LAB]
    relaid[0] = {**LAB[0], "mig": [{"uuid": "MIG-a100-7g-0", "profile": "7g.40gb"}]}
    report = ledger.sync_inventory(lab_inventory(relaid))
    assert set(report.vanished) == {
        "MIG-a100-3g-0",
        "MIG-a100-2g-0",
        "MIG-a100-1g-0",
        "MIG-a100-1g-1",
    }
    assert [a.id for a in report.vanished_held] == [held.allocation.id]
    assert report.added == ("MIG-a100-7g-0",)
    with pytest.raises(NoFreeSlice):
        claim(ledger, mig("1g.5gb"), user="bob")
    assert claim(ledger, mig("7g.40gb"), user="bob").slice.id == "MIG-a100-7g-0"
    # releasing the stale allocation does not bring the slice back
    ledger.release(held.allocation.id, "admin")
    with pytest.raises(NoFreeSlice):
        claim(ledger, mig("1g.5gb"), user="carol")


def test_threads_never_double_allocate(ledger):
    # 40 threads race for the 4 seats.
    def one(i):
        try:
            return claim(ledger, SEAT, user=f"t{i}").slice.id
        except NoFreeSlice:
            return None

    with ThreadPoolExecutor(8) as pool:
        got = [x for x in pool.map(one, range(40)) if x]
    assert len(got) == len(set(got)) == 4
    assert ledger.double_allocations() == []


def test_the_database_itself_refuses_a_second_open_allocation(ledger):
    c = claim(ledger, SEAT)
    from jupyterhub_gpulab.ledger.schema import allocations

    with pytest.raises(sa.exc.IntegrityError), ledger.engine.begin() as conn:
        conn.execute(
            allocations.insert().values(
                slice_id=c.slice.id,
                user="mallory",
                server_name="",
                profile="p",
                node="local",
                share=1.0,
                started_at=clock.utcnow(),
            )
        )


def test_refusals_are_counted_by_reason(ledger, monkeypatch):
    ledger.record_refusal("a", "p", "quota", "x")
    ledger.record_refusal("b", "p", "quota", "x")
    ledger.record_refusal("c", "p", "no-free-slice", "x")
    since = clock.utcnow() - timedelta(hours=24)
    assert ledger.refusals_since(since) == {"quota": 2, "no-free-slice": 1}


class Told(Exception):
    """What a spawner's refusal callback builds: ``reason`` and ``message``, as SpawnRefused."""

    def __init__(self, reason, message):
        super().__init__(message)
        self.reason, self.message = reason, message


def write_transactions(ledger):
    """A list that gets one entry per write transaction ``ledger`` begins from now on."""
    seen = []

    @sa.event.listens_for(ledger.engine, "begin")
    def _begin(conn):
        if not conn.get_execution_options().get("gpulab_read"):
            seen.append(conn)

    return seen


@pytest.mark.parametrize("refused_by", ["quota", "no-free-slice"])
def test_a_refused_claim_records_what_the_user_is_told_in_its_own_transaction(ledger, refused_by):
    # issue 21 item 6: a refused spawn was one write for the claim, then a second for its record
    claim(ledger, mig("3g.20gb"), user="ann")  # the only 3g.20gb slice
    kw = {"user_limit": 1} if refused_by == "quota" else {}
    writes = write_transactions(ledger)
    heard = []
    with pytest.raises(QuotaExceeded if refused_by == "quota" else NoFreeSlice) as e:
        claim(
            ledger,
            mig("3g.20gb"),
            user="ann" if refused_by == "quota" else "bob",
            profile="mig-big",
            refusal=lambda err: heard.append(err) or Told("told-" + err.reason, "Told: " + err.message),
            **kw,
        )  # fmt: skip
    assert len(writes) == 1  # the claim's own, nothing after it
    assert heard == [e.value] and e.value.refusal.message == "Told: " + e.value.message
    since = clock.utcnow() - timedelta(minutes=1)
    assert ledger.refusals_since(since) == {f"told-{refused_by}": 1}
    who = "ann" if refused_by == "quota" else "bob"
    assert ledger.last_refusals([who], since) == {
        who: (f"told-{refused_by}", e.value.refusal.message)
    }
    assert len(ledger.open_allocations()) == 1  # only ann's first claim holds anything


def test_a_refusal_callback_that_fails_records_nothing_and_holds_nothing(ledger):
    claim(ledger, mig("3g.20gb"), user="ann")

    def broken(err):
        raise RuntimeError("the message could not be built")

    with pytest.raises(RuntimeError):
        claim(ledger, mig("3g.20gb"), user="bob", refusal=broken)
    assert ledger.refusals_since(clock.utcnow() - timedelta(minutes=1)) == {}
    assert [a.user for a in ledger.open_allocations()] == ["ann"]


def test_a_granted_claim_never_calls_the_refusal_callback(ledger):
    called = []
    got = claim(ledger, mig("3g.20gb"), refusal=called.append)
    assert got.slice.mig_profile == "3g.20gb" and called == []
    assert ledger.refusals_since(clock.utcnow() - timedelta(minutes=1)) == {}


def test_cpu_requests_hold_nothing(ledger):
    with pytest.raises(ValueError):
        ledger.claim(SliceRequest(kind=None), user="a", profile="cpu")


@pytest.mark.parametrize("backend", backends())
def test_state_survives_a_restart(backend, tmp_path):
    url = make_url(backend, tmp_path)
    first = Ledger(url)
    first.sync_inventory(lab_inventory())
    held = first.claim(SEAT, user="a", profile="p")
    first.close()
    second = Ledger(url)
    second.sync_inventory(lab_inventory())
    assert [a.id for a in second.open_allocations()] == [held.allocation.id]
    assert second.claim(SEAT, user="b", profile="p").slice.seat == 1
    second.close()


def test_old_schema_is_refused_with_the_fix(tmp_path):
    from jupyterhub_gpulab.ledger import db

    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    engine = db.make_engine(url)
    db.upgrade(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num='0000'")
    engine.dispose()
    with pytest.raises(SchemaOutOfDate) as e:
        Ledger(url)
    assert "gpulab upgrade-db" in str(e.value)


def test_undraining_keeps_vanished_slices_out(ledger):
    relaid = [dict(d) for d in LAB]
    relaid[0] = {**LAB[0], "mig": [{"uuid": "MIG-a100-7g-0", "profile": "7g.40gb"}]}
    ledger.sync_inventory(lab_inventory(relaid))
    ledger.set_drained("GPU-a100-0000", True, "maintenance")
    ledger.set_drained("GPU-a100-0000", False)
    with pytest.raises(NoFreeSlice):
        claim(ledger, mig("1g.5gb"))
    assert claim(ledger, mig("7g.40gb")).slice.id == "MIG-a100-7g-0"
    present = {
        s["id"]: s["present"] for s in ledger.slices() if s["device_uuid"] == "GPU-a100-0000"
    }
    assert present == {
        "MIG-a100-7g-0": True,
        "MIG-a100-3g-0": False,
        "MIG-a100-2g-0": False,
        "MIG-a100-1g-0": False,
        "MIG-a100-1g-1": False,
    }


def test_migrations_build_exactly_the_schema_the_code_uses(tmp_path):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from jupyterhub_gpulab.ledger import db
    from jupyterhub_gpulab.ledger.schema import metadata

    engine = db.make_engine(f"sqlite:///{tmp_path / 'm.sqlite'}")
    db.upgrade(engine)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    engine.dispose()
    assert diff == [], "schema.py and the Alembic migrations disagree; add a migration"


def test_an_older_ledger_upgrades_and_keeps_its_allocations(tmp_path):
    from jupyterhub_gpulab.ledger import db

    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    engine = db.make_engine(url)
    db.upgrade(engine, "0001")
    engine.dispose()
    # a first-release ledger is refused with the fix…
    with pytest.raises(SchemaOutOfDate):
        Ledger(url)
    # …and upgraded on request, keeping everything
    engine = db.make_engine(url)
    db.upgrade(engine)
    engine.dispose()
    led = Ledger(url)
    led.sync_inventory(lab_inventory())
    held = led.claim(SEAT, user="a", profile="p")
    led.set_warning("a", "", "gpu-idle", "idle", clock.utcnow())
    assert [w.rule for w in led.warnings("a")] == ["gpu-idle"]
    assert led.open_allocations()[0].id == held.allocation.id
    led.close()


def test_warnings_and_amended_end_reasons(ledger):
    c = claim(ledger, SEAT, user="ann")
    due = clock.utcnow() + timedelta(minutes=10)
    ledger.set_warning("ann", "", "gpu-idle", "Your GPU has been idle", due)
    ledger.set_warning("ann", "", "gpu-idle", "Your GPU has been idle (updated)", due)
    ledger.set_warning("ann", "lab", "max-age", "Too old", due + timedelta(minutes=1))
    assert [(w.server_name, w.message) for w in ledger.warnings("ann")] == [
        ("", "Your GPU has been idle (updated)"),
        ("lab", "Too old"),
    ]
    assert ledger.clear_warnings("ann", "") == 1
    assert [w.server_name for w in ledger.warnings()] == ["lab"]
    # the culler's reason replaces "stopped" only after the spawner closed the allocation
    assert ledger.amend_end_reason(c.allocation.id, "culled:gpu-idle") is False
    ledger.release(c.allocation.id, "stopped")
    assert ledger.amend_end_reason(c.allocation.id, "culled:gpu-idle") is True
    assert ledger.get(c.allocation.id).end_reason == "culled:gpu-idle"
    assert ledger.amend_end_reason(c.allocation.id, "culled:idle") is False
    # usage for one user
    other = claim(ledger, SEAT, user="bob")
    start = clock.utcnow() - timedelta(hours=1)
    assert [a.user for a in ledger.allocations_between(start, clock.utcnow(), user="bob")] == [
        "bob"
    ]
    assert other.allocation.user == "bob"


@pytest.mark.parametrize("backend", [p for p in backends() if p.id == "postgresql"])
def test_a_claim_in_flight_does_not_hide_the_other_free_slices(backend, tmp_path):
    """PostgreSQL, two hub replicas: while one claim is in flight (its candidate rows locked),
    a second claim gets another free seat instead of a false 'no free slice'."""
    import threading

    url = make_url(backend, tmp_path)
    first, second = Ledger(url), Ledger(url)
    first.sync_inventory(lab_inventory())
    in_flight, go_on = threading.Event(), threading.Event()
    real_try_hold = first._try_hold

    def slow_try_hold(*args, **kw):
        in_flight.set()
        go_on.wait(10)
        return real_try_hold(*args, **kw)

    first._try_hold = slow_try_hold
    result = {}
    t = threading.Thread(
        target=lambda: result.setdefault("a", first.claim(SEAT, user="a", profile="p"))
    )
    t.start()
    try:
        assert in_flight.wait(10)
        got = second.claim(SEAT, user="b", profile="p")
    finally:
        go_on.set()
        t.join(10)
    assert got.slice.id != result["a"].slice.id
    assert second.double_allocations() == []
    first.close()
    second.close()

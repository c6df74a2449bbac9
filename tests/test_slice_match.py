""" "Does this slice satisfy this request": one rule, in Python (``SliceRequest.matches``, used
to check profiles against the inventory) and in SQL (``ledger.queries.slice_filter``, used by
the claim and by the capacity counts). Generated slices and requests; both forms must pick the
same slices, on SQLite and (when ``GPULAB_TEST_POSTGRES_URL`` is set) on PostgreSQL."""

from __future__ import annotations

import os
import uuid
from datetime import datetime, timezone

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyterhub_gpulab.inventory.model import Slice, SliceKind, SliceRequest, cc_key, driver_key
from jupyterhub_gpulab.ledger.queries import slice_filter
from jupyterhub_gpulab.ledger.schema import devices, metadata, slices

GiB = 2**30
NOW = datetime(2026, 3, 2, tzinfo=timezone.utc)
NAMES = ["NVIDIA A100-SXM4-40GB", "NVIDIA A40", "Tesla T4", "NVIDIA H100 80GB HBM3", "GRID A_00%"]
PROFILES = [None, "1g.10gb", "2g.20gb", "1g.5gb"]
#: Substrings of the names above in other cases, and the LIKE wildcards a raw LIKE would honour.
MODELS = [None, "", "a100", "A40", "t4", "h100", "nvidia", "_", "%", "a_00%", "A_0", "x"]
#: Devices' compute capabilities and drivers (None: unknown), and images' minimums and maximums:
#: Pascal to Blackwell (12.0 sorts above 7.5 and 9.0 as a number, not as text; 8.6 is within an
#: sm_80 build's major), R535 to R590.
CCS = [None, (6, 1), (7, 5), (8, 0), (8, 6), (9, 0), (10, 0), (12, 0)]
DRIVERS = [None, (535, 183, 1), (580, 65, 6), (580, 95, 5), (590, 44, 1)]


@st.composite
def a_slice(draw, i: int = 0) -> Slice:
    kind = draw(st.sampled_from(list(SliceKind)))
    return Slice(
        id=f"S-{draw(st.uuids())}",
        kind=kind,
        device_uuid="GPU-match",
        device_index=0,
        device_name=draw(st.sampled_from(NAMES)),
        memory_bytes=draw(st.sampled_from([5, 10, 16, 40, 80])) * GiB,
        visible_id="GPU-match",
        # a whole GPU or a seat with a MIG profile never comes from an inventory; the rule
        # still has one answer for it
        mig_profile=draw(st.sampled_from(PROFILES)),
        compute_capability=draw(st.sampled_from(CCS)),
        driver_version=draw(st.sampled_from(DRIVERS)),
    )


requests = st.builds(
    SliceRequest,
    kind=st.sampled_from(list(SliceKind)),
    min_memory_bytes=st.sampled_from([0, 10 * GiB, 40 * GiB, 81 * GiB]),
    model=st.sampled_from(MODELS),
    mig_profile=st.sampled_from(PROFILES),
    min_compute_capability=st.sampled_from(CCS),
    min_driver=st.sampled_from(DRIVERS),
    max_compute_capability=st.sampled_from(CCS),
)


def _engines():
    yield pytest.param("sqlite://", id="sqlite")
    url = os.environ.get("GPULAB_TEST_POSTGRES_URL")
    if url:
        yield pytest.param(url, id="postgresql")


@pytest.fixture(params=list(_engines()))
def table_conn(request):
    """A connection where ``devices`` and ``slices`` live in a scratch schema (PostgreSQL)."""
    engine = sa.create_engine(request.param)
    schema = None
    if engine.dialect.name == "postgresql":
        schema = f"match_{uuid.uuid4().hex[:12]}"
        with engine.begin() as conn:
            conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    conn = engine.connect().execution_options(schema_translate_map={None: schema})
    _create(conn)
    conn.commit()
    try:
        yield conn
    finally:
        conn.close()
        if schema:
            with engine.begin() as c:
                c.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        engine.dispose()


def _create(conn) -> None:
    """The ``devices`` and ``slices`` tables, with the device every generated slice is on."""
    metadata.create_all(conn, tables=[devices, slices])
    conn.execute(
        devices.insert(),
        [
            {"uuid": u, "index": 0, "name": "x", "memory_bytes": GiB, "updated_at": NOW}
            for u in ("GPU-match", "GPU-1")
        ],
    )


def _rows(found: list[Slice]) -> list[dict]:
    return [
        {
            "id": s.id, "kind": s.kind.value, "device_uuid": s.device_uuid, "node": s.node,
            "device_index": s.device_index, "device_name": s.device_name,
            "memory_bytes": s.memory_bytes, "visible_id": s.visible_id, "share": s.share,
            "mig_profile": s.mig_profile, "rank": 0, "present": True, "available": True,
            "cc_key": cc_key(s.compute_capability), "driver_key": driver_key(s.driver_version),
        }
        for s in found
    ]  # fmt: skip


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(found=st.lists(a_slice(), min_size=1, max_size=12, unique_by=lambda s: s.id), req=requests)
def test_the_sql_filter_picks_exactly_the_slices_the_python_rule_accepts(table_conn, found, req):
    conn = table_conn
    conn.execute(slices.delete())
    conn.execute(slices.insert(), _rows(found))
    by_sql = set(conn.execute(sa.select(slices.c.id).where(*slice_filter(req))).scalars())
    conn.rollback()
    by_python = {s.id for s in found if req.matches(s)}
    assert by_sql == by_python, req


def test_the_copies_used_to_disagree_on_mig_profile_and_wildcards():
    # The capacity count took a whole GPU carrying a MIG profile for a whole GPU, the claim did
    # not; and SQL's LIKE read "_" in a model as any character where Python read a character.
    odd = Slice("GPU-1/odd", SliceKind.GPU, "GPU-1", 0, "NVIDIA A40", 48 * GiB, "GPU-1",
                mig_profile="1g.10gb")  # fmt: skip
    a40 = Slice("GPU-1", SliceKind.GPU, "GPU-1", 0, "NVIDIA A40", 48 * GiB, "GPU-1")
    cases = [(SliceRequest(SliceKind.GPU), odd), (SliceRequest(SliceKind.GPU, model="A_0"), a40)]
    engine = sa.create_engine("sqlite://")
    with engine.begin() as conn:
        _create(conn)
        conn.execute(slices.insert(), _rows([odd, a40]))
        for req, s in cases:
            assert not req.matches(s)
            found = conn.execute(sa.select(slices.c.id).where(*slice_filter(req))).scalars()
            assert s.id not in set(found)


def test_an_image_needing_cuda_13_skips_a_p40_but_not_an_unknown_device():
    p40 = Slice("GPU-p40", SliceKind.GPU, "GPU-1", 0, "Tesla P40", 24 * GiB, "GPU-p40",
                compute_capability=(6, 1), driver_version=(580, 95, 5))  # fmt: skip
    old_driver = Slice("GPU-t4", SliceKind.GPU, "GPU-1", 1, "Tesla T4", 16 * GiB, "GPU-t4",
                       compute_capability=(7, 5), driver_version=(535, 183, 1))  # fmt: skip
    fine = Slice("GPU-l4", SliceKind.GPU, "GPU-1", 2, "NVIDIA L4", 24 * GiB, "GPU-l4",
                 compute_capability=(8, 9), driver_version=(580, 95, 5))  # fmt: skip
    unknown = Slice("GPU-v", SliceKind.GPU, "GPU-1", 3, "GRID A40-8Q", 8 * GiB, "GPU-v")
    cuda13 = SliceRequest(SliceKind.GPU, min_compute_capability=(7, 5), min_driver=(580, 65, 6))
    engine = sa.create_engine("sqlite://")
    with engine.begin() as conn:
        _create(conn)
        conn.execute(slices.insert(), _rows([p40, old_driver, fine, unknown]))
        found = set(conn.execute(sa.select(slices.c.id).where(*slice_filter(cuda13))).scalars())
    assert found == {"GPU-l4", "GPU-v"}
    assert {s.id for s in (p40, old_driver, fine, unknown) if cuda13.matches(s)} == found
    assert cuda13.unrestricted.matches(p40)

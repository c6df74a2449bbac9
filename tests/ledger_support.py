"""Shared helpers for ledger tests: a small lab inventory, per-backend empty databases, and a
real hub's lab emptied between tests (:func:`empty_lab`)."""

from __future__ import annotations

import os

import pytest
import sqlalchemy as sa

from jupyterhub_gpulab.inventory import load_declared
from jupyterhub_gpulab.ledger import Ledger

POSTGRES_URL = os.environ.get("GPULAB_TEST_POSTGRES_URL")

#: A100-40GB in MIG mode (3g.20gb + 2g.10gb + 2 × 1g.5gb), an A40, a 16 GiB T4 and a 24 GiB P40
#: as whole GPUs, and a T4 split into 4 seats of 4 GiB.
LAB = [
    {
        "uuid": "GPU-a100-0000",
        "index": 0,
        "name": "NVIDIA A100-SXM4-40GB",
        "memory": "40GiB",
        "mig": [
            {"uuid": "MIG-a100-3g-0", "profile": "3g.20gb"},
            {"uuid": "MIG-a100-2g-0", "profile": "2g.10gb"},
            {"uuid": "MIG-a100-1g-0", "profile": "1g.5gb"},
            {"uuid": "MIG-a100-1g-1", "profile": "1g.5gb"},
        ],
    },
    {"uuid": "GPU-a40-0001", "index": 1, "name": "NVIDIA A40", "memory": "48GiB"},
    {"uuid": "GPU-t4-0002", "index": 2, "name": "Tesla T4", "memory": "16GiB"},
    {"uuid": "GPU-p40-0003", "index": 3, "name": "Tesla P40", "memory": "24GiB"},
    {
        "uuid": "GPU-t4s-0004",
        "index": 4,
        "name": "Tesla T4",
        "memory": "16GiB",
        "shared": {"seats": 4, "memory_per_seat": "3.5GiB", "compute_share": 0.25},
    },
]


def seats_lab(gpus: int = 1, *, seats: int, memory_per_seat: str) -> list[dict]:
    """A declared lab (``c.GPULab.inventory`` form) of ``gpus`` 16 GiB Tesla T4s (``GPU-t4s-<i>``,
    index ``i``), each split into ``seats`` shared seats of ``memory_per_seat`` (e.g. ``"4GiB"``)
    and a compute share of ``1/seats``; no other slices."""
    return [
        {
            "uuid": f"GPU-t4s-{i}",
            "index": i,
            "name": "Tesla T4",
            "memory": "16GiB",
            "shared": {
                "seats": seats,
                "memory_per_seat": memory_per_seat,
                "compute_share": 1 / seats,
            },
        }
        for i in range(gpus)
    ]


def lab_inventory(spec=None):
    """The inventory of the declared lab ``spec`` (default :data:`LAB`)."""
    return load_declared(spec or LAB)


def reset_postgres(url: str) -> None:
    """Drop every table of the test database so each test starts from an empty schema."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP SCHEMA public CASCADE")
        conn.exec_driver_sql("CREATE SCHEMA public")
    engine.dispose()


def backends():
    """The database backends to run ledger tests on: SQLite always, PostgreSQL when configured.
    In CI (``CI=true``) PostgreSQL is required, so a missing server fails instead of skipping."""
    params = [pytest.param("sqlite", id="sqlite")]
    marks = [pytest.mark.postgres]
    if not POSTGRES_URL and not os.environ.get("CI"):
        marks.append(
            pytest.mark.skip(
                reason="GPULAB_TEST_POSTGRES_URL not set (scripts/ensure-postgres.sh prints one)"
            )
        )
    params.append(pytest.param("postgresql", id="postgresql", marks=marks))
    return params


def make_url(backend: str, tmp_path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'gpulab.sqlite'}"
    assert POSTGRES_URL, "CI needs GPULAB_TEST_POSTGRES_URL: .ci/run starts PostgreSQL and sets it"
    reset_postgres(POSTGRES_URL)
    return POSTGRES_URL


def lab_url(backend: str, tmp_path, spec=None) -> str:
    """The URL of an empty database on ``backend`` (:func:`make_url`) once it holds the declared
    lab ``spec`` (default :data:`LAB`); the ledger that wrote it is closed."""
    url = make_url(backend, tmp_path)
    setup = Ledger(url)
    setup.sync_inventory(lab_inventory(spec))
    setup.close()
    return url


def new_ledger(backend: str, tmp_path, inventory=None) -> Ledger:
    ledger = Ledger(make_url(backend, tmp_path))
    ledger.sync_inventory(inventory or lab_inventory())
    return ledger


def release_all(ledger: Ledger) -> None:
    """Release every open allocation of ``ledger`` (reason ``test-cleanup``)."""
    for a in ledger.open_allocations():
        ledger.release(a.id, "test-cleanup")


def undrain_all(ledger: Ledger) -> None:
    """Return every drained device of ``ledger`` to service."""
    for d in ledger.devices():
        if d["drained"]:
            ledger.set_drained(d["uuid"], False)


def empty_lab(hub, ledger: Ledger, *, users=None, warnings: bool = False) -> None:
    """Leave ``hub``'s lab as a test found it: no server of ``users`` running (default: anyone's,
    ``hubtools.Hub.stop_all_servers``), no allocation open in ``ledger`` (released as
    ``test-cleanup``), and with ``warnings`` no notice left for those users (all who have one)."""
    hub.stop_all_servers(users)
    release_all(ledger)
    if warnings:
        for name in users if users is not None else {w.user for w in ledger.warnings()}:
            ledger.clear_warnings(name)

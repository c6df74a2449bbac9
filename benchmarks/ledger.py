"""Claim+release latency through the ledger's real code path, every rule live, at 100, 1,000
and 10,000 slices, on SQLite (a file in WAL mode, the default deployment) and PostgreSQL.

For each size the lab is filled to 50 % and to *full* (every slice held but ``HEADROOM`` of each
kind: a nearly full lab must not get slower to search), then ``ROUNDS`` claim+release pairs are
timed (wall clock; one pair = one claim and its release, two committed transactions). The
inventory mixes MIG 1g.10gb slices (A100-80GB, 7 each) and shared seats (24 per P40); the
requests alternate between the two kinds. Every rule of the claim is live, as in a lab in term:

- **bookings that keep seats**: a course booking of ``KEEP`` slices of each kind protects now,
  two of each claimed by its members (charged to it), the rest kept free from the bench's users;
- **a non-empty waitlist**: ``WAITERS`` users queued for the bench's profile ahead of everyone,
  so each claim passes the waitlist's gate (it counts the free slices against the queue);
- **holds**: two offers held (an allocation with ``hold_until``, no server) for queued users;
- **image needs**: every request carries the profile image's minimum compute capability and
  driver (``min_compute_capability`` 6.0, ``min_driver`` 535), matched against the devices';
- **limits**: a per-user cap and a group cap counted in the claim's transaction.

The alternative measured in the same run is the obvious design without the ``held_by`` mirror:
"free" is an anti-join against open allocations (``NOT EXISTS``) everywhere the claim asks it
(search, waitlist gate), and claim/release write only the allocation row; the same unique index
keeps it safe. Both sides run on ledgers prepared alike, interleaved round by round (ABBA) with
the same requests and the same number of rounds, so a load spike on the machine falls on both.

After those rounds each side also runs ``--alone`` pairs in one block of its own (a diagnostic,
not the comparison; after, so the interleaved rounds run on ledgers exactly as before):
interleaved, a side's claim runs right after the other side's, so at 10,000 slices ours runs in
CPU caches the naive side's 8-15 ms scan has just filled with its own pages, and at 100 slices
after a 0.8 ms claim that left them warm. Ours measured in a block shows how much of its
interleaved growth with the lab is that, not its own work (2026-12-07, six runs: p50 0.53-0.67
ms at every size in a block; interleaved 0.60-0.70 ms at 100 and 0.87-1.17 ms at 10,000; the
claim's statements sent bare through ``sqlite3``, none of our Python, grew 1.3-1.5x interleaved
too).

Usage: ``python benchmarks/ledger.py [--rounds N] [--alone N] [--sizes 100,1000,10000]
[--postgres URL]``;
``--postgres`` also runs every case on that database (two fresh schemas made in it and dropped
after; ``GPULAB_TEST_POSTGRES_URL`` when given as ``env``). ``--small`` (the test suite's,
seconds): 40 rounds at 100 and 300 slices, SQLite only. The last line printed is one JSON object:
``p99_ms_<n>`` / ``naive_p99_ms_<n>`` (worst of the two fills), ``scaling_*`` (p99 at the largest
size over the smallest), ``ours_slower_cases`` (cases where ours' p99 exceeded naive's),
``alone_p50_ms_<n>`` / ``alone_p99_ms_<n>`` / ``alone_scaling_*`` (ours in its block, the same
reductions; ``naive_alone_*`` the naive side's), the
same under ``postgresql`` when run, ``loadavg_1m`` (before, after) and ``double_allocations``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa

from jupyterhub_gpulab import clock
from jupyterhub_gpulab.inventory import SliceKind, SliceRequest, load_declared
from jupyterhub_gpulab.ledger import Ledger
from jupyterhub_gpulab.ledger.models import Allocation
from jupyterhub_gpulab.ledger.schema import allocations, slices

NEEDS = {"min_compute_capability": (6, 0), "min_driver": (535,)}
MIG = SliceRequest(kind=SliceKind.MIG, mig_profile="1g.10gb", **NEEDS)
SEAT = SliceRequest(kind=SliceKind.SHARED, **NEEDS)
#: what a course books (its profile's request, no image needs)
MIG_BOOKED = SliceRequest(kind=SliceKind.MIG, mig_profile="1g.10gb")
SEAT_BOOKED = SliceRequest(kind=SliceKind.SHARED)
KEEP = 4  # slices of each kind a course booking keeps
WAITERS = 3  # users queued for the bench's profile
HEADROOM = 12  # free slices of each kind in a "full" lab (the booking and the queue need some)
LIMITS = {"user_limit": 4, "charge_groups": [("students", 1_000_000)], "groups": ["students"]}


def lab_spec(n_slices: int) -> list[dict]:
    """Half the slices as MIG 1g.10gb on A100-80GB (7 per GPU), half as P40 seats (24 per GPU)."""
    spec, index = [], 0
    n_mig = n_slices // 2
    host = {"driver_version": "550.54.15"}
    while n_mig > 0:
        k = min(7, n_mig)
        spec.append(
            {
                "uuid": f"GPU-a100-{index:06d}",
                "index": index,
                "name": "NVIDIA A100-SXM4-80GB",
                "memory": "80GiB",
                "compute_capability": "8.0",
                "mig": [{"uuid": f"MIG-{index:06d}-{j}", "profile": "1g.10gb"} for j in range(k)],
                **host,
            }
        )
        n_mig -= k
        index += 1
    n_seat = n_slices - n_slices // 2
    while n_seat > 0:
        k = min(24, n_seat)
        spec.append(
            {
                "uuid": f"GPU-p40-{index:06d}",
                "index": index,
                "name": "Tesla P40",
                "memory": "24GiB",
                "compute_capability": "6.1",
                "shared": {"seats": k, "memory_per_seat": "1GiB", "compute_share": 1 / 24},
                **host,
            }
        )
        n_seat -= k
        index += 1
    return spec


class NaiveLedger(Ledger):
    """The design without the ``held_by`` mirror: every rule as in :class:`Ledger`, but "free"
    is ``NOT EXISTS`` an open allocation, and a claim or release writes the allocation only
    (its database drops the triggers that keep the mirror)."""

    def __init__(self, url, *, engine=None):
        super().__init__(url, engine=engine)
        on = " ON allocations" if self.dialect == "postgresql" else ""
        with self.engine.begin() as conn:
            for trigger in ("tr_allocations_open_holds_slice", "tr_allocations_close_frees_slice"):
                conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {trigger}{on}")

    def _free_clauses(self):
        open_alloc = (
            sa.select(allocations.c.id)
            .where(allocations.c.slice_id == slices.c.id, allocations.c.ended_at.is_(None))
            .exists()
        )
        return (slices.c.available == sa.true(), ~open_alloc)

    def _try_hold(
        self, conn, row, user, server_name, profile, node, charge_group, booking_id=None,
        hold_until=None,
    ):  # fmt: skip
        values = {
            "slice_id": row.id, "user": user, "server_name": server_name, "profile": profile,
            "node": node or row.node, "charge_group": charge_group, "share": row.share,
            "started_at": clock.utcnow(), "booking_id": booking_id, "hold_until": hold_until,
        }  # fmt: skip
        nested = conn.begin_nested() if self.dialect != "sqlite" else None
        try:
            aid = conn.execute(allocations.insert().returning(allocations.c.id), values)
            aid = aid.scalar_one()
        except sa.exc.IntegrityError:
            if nested is not None:
                nested.rollback()
            return None
        if nested is not None:
            nested.commit()
        return Allocation(id=aid, container_id=None, container_name=None, ended_at=None,
                          end_reason=None, **values)  # fmt: skip

    def release(self, allocation_id, reason, *, only_hold=False):
        with self._write() as conn:
            done = conn.execute(
                allocations.update()
                .where(allocations.c.id == allocation_id, allocations.c.ended_at.is_(None))
                .values(ended_at=clock.utcnow(), end_reason=reason)
            ).rowcount
        return done == 1


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def fill(ledger: Ledger, ids: list[str]) -> None:
    """Hold ``ids`` with filler allocations written in bulk (a claim each would take minutes at
    10,000 slices); ours' database marks the slices held as a claim's INSERT does (its trigger),
    the naive's has no mirror."""
    now = clock.utcnow()
    rows = [
        {"slice_id": sid, "user": f"filler{i % 500}", "server_name": "", "profile": "bench",
         "node": "local", "share": 1.0, "started_at": now}
        for i, sid in enumerate(ids)
    ]  # fmt: skip
    with ledger.engine.begin() as conn:
        if rows:
            conn.execute(allocations.insert(), rows)


def prepare(cls: type[Ledger], n_slices: int, fill_to: float, url: str, engine=None) -> Ledger:
    """A ledger of ``n_slices`` with each kind held to ``fill_to`` (1.0: all but ``HEADROOM``),
    holes scattered at random (seeded by the size: two ledgers prepared alike hold the same
    slices), then every rule made live (module docstring) through the ledger's own calls."""
    ledger = cls(url, engine=engine)
    ledger.sync_inventory(load_declared(lab_spec(n_slices)))
    rng = random.Random(n_slices)
    taken = []
    for kind in ("mig", "shared"):
        ids = sorted(s["id"] for s in ledger.slices() if s["kind"] == kind)
        taken += rng.sample(ids, min(int(len(ids) * fill_to), len(ids) - HEADROOM))
    fill(ledger, taken)
    now = clock.utcnow()
    for booked, name in ((SEAT_BOOKED, "seat"), (MIG_BOOKED, "mig")):
        ledger.book(
            holder="DL101", groups=["dl101"], profile=f"course-{name}", request=booked,
            count=KEEP, starts_at=now - timedelta(minutes=5), ends_at=now + timedelta(hours=2),
            grace_s=3600, ref=f"bench/{name}",
        )  # fmt: skip
        for i in range(2):  # two members took their seats
            ledger.claim(booked, user=f"member{i}", profile=f"course-{name}", groups=["dl101"])
    for i in range(2):  # two offers held for queued users
        ledger.claim(SEAT, user=f"held{i}", profile="bench",
                     hold_until=now + timedelta(hours=1))  # fmt: skip
    for i in range(WAITERS):
        ledger.join_waitlist(f"waiter{i}", "bench", SEAT_BOOKED)
    for i in range(50):  # warm-up
        c = ledger.claim(SEAT if i % 2 else MIG, user="warm", profile="bench", **LIMITS)
        ledger.release(c.allocation.id, "stopped")
    return ledger


def rules_live(ledger: Ledger) -> list[str]:
    """The rules that bind a bench user's claim in ``ledger``, as the ledger itself reports
    them (a rule left out here was not exercised)."""
    live = []
    if ledger.reserved_for_others(SEAT, LIMITS["groups"], "bench"):
        live.append("bookings")
    if ledger.waitlist("bench"):
        live.append("waitlist")
    if any(a.hold_until is not None for a in ledger.open_allocations()):
        live.append("holds")
    if SEAT.min_compute_capability and SEAT.min_driver:
        live.append("image-needs")
    if LIMITS["user_limit"] is not None and LIMITS["charge_groups"]:
        live.append("limits")
    return live


class Databases:
    """Where each case's two ledgers live: SQLite files under ``workdir``, or two fresh schemas
    of one PostgreSQL database (``url``), dropped when the case ends."""

    def __init__(self, workdir: Path, url: str | None = None):
        self.workdir, self.url, self.made = workdir, url, []

    def ledger(self, cls, n, fill_to, tag) -> Ledger:
        if self.url is None:
            return prepare(cls, n, fill_to, f"sqlite:///{self.workdir / f'{tag}.sqlite'}")
        from jupyterhub_gpulab.ledger import db

        schema = f"gpulab_bench_{os.getpid()}_{tag.replace('-', '_')}"
        admin = sa.create_engine(self.url)
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
        admin.dispose()
        self.made.append(schema)
        engine = db.make_engine(self.url)  # the deployment's pool settings

        @sa.event.listens_for(engine, "connect")
        def _schema(dbapi_conn, _record):
            with dbapi_conn.cursor() as cur:
                cur.execute(f"SET search_path TO {schema}")
            dbapi_conn.commit()

        return prepare(cls, n, fill_to, self.url, engine=engine)

    def drop(self) -> None:
        if self.url is None or not self.made:
            return
        admin = sa.create_engine(self.url)
        with admin.begin() as conn:
            for schema in self.made:
                conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        admin.dispose()
        self.made = []


def timed_pair(ledger: Ledger, i: int, user: str) -> float:
    """One claim+release of round ``i``'s request (MIG and seats in turn), in milliseconds."""
    t0 = time.perf_counter()
    c = ledger.claim(MIG if i % 2 else SEAT, user=user, profile="bench", **LIMITS)
    ledger.release(c.allocation.id, "stopped")
    return (time.perf_counter() - t0) * 1000


def measure(
    n_slices: int, fill_to: float, rounds: int, dbs: Databases, alone: int = 0
) -> dict[str, dict]:
    """``rounds`` claim+release pairs on each side (``ours``, ``naive``), interleaved round by
    round (ABBA, so neither side always goes first) on two ledgers prepared alike, each round
    asking both sides the same request: the load of the machine falls on both alike. After
    them, ``alone`` pairs of each side in a block of its own (module docstring)."""
    tag = f"{n_slices}_{int(fill_to * 100)}"
    ledgers = {"ours": dbs.ledger(Ledger, n_slices, fill_to, f"{tag}_ours"),
               "naive": dbs.ledger(NaiveLedger, n_slices, fill_to, f"{tag}_naive")}  # fmt: skip
    times: dict[str, list[float]] = {"ours": [], "naive": []}
    firsts: list[str] = []
    live = {side: rules_live(ledger) for side, ledger in ledgers.items()}
    try:
        for i in range(rounds):
            order = ("ours", "naive") if i % 4 in (0, 3) else ("naive", "ours")
            firsts.append(order[0])
            for side in order:
                times[side].append(timed_pair(ledgers[side], i, f"u{i}"))
        by_itself = {
            side: [timed_pair(ledger, i, f"a{i}") for i in range(alone)]
            for side, ledger in ledgers.items()
        }
        out = {}
        for side, ledger in ledgers.items():
            out[side] = {
                "p50_ms": round(statistics.median(times[side]), 3),
                "p99_ms": round(pct(times[side], 99), 3),
                "alone_p50_ms": round(statistics.median(by_itself[side]), 3) if alone else None,
                "alone_p99_ms": round(pct(by_itself[side], 99), 3) if alone else None,
                "double_allocations": len(ledger.double_allocations()),
                "rules": live[side],
                "timed": len(times[side]),
            }
        out["first_side"] = firsts
    finally:
        for ledger in ledgers.values():
            ledger.close()
        dbs.drop()
    return out


FILLS = (0.5, 1.0)


def run_backend(name: str, sizes: list[int], rounds: int, dbs: Databases, alone: int = 0) -> dict:
    """Every size and fill on one backend: the summary figures (module docstring)."""
    out: dict = {}
    for n in sizes:
        for fill_to in FILLS:
            r = measure(n, fill_to, rounds, dbs, alone)
            out[(n, fill_to)] = r
            for side in ("ours", "naive"):
                print(
                    f"{name:10s} {side:6s} {n:>6} slices, {'full' if fill_to == 1 else '50%'}: "
                    f"p50 {r[side]['p50_ms']:.3f} ms  p99 {r[side]['p99_ms']:.3f} ms"
                    + (
                        f"  (alone: p50 {r[side]['alone_p50_ms']:.3f} ms  "
                        f"p99 {r[side]['alone_p99_ms']:.3f} ms)"
                        if alone
                        else ""
                    ),
                    file=sys.stderr,
                )
    summary: dict = {}
    slower = []
    for n in sizes:
        for side, prefix in (("ours", ""), ("naive", "naive_")):
            summary[f"{prefix}p50_ms_{n}"] = max(out[(n, f)][side]["p50_ms"] for f in FILLS)
            summary[f"{prefix}p99_ms_{n}"] = max(out[(n, f)][side]["p99_ms"] for f in FILLS)
            summary[f"{prefix}p99_ms_{n}_full"] = out[(n, 1.0)][side]["p99_ms"]
            if alone:
                for q in ("p50", "p99"):
                    summary[f"{prefix}alone_{q}_ms_{n}"] = max(
                        out[(n, f)][side][f"alone_{q}_ms"] for f in FILLS
                    )
        for f in FILLS:
            if out[(n, f)]["ours"]["p99_ms"] > out[(n, f)]["naive"]["p99_ms"]:
                slower.append(f"{n}-{'full' if f == 1 else '50pct'}")
    lo, hi = min(sizes), max(sizes)
    key = f"scaling_{hi // 1000}k_over_{lo}" if hi % 1000 == 0 else f"scaling_{hi}_over_{lo}"
    summary[key] = round(summary[f"p99_ms_{hi}"] / summary[f"p99_ms_{lo}"], 3)
    summary["naive_" + key] = round(
        summary[f"naive_p99_ms_{hi}"] / summary[f"naive_p99_ms_{lo}"], 3
    )
    if alone:
        for prefix in ("", "naive_"):
            summary[f"{prefix}alone_{key}"] = round(
                summary[f"{prefix}alone_p99_ms_{hi}"] / summary[f"{prefix}alone_p99_ms_{lo}"], 3
            )
    summary["ours_slower_cases"] = slower
    # what each side timed, and who went first in the first case's rounds (ABBA): a run that does
    # not interleave, or times one side less, shows here
    summary["rounds_timed"] = {
        side: min(r[side]["timed"] for r in out.values()) for side in ("ours", "naive")
    }
    summary["first_side_by_round"] = out[(sizes[0], FILLS[0])]["first_side"][:8]
    rules = [r[side]["rules"] for r in out.values() for side in ("ours", "naive")]
    summary["rules"] = sorted(set(rules[0]).intersection(*rules), key=rules[0].index)
    summary["double_allocations"] = sum(
        r[side]["double_allocations"] for r in out.values() for side in ("ours", "naive")
    )
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--rounds", type=int, default=None, help="timed claim+release pairs per case (2000)"
    )
    ap.add_argument("--sizes", default=None, help="slice counts, comma-separated (100,1000,10000)")
    ap.add_argument(
        "--postgres",
        default=None,
        help="also run on this PostgreSQL URL (two schemas made and dropped per case); "
        "'env': $GPULAB_TEST_POSTGRES_URL",
    )
    ap.add_argument(
        "--alone",
        type=int,
        default=None,
        help="pairs of each side timed in a block of its own after the interleaved rounds "
        "(a diagnostic: module docstring; 1000); 0: none",
    )
    ap.add_argument(
        "--small", action="store_true", help="seconds: 40 rounds (40 alone), 100 and 300 slices"
    )
    args = ap.parse_args(argv)
    given = [f"--{k}" for k in ("rounds", "alone", "sizes") if getattr(args, k) is not None]
    if args.small and given:
        ap.error(f"--small sets --rounds, --alone and --sizes itself: drop {', '.join(given)}")
    small = (40, 40, "100,300") if args.small else (2000, 1000, "100,1000,10000")
    for k, default in zip(("rounds", "alone", "sizes"), small):
        if getattr(args, k) is None:
            setattr(args, k, default)
    if args.rounds < 1 or args.alone < 0:
        ap.error("--rounds must be at least 1 and --alone at least 0")
    if args.postgres == "env":
        args.postgres = os.environ.get("GPULAB_TEST_POSTGRES_URL") or None
        if not args.postgres:
            ap.error("--postgres env: GPULAB_TEST_POSTGRES_URL is not set")
    try:
        sizes = sorted({int(s) for s in args.sizes.split(",")})
    except ValueError:
        ap.error(f"--sizes takes slice counts separated by commas, not {args.sizes!r}")
    if sizes[0] < 2 * HEADROOM:
        ap.error(f"--sizes: at least {2 * HEADROOM} slices (each kind keeps {HEADROOM} free)")
    if len(sizes) < 2:
        ap.error("--sizes: at least two different sizes (the scaling figures compare them)")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="gpulab-bench-") as tmp:
        summary = run_backend("sqlite-wal", sizes, args.rounds, Databases(Path(tmp)), args.alone)
    summary["backend"] = "sqlite-wal"
    if args.postgres:
        pg = run_backend(
            "postgresql", sizes, args.rounds, Databases(Path("."), args.postgres), args.alone
        )
        summary["postgresql"] = pg
        summary["double_allocations"] += pg["double_allocations"]
    summary["rounds"], summary["alone_rounds"] = args.rounds, args.alone
    summary["loadavg_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

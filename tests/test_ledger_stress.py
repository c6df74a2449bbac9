"""Two OS processes with several threads each hammer one ledger; the database must never show a
slice with two open allocations, at any sampled moment or anywhere in the recorded history."""

from __future__ import annotations

import multiprocessing as mp
import random
import threading
import time
from collections import defaultdict
from datetime import datetime, timezone

import pytest
from ledger_support import backends, lab_inventory, make_url

from jupyterhub_gpulab.inventory import SliceKind, SliceRequest
from jupyterhub_gpulab.ledger import Ledger, LedgerRefusal

REQUESTS = [
    SliceRequest(kind=SliceKind.SHARED),
    SliceRequest(kind=SliceKind.GPU),
    SliceRequest(kind=SliceKind.MIG, mig_profile="1g.5gb"),
]
PROCESSES = 2
THREADS = 4


def _worker(url: str, seed: int, ops: int, out: mp.Queue) -> None:
    ledger = Ledger(url)
    done = [0]
    refused = [0]
    lock = threading.Lock()

    def thread(tid: int) -> None:
        rng = random.Random(seed * 100 + tid)
        held: list[int] = []
        for _ in range(ops // THREADS):
            if held and (rng.random() < 0.5 or len(held) >= 2):
                ledger.release(held.pop(rng.randrange(len(held))), "stopped")
            else:
                try:
                    c = ledger.claim(
                        rng.choice(REQUESTS),
                        user=f"p{seed}t{tid}",
                        profile="stress",
                        server_name=str(len(held)),
                    )
                    held.append(c.allocation.id)
                except LedgerRefusal:
                    with lock:
                        refused[0] += 1
            with lock:
                done[0] += 1
        for aid in held:
            ledger.release(aid, "stopped")

    threads = [threading.Thread(target=thread, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ledger.close()
    out.put((done[0], refused[0]))


@pytest.mark.slow
@pytest.mark.parametrize("backend", backends())
def test_two_processes_never_double_allocate(backend, tmp_path):
    url = make_url(backend, tmp_path)
    setup = Ledger(url)
    setup.sync_inventory(lab_inventory())
    total_ops = 10_000 if backend == "sqlite" else 4_000
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(url, seed, total_ops // PROCESSES, out))
        for seed in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    # Sample the live invariant from the database while the workers run.
    samples, seen_doubles = 0, []
    while any(p.is_alive() for p in procs):
        seen_doubles += setup.double_allocations()
        samples += 1
        time.sleep(0.02)
    for p in procs:
        p.join(timeout=300)
        assert p.exitcode == 0
    results = [out.get(timeout=10) for _ in procs]
    done = sum(d for d, _ in results)
    assert done >= total_ops - PROCESSES * THREADS
    assert samples > 5
    assert seen_doubles == []

    # The whole history: per slice, allocation intervals never overlap.
    history = defaultdict(list)
    everything = (
        datetime(2000, 1, 1, tzinfo=timezone.utc),
        datetime(2100, 1, 1, tzinfo=timezone.utc),
    )
    for a in setup.allocations_between(*everything):
        assert a.ended_at is not None, f"allocation {a.id} left open"
        history[a.slice_id].append((a.started_at, a.ended_at, a.id))
    claims = sum(len(v) for v in history.values())
    assert claims > 1000, "the workers should have claimed many times"
    for slice_id, spans in history.items():
        spans.sort()
        for (_s1, e1, a1), (s2, _e2, a2) in zip(spans, spans[1:]):
            assert e1 <= s2, f"slice {slice_id}: allocation {a2} started before {a1} ended"
    assert setup.double_allocations() == []
    assert all(s["held_by"] is None for s in setup.slices())
    setup.close()

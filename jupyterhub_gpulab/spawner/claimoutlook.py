"""Whether a start's claim needs the refusal read first: the free slices the last claim saw.

A start whose claim the ledger would refuse is refused on a read, on the hub's event loop, without
the trip to the ledger's writing thread (:meth:`~.reserve.ReservationMixin._refused_now`,
:mod:`jupyterhub_gpulab.ledger.readrefusal`). For a claim that is granted that read is wasted: it
runs every rule of the claim (about a millisecond at 1,000 open allocations), on the one loop
that serves the whole hub, and the claim then runs them again. In a storm of 1,000 starts over a
lab with slices to spare it was the largest part of gpulab's own work on the hub's loop
(``benchmarks/scale.py`` under py-spy: 0.9 ms of the 2 ms a start added there).

:class:`ClaimOutlook` remembers, per profile (and the node a start is bound to), how many other
free slices the last granted claim saw beside the one it took (:attr:`Claim.spare
<jupyterhub_gpulab.ledger.Claim.spare>`, read from the claim's own candidate rows, so it costs
nothing). While that is more than the claims of the profile the writer has not decided yet, the
next start claims at once; when it is not (the last free slices are being taken, a claim of
the profile was refused for want of a slice, or nothing is known yet), the refusal is decided on
a read as before. The outlook only picks the path: the claim's write transaction stays the one
thing that hands out a slice, and a claim it sends to the writer that the ledger refuses is
refused and recorded there, as every claim was before refusals were decided on a read.

The outlook is told on the ledger's writing thread, as each claim is decided: under a storm the
hub's loop resumes a start long after its claim was written, and counted until then, claims long
decided kept the next starts reading. One outlook per lab runtime (per hub process).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Hashable


class ClaimOutlook:
    """The free slices each profile's last granted claim saw, and the claims racing for them.
    Thread-safe: asked on the hub's loop, told on the ledger's writing thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spare: dict[Hashable, int] = {}
        self._racing: Counter = Counter()

    def take(self, key: Hashable) -> bool:
        """Whether a claim for ``key`` (a profile, and the node a start is bound to) may skip
        the refusal read: the last granted claim saw more spare than the claims for ``key``
        still undecided. ``True`` counts this claim among those until :meth:`settle`."""
        with self._lock:
            if self._spare.get(key, 0) <= self._racing[key]:
                return False
            self._racing[key] += 1
            return True

    def settle(self, key: Hashable, took: bool, spare: int | None, *, no_slice: bool = False):
        """A claim for ``key`` was decided: granted, seeing ``spare`` other free slices, or
        refused (``spare`` ``None``; ``no_slice``: for want of a free slice, so the next start
        reads first). ``took``: the claim had skipped the read (:meth:`take`)."""
        with self._lock:
            if took:
                self._racing[key] -= 1
                if self._racing[key] <= 0:
                    del self._racing[key]
            if spare is not None:
                self._spare[key] = spare
            elif no_slice:
                self._spare.pop(key, None)

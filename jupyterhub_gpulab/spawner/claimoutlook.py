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
nothing). While that is more than the starts of the profile already on their way to the writer,
the next start claims at once; when it is not (the last free slices are being taken, a claim of
the profile was refused for want of a slice, or nothing is known yet), the refusal is decided on
a read as before. The outlook only picks the path: the claim's write transaction stays the one
thing that hands out a slice, and a claim it sends to the writer that the ledger refuses is
refused and recorded there, as every claim was before refusals were decided on a read.

One outlook per lab runtime (per hub process), used on the hub's event loop only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterator
from contextlib import contextmanager


class ClaimOutlook:
    """The free slices each profile's last granted claim saw, and the claims racing for them."""

    def __init__(self) -> None:
        self._spare: dict[Hashable, int] = {}
        self._racing: Counter = Counter()

    def expect_granted(self, key: Hashable) -> bool:
        """Whether a claim for ``key`` (a profile, and the node a start is bound to) would find
        a free slice: the last granted claim saw more spare than the claims now on their way."""
        return self._spare.get(key, 0) > self._racing[key]

    @contextmanager
    def racing(self, key: Hashable) -> Iterator[None]:
        """Count a claim for ``key`` sent to the writer without the read, until it is back."""
        self._racing[key] += 1
        try:
            yield
        finally:
            self._racing[key] -= 1
            if self._racing[key] <= 0:
                del self._racing[key]

    def granted(self, key: Hashable, spare: int) -> None:
        """A claim for ``key`` was granted and saw ``spare`` other free slices."""
        self._spare[key] = spare

    def refused(self, key: Hashable) -> None:
        """A claim for ``key`` was refused for want of a free slice: read before the next."""
        self._spare.pop(key, None)

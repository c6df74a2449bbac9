"""Whether a start's claim needs the refusal read first: the free slices last seen, less the
claims on their way.

A start whose claim the ledger would refuse is refused on a read, on the hub's event loop, without
the trip to the ledger's writing thread (:meth:`~.reserve.ReservationMixin._refused_now`,
:mod:`jupyterhub_gpulab.ledger.readrefusal`). For a claim that is granted that read is wasted: it
runs every rule of the claim (about a millisecond at 1,000 open allocations), on the one loop
that serves the whole hub, and the claim then runs them again. In a storm of 1,000 starts over a
lab with slices to spare it was the largest part of gpulab's own work on the hub's loop
(``benchmarks/scale.py`` under py-spy: 1.1 ms of the 2.2 ms ``start()`` took there).

:class:`ClaimOutlook` keeps, per profile (and the node a start is bound to), how many slices
were free when last seen, and how many claims are on their way to the ledger's writer, undecided.
A read that refused nothing counts the free slices (:meth:`~jupyterhub_gpulab.ledger.Ledger.
free_count`, one ``count(*)``); every claim granted since takes one of them (or says how many it
saw to spare, :attr:`Claim.spare <jupyterhub_gpulab.ledger.Claim.spare>`, whichever is more).
While more are free than claims undecided, the next start claims at once; when not (the last
free slices are being taken, a claim was refused for want of a slice, or nothing is known yet),
the refusal is decided on a read as before, and that read counts again.

The figures are this process's view: a claim made elsewhere (the service, another hub) makes
them too high until the next claim or read. That costs nothing but time: the outlook only picks
the path, the claim's write transaction stays the one thing that hands out a slice, and a claim
it sends to the writer that the ledger refuses is refused and recorded there, as every claim was
before refusals were decided on a read.

Under a storm the loop sends claims faster than the writing thread, which waits for the loop's
hold on the interpreter at every step, decides them: hundreds are undecided at once. A bound
read from a claim's own few candidate rows (at most three to spare) could never cover them, so
every start read; the count does (its last figure: ``docs/source/developing.md``). The outlook
is told on the writing thread, as each claim is decided. Each counted claim is a
:class:`Counted` token, uncounted exactly once: by its decision, or by its start giving up first
(JupyterHub cancels a start past its ``start_timeout``); the token also says who ends a claim
granted to a start that gave up (:meth:`~.reserve.ReservationMixin._claim_slice`). One outlook
per lab runtime (per hub process).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Hashable


class Counted:
    """One claim counted among its key's undecided (:meth:`ClaimOutlook.take`,
    :meth:`ClaimOutlook.sent`), uncounted exactly once: by its decision (:meth:`ClaimOutlook.
    settle`) or, when its start stopped waiting first, by :meth:`ClaimOutlook.abandon`."""

    __slots__ = ("key", "open", "claim")

    def __init__(self, key: Hashable) -> None:
        self.key, self.open = key, True
        #: the claim the writer granted while the start still waited (set before it settles)
        self.claim = None


class ClaimOutlook:
    """Per key: the free slices last seen, and the claims sent to the writer not yet decided.
    Thread-safe: asked on the hub's loop, told on the ledger's writing thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: dict[Hashable, int] = {}
        self._undecided: Counter = Counter()

    def take(self, key: Hashable) -> Counted | None:
        """Whether a claim for ``key`` (a profile, and the node a start is bound to) may skip
        the refusal read: more slices were last seen free than claims for ``key`` are undecided.
        A claim that may is counted among those (the :class:`Counted` returned); ``None``: read
        first."""
        with self._lock:
            if self._free.get(key, 0) <= self._undecided[key]:
                return None
            self._undecided[key] += 1
            return Counted(key)

    def sent(self, key: Hashable, free: int | None) -> Counted:
        """A claim for ``key`` goes to the writer after the refusal read, which saw ``free``
        slices free (``None``: not counted); it is counted among the undecided."""
        with self._lock:
            if free is not None:
                self._free[key] = free
            self._undecided[key] += 1
            return Counted(key)

    def settle(self, counted: Counted, spare: int | None, *, no_slice: bool = False) -> bool:
        """``counted``'s claim was decided: granted, seeing ``spare`` other free slices, or
        refused (``spare`` ``None``; ``no_slice``: for want of a free slice). ``False`` when its
        start had stopped waiting (:meth:`abandon`): a granted claim is then nobody's."""
        with self._lock:
            waiting = self._uncount(counted)
            self._decided(counted.key, spare, no_slice)
            return waiting

    def abandon(self, counted: Counted) -> bool:
        """``counted``'s start stopped waiting for its claim (cancelled, or the trip to the
        writer failed): uncount it unless its decision did. ``True`` when it was undecided
        (the writer, deciding it later, then ends a claim it grants); ``False`` when the writer
        had decided it (``counted.claim``, if granted, is then the start's to end). A claim the
        writer never ran would otherwise stay undecided for good, and every later start of its
        key read first."""
        with self._lock:
            return self._uncount(counted)

    def refused(self, key: Hashable, *, no_slice: bool) -> None:
        """A claim for ``key`` was refused on the read, never sent (``no_slice``: for want of a
        free slice, so the next start reads first)."""
        with self._lock:
            self._decided(key, None, no_slice)

    def _uncount(self, counted: Counted) -> bool:
        if not counted.open:
            return False
        counted.open = False
        self._undecided[counted.key] -= 1
        if self._undecided[counted.key] <= 0:
            del self._undecided[counted.key]
        return True

    def _decided(self, key: Hashable, spare: int | None, no_slice: bool) -> None:
        if spare is not None:  # one of those seen free is taken; the claim saw ``spare`` more
            self._free[key] = max(self._free.get(key, 0) - 1, spare)
        elif no_slice:
            self._free.pop(key, None)

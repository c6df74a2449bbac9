"""Who hears of the ledger's claims and releases: listeners called after each commits.

A process registers listeners on its :class:`~.ledger.Ledger` (``ledger.listeners.append(l)``);
the hub's metrics (:mod:`jupyterhub_gpulab.hub.metrics`) and the dcgm-exporter job-mapping files
(:mod:`.jobmap`) are two. A listener implements any of:

- ``claimed(claim, seconds)``: a :class:`~.models.Claim` was committed; ``seconds`` (float) the
  claim took, its refusals' checks included;
- ``claim_refused(request, seconds)``: a claim for ``request`` (a
  :class:`~jupyterhub_gpulab.inventory.SliceRequest`) raised a
  :class:`~.models.LedgerRefusal` (quota or no free slice) after ``seconds``;
- ``released(allocation_id, slice_id, reason)``: this call closed allocation ``allocation_id``
  (int) on slice ``slice_id`` with ``reason`` (str); not called for one already closed.

Listeners run in the caller's thread, after the transaction committed; one that raises is
logged and the others still run: a listener can never fail a claim or a release.
"""

from __future__ import annotations

import functools
import logging
import time

from .models import LedgerRefusal

log = logging.getLogger(__name__)


class LedgerEvents:
    """Part of :class:`~.ledger.Ledger`: its ``listeners`` and how they are called."""

    @property
    def listeners(self) -> list:
        """This ledger's listeners (module docstring), in call order; append to it."""
        if "_listeners" not in self.__dict__:
            self._listeners = []
        return self._listeners

    def _announce(self, event: str, *args) -> None:
        for listener in tuple(self.__dict__.get("_listeners", ())):
            handler = getattr(listener, event, None)
            if handler is None:
                continue
            try:
                handler(*args)
            except Exception:
                log.exception("gpulab ledger listener %r failed on %s", listener, event)


def announced_claim(claim):
    """Decorate :meth:`Ledger.claim`: time it and announce ``claimed`` / ``claim_refused``."""

    @functools.wraps(claim)
    def announced(self, request, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            got = claim(self, request, *args, **kwargs)
        except LedgerRefusal:
            self._announce("claim_refused", request, time.perf_counter() - t0)
            raise
        self._announce("claimed", got, time.perf_counter() - t0)
        return got

    return announced

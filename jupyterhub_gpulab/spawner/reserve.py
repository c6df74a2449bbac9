"""The reservation half of the spawner core (:mod:`.core`): the GPU-hour budget, the claim, and
a refusal's record for the admin page.

A claim the ledger's rules refuse is decided on the event loop, on a read of a SQLite ledger
(:meth:`ReservationMixin._refused_now`, :mod:`jupyterhub_gpulab.ledger.readrefusal`), its record
written later with the others'. Otherwise ``_reserve`` runs in one thread trip
(:func:`~jupyterhub_gpulab.ledger.aio.write`) with what it needs read on the event loop first
(:class:`_Asker`), so it never touches JupyterHub's database session. While more of the
profile's slices were last seen free than claims are on their way, a start skips the read and
claims at once (:meth:`_claim_slice`, :mod:`.claimoutlook`): a granted claim would only repeat
it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import NamedTuple

from ..errors import SpawnRefused
from ..fairuse.offers import budget_refusal
from ..hub import metrics
from ..inventory.model import Slice
from ..lab.images import ImageRequirements, unservable
from ..lab.policy import Entitlement, PolicyContext
from ..lab.profile import Profile
from ..ledger import Claim, LedgerRefusal, aio
from ..ledger.readrefusal import refused_without_write
from .claimoutlook import ClaimOutlook, Counted
from .runtime import LabRuntime

#: Seconds before a failed write of refused spawns' records is tried again (then doubling, at
#: most 60 s); the rows wait in memory meanwhile (:class:`~..ledger.readrefusal.PendingRefusals`).
REFUSALS_RETRY_S = 5.0


class _Asker(NamedTuple):
    """Who asks for a server, read from the hub's objects on the event loop so that code running
    in a thread never touches JupyterHub's database session."""

    user: str
    server_name: str
    log_name: str
    groups: frozenset[str]
    is_admin: bool


def _request(profile: Profile, need: ImageRequirements | None):
    """The slices a start of ``profile`` may claim: its request, narrowed to GPUs that can run
    its image (``need``: its labels' requirements)."""
    return need.restrict(profile.slice) if need is not None else profile.slice


#: this process's background writes in flight: refusal flushes, releases of claims granted to
#: starts that gave up (a task is only weakly held by the loop; :func:`refusals_written`)
_background: set[asyncio.Task] = set()


def _in_background(coro) -> None:
    """Run ``coro`` on the running loop, held until it ends."""
    task = asyncio.get_running_loop().create_task(coro)
    _background.add(task)
    task.add_done_callback(_background.discard)


class ReservationMixin:
    """Part of :class:`~.core.SliceSpawnerCore`; needs the Spawner's ``user``, ``name``,
    ``log`` and ``_log_name``."""

    def _only_node(self) -> str | None:
        """The one node whose slices this start may claim (``None``: any): a Swarm course
        server's, beside its course volumes (:mod:`jupyterhub_gpulab.courses.coursenode`)."""
        return None

    def _groups(self) -> set[str]:
        return {g.name for g in self.user.groups}

    def _asker(self) -> _Asker:
        return _Asker(
            self.user.name,
            self.name or "",
            self._log_name,
            frozenset(self._groups()),
            bool(self.user.admin),
        )

    def _note_refusal(self, who: _Asker, err: SpawnRefused) -> None:
        """Log a refusal and count it (:mod:`~jupyterhub_gpulab.hub.metrics`); the refusal log's
        row is the caller's (:meth:`_record_refusal`, or the claim's own transaction)."""
        metrics.spawn_refused(err.reason)
        self.log.info(
            "Refused spawn of %s (%s): %s",
            who.log_name,
            err.reason,
            err.log_message or err.message,
        )

    def _record_refusal(
        self, rt: LabRuntime, who: _Asker, profile: str | None, err: SpawnRefused
    ) -> None:
        """Log a refusal made without a claim, count it and record it for the admin page
        (blocks: writes the ledger)."""
        self._note_refusal(who, err)
        try:
            rt.ledger.record_refusal(who.user, profile, err.reason, err.message)
        except Exception:
            self.log.exception("Could not record a refused spawn")

    async def _refuse(self, rt: LabRuntime, profile: str | None, err: SpawnRefused) -> None:
        await aio.write(rt.ledger, self._record_refusal, rt, self._asker(), profile, err)

    def _reserve(
        self,
        rt: LabRuntime,
        profile: Profile,
        ctx: PolicyContext,
        ent: Entitlement,
        who: _Asker,
        need: ImageRequirements | None = None,
    ) -> Claim:
        """Check the GPU-hour budget, then claim a slice whose GPU can run the profile's image
        (``need``: its labels' requirements) (blocks: runs in a thread).

        A refusal is recorded before it is raised: :class:`SpawnRefused` with reason ``quota``
        (budget spent, or the user's or group's slice limit), ``no-free-slice``, or
        ``misconfigured`` when no slice of the profile can run its image (naming both). A
        refused claim's message is built and recorded inside the claim's transaction
        (:func:`claim_refusal`): one database write per refused spawn.
        """
        budget = self._budget_refusal(rt, profile, ctx, who)
        if budget:
            err = SpawnRefused(budget, reason="quota")
            self._record_refusal(rt, who, profile.slug, err)
            raise err
        try:
            return rt.ledger.claim(**self._claim_args(rt, profile, ent, who, need))
        except LedgerRefusal as e:
            self._note_refusal(who, e.refusal)
            raise e.refusal from None

    def _claim_args(
        self,
        rt: LabRuntime,
        profile: Profile,
        ent: Entitlement,
        who: _Asker,
        need: ImageRequirements | None,
    ) -> dict:
        """The arguments of :meth:`~jupyterhub_gpulab.ledger.Ledger.claim` for this start, the
        same for the claim and for its refusal decided on a read: the profile's request
        narrowed to GPUs that can run its image (``need``), and the refusal built from the
        ledger's (:func:`claim_refusal`)."""
        only = self._only_node()
        return dict(
            request=_request(profile, need),
            user=who.user,
            profile=profile.slug,
            server_name=who.server_name,
            node=self._claim_node(rt),
            only_node=only,
            user_limit=ent.user_limit,
            charge_groups=ent.charge_groups,
            groups=who.groups,
            refusal=lambda e: claim_refusal(e, profile, need, rt.lab.inventory.slices, only),
        )

    async def _claim_slice(
        self,
        rt: LabRuntime,
        profile: Profile,
        ctx: PolicyContext,
        ent: Entitlement,
        who: _Asker,
        need: ImageRequirements | None = None,
    ) -> Claim:
        """This start's claim (:meth:`_reserve`, one trip to the ledger's writer), after the
        refusal read (:meth:`_refused_now`) unless the lab's :class:`~.claimoutlook.ClaimOutlook`
        saw more slices free than claims on their way: then the read, which a granted claim
        repeats, is skipped. A read that refuses nothing counts the free slices for the outlook.
        Raises the refusal either way; the outlook hears what came of the claim."""
        outlook, key = rt.outlook, (profile.slug, self._only_node())
        counted = outlook.take(key)
        if counted is None:
            refused = self._refused_now(rt, profile, ctx, ent, who, need)
            if refused is not None:
                outlook.refused(key, no_slice=refused.reason == "no-free-slice")
                raise refused
            counted = outlook.sent(key, self._free_now(rt, profile, need))
        args = (rt, profile, ctx, ent, who, need)
        try:
            return await aio.write(rt.ledger, self._reserve_told, outlook, counted, *args)
        except BaseException:  # given up (cancelled: the hub's start timeout) or refused
            if not outlook.abandon(counted) and counted.claim is not None:
                # granted as this start gave up, before it resumed: it ends here
                aid = counted.claim.allocation.id
                _in_background(aio.write(rt.ledger, self._release_unclaimed, rt, aid))
            raise

    def _reserve_told(
        self, outlook: ClaimOutlook, counted: Counted, rt: LabRuntime, *args
    ) -> Claim:
        """:meth:`_reserve`, telling ``outlook`` what came of it as soon as it is decided (on
        the writing thread: the loop may resume this start much later). A claim granted after
        its start gave up (:meth:`ClaimOutlook.abandon`) is released at once."""
        spare, no_slice, claim = None, False, None
        try:
            claim = counted.claim = self._reserve(rt, *args)
            spare = claim.spare
            return claim
        except SpawnRefused as e:
            no_slice = e.reason == "no-free-slice"
            raise
        finally:
            if not outlook.settle(counted, spare, no_slice=no_slice) and claim is not None:
                self._release_unclaimed(rt, claim.allocation.id)

    def _release_unclaimed(self, rt: LabRuntime, aid: int) -> None:
        """Release allocation ``aid``, granted to a start that had given up (blocks)."""
        if rt.ledger.release(aid, "failed"):
            self.log.info("Released allocation %d of %s: its start gave up", aid, self._log_name)

    def _free_now(
        self, rt: LabRuntime, profile: Profile, need: ImageRequirements | None
    ) -> int | None:
        """The slices free now for this start's request (blocking: a SQLite ledger's read on
        the loop, as the refusal read before it); ``None`` on PostgreSQL, where no refusal is
        read and the outlook has nothing to save."""
        if rt.ledger.dialect != "sqlite":
            return None
        return rt.ledger.free_count(_request(profile, need), node=self._only_node())

    def _refused_now(
        self,
        rt: LabRuntime,
        profile: Profile,
        ctx: PolicyContext,
        ent: Entitlement,
        who: _Asker,
        need: ImageRequirements | None = None,
    ) -> SpawnRefused | None:
        """The refusal of a claim decided on the event loop without a write
        (:func:`~jupyterhub_gpulab.ledger.readrefusal.refused_without_write`: a SQLite ledger's
        read, a millisecond), counted and logged as :meth:`_reserve`'s, its record queued for
        one write with the others' (:meth:`_flush_refusals`); ``None`` when the budget refuses
        (:meth:`_reserve` records that) or a slice may be free: then :meth:`_reserve` claims.

        Under a burst, the thread trip this saves (to the ledger's writing thread and back to
        the busy loop) was most of a refusal's time in ``start()`` (issue 21 item 6)."""
        if rt.ledger.dialect != "sqlite" or self._budget_refusal(rt, profile, ctx, who):
            return None
        e = refused_without_write(rt.ledger, **self._claim_args(rt, profile, ent, who, need))
        if e is None:
            return None
        self._note_refusal(who, e.refusal)
        self._flush_refusals(rt)
        return e.refusal

    def _flush_refusals(self, rt: LabRuntime) -> None:
        """Write the queued refusals' rows on the ledger's writing thread, unless a flush is
        already on its way (it takes every row queued by then)."""
        if rt.ledger.pending_refusals.ask():
            _in_background(self._flush(rt))

    async def _flush(self, rt: LabRuntime) -> None:
        """One flush, tried again after :data:`REFUSALS_RETRY_S` s (doubling, at most a
        minute) while it fails and no newer refusal has asked for one."""
        pending, wait = rt.ledger.pending_refusals, REFUSALS_RETRY_S
        while True:
            try:
                await aio.write(rt.ledger, pending.flush, rt.ledger)
                return
            except Exception:
                self.log.exception(
                    "Could not record %d refused spawns; trying again in %g s", len(pending), wait
                )
            await asyncio.sleep(wait)
            if not pending.ask():
                return
            wait = min(2 * wait, 60.0)

    def _budget_refusal(
        self, rt: LabRuntime, profile: Profile, ctx: PolicyContext, who: _Asker
    ) -> str | None:
        """The GPU-hour budget's refusal, or ``None`` (blocks: reads the ledger)."""
        return budget_refusal(rt.ledger, who.user, ctx, profile)

    async def _claim(self, rt: LabRuntime, profile: Profile, **limits) -> Claim:
        """Claim a slice for this server in a thread (the ledger is synchronous)."""
        return await aio.write(
            rt.ledger,
            rt.ledger.claim,
            profile.slice,
            user=self.user.name,
            profile=profile.slug,
            server_name=self.name or "",
            node=self._claim_node(rt),
            groups=self._groups(),
            **limits,
        )


def claim_refusal(
    e: LedgerRefusal,
    profile: Profile,
    need: ImageRequirements | None,
    lab_slices: Sequence[Slice],
    only_node: str | None = None,
) -> SpawnRefused:
    """The :class:`SpawnRefused` a refused claim for ``profile`` tells the user (pure; runs in
    the claim's transaction): reason ``quota`` for a user's or group's limit; ``misconfigured``
    when no slice of the profile in ``lab_slices`` can run its image (``need``: the image's
    label requirements), naming both; else ``no-free-slice`` with the ledger's message, which
    names ``only_node`` when the start may claim that node's slices only."""
    if e.reason == "quota":
        return SpawnRefused(e.message, reason="quota")
    why = None
    if need is not None and need.needs_gpu_facts:
        why = unservable(need, profile.slice, lab_slices)
    if why:
        return SpawnRefused(why, reason="misconfigured", log_message=f"{profile.slug}: {why}")
    where = (
        f" This server keeps its files on {only_node}, so it runs there only." if only_node else ""
    )
    return SpawnRefused(e.message + where, reason="no-free-slice")


async def refusals_written() -> None:
    """Wait until the refusals decided so far in this process are in the ledger
    (:meth:`ReservationMixin._flush_refusals`), and claims granted to starts that had given up
    are released: the refusal log (the admin page, the course report) shows them then."""
    loop = asyncio.get_running_loop()
    while mine := [t for t in _background if t.get_loop() is loop]:
        await asyncio.gather(*mine, return_exceptions=True)

"""The reservation half of the spawner core (:mod:`.core`): the GPU-hour budget, the claim, and
a refusal's record for the admin page.

``_reserve`` runs in one thread trip (:func:`~jupyterhub_gpulab.ledger.aio.write`) with what it
needs read on the event loop first (:class:`_Asker`), so it never touches JupyterHub's
database session.
"""

from __future__ import annotations

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
from .runtime import LabRuntime


class _Asker(NamedTuple):
    """Who asks for a server, read from the hub's objects on the event loop so that code running
    in a thread never touches JupyterHub's database session."""

    user: str
    server_name: str
    log_name: str
    groups: frozenset[str]
    is_admin: bool


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
        request = need.restrict(profile.slice) if need is not None else profile.slice
        budget = self._budget_refusal(rt, profile, ctx, who)
        if budget:
            err = SpawnRefused(budget, reason="quota")
            self._record_refusal(rt, who, profile.slug, err)
            raise err
        only = self._only_node()
        try:
            return rt.ledger.claim(
                request,
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
        except LedgerRefusal as e:
            self._note_refusal(who, e.refusal)
            raise e.refusal from None

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

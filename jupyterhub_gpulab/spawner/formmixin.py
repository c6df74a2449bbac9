"""The spawn form half of GPUDockerSpawner: which profiles, with live capacity and the user's use."""

from __future__ import annotations

import asyncio

from ..policy import applicable_policies, user_limit
from .form import form_rows, render_form, usage_note
from .runtime import LabRuntime


class ProfileFormMixin:
    """Mixed into :class:`~.gpudocker.GPUDockerSpawner`; needs its ``runtime()``, ``entitled()``,
    ``_groups()``, ``user`` and ``last_profile``."""

    def _slice_use(self, rt: LabRuntime, entitled) -> tuple[int, int | None] | None:
        """``(slices held, per-user limit)`` for the form, or ``None`` without GPU profiles."""
        if not any(p.wants_gpu for p in entitled):
            return None
        lab = rt.lab
        mine = applicable_policies(
            self._groups(), bool(self.user.admin), lab.policies, lab.default_policy
        )
        return rt.ledger.count_open(user=self.user.name), user_limit(mine)

    async def _render_options_form(self, spawner=None) -> str:
        rt = self.runtime()
        entitled = self.entitled(rt)

        def build():
            use = self._slice_use(rt, entitled)
            quota_reason = None
            if use is not None and use[1] is not None and use[0] >= use[1]:
                quota_reason = (
                    f"You hold {use[0]} GPU slice{'s' if use[0] != 1 else ''}, the most your "
                    "groups allow at once; stop a server first."
                )
            rows = form_rows(
                entitled,
                rt.ledger.capacity,
                preselect=self.last_profile or next((p.slug for p in entitled if p.default), None),
                quota_reason=quota_reason,
                out_of_service=rt.ledger.out_of_service,
            )
            return render_form(rows, usage_note(*use) if use else None)

        return await asyncio.to_thread(build)

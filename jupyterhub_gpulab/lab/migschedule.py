"""``c.GPULab.mig_schedule``: the MIG layout schedule's setting (a mixin of
:class:`~.config.GPULab`). Its shape and parsing: :mod:`..inventory.layoutschedule`; the decisions
on it: :mod:`..inventory.layoutplan`; who acts on them: :mod:`..service.layouts`."""

from __future__ import annotations

from datetime import tzinfo

from traitlets import Dict, List, Union
from traitlets.config import LoggingConfigurable

from ..errors import ConfigError
from ..inventory.layoutschedule import LayoutSchedule, parse_schedule

__all__ = ["MigScheduleTraits"]


class MigScheduleTraits(LoggingConfigurable):
    """The MIG layout schedule (``c.GPULab.mig_schedule``)."""

    mig_schedule = Union(
        [List(Dict()), Dict()],
        default_value=[],
        config=True,
        help="""Which MIG GPUs change layout on the timetable, and when: the class layout during
        class windows and booked course sessions of its slices, the research layout outside
        them. Empty (default): no GPU changes layout by itself.

        A list of entries (or one entry), each a dict: ``gpus`` (``"all"``, the default: every
        MIG GPU of this host that no other entry names; or a list of ``"GPU-…"`` UUIDs),
        ``class_layout`` and ``research_layout`` (``COUNTxPROFILE`` groups joined by commas:
        ``"7x1g.10gb"``, ``"2x3g.40gb"``, ``"1x4g.40gb,1x3g.40gb"``), ``class_windows`` (weekly
        ``{"days": ["mon", …], "start": "08:00", "end": "18:00"}``, wall-clock in
        ``quota_timezone``, optional ``"from"``/``"until"`` dates), ``follow_bookings`` (default
        ``True``: a booked session whose slices only the class layout has counts as class time,
        from its seats' lead to its end) and ``drain_lead`` (seconds or ``"30m"``, default 30
        minutes: how long before class time the GPU is drained and holders of research
        instances are warned; their servers are stopped when class time begins. After class,
        holders of class slices get the same lead).

        The gpulab service re-lays the GPUs (``c.GPULabService.layout_every``); it needs root on
        the GPU host (NVML's MIG configuration capability), and never changes MIG mode. ``gpulab
        check-config`` refuses a schedule that leaves a booked session without its slices.
        ``c.GPULab.mig_schedule = [{"gpus": "all", "class_layout": "7x1g.10gb",
        "research_layout": "2x3g.40gb", "class_windows": [{"days": ["mon", "tue", "wed",
        "thu", "fri"], "start": "08:00", "end": "18:00"}], "drain_lead": "30m"}]``
        """,
    )

    def layout_schedule(self, tz: tzinfo, errors: list[str] | None = None) -> LayoutSchedule:
        """The parsed schedule (windows read in ``tz``); its problems are appended to ``errors``
        (then an empty schedule is returned) or raised as :class:`ConfigError`."""
        try:
            return parse_schedule(self.mig_schedule, tz)
        except ConfigError as e:
            if errors is None:
                raise
            errors.extend(e.errors)
            return LayoutSchedule((), tz)

"""The teaching term, ``c.GPULab.term_start`` / ``term_end``: the window a ``"term"`` budget
period covers (:func:`jupyterhub_gpulab.fairuse.quota.period_window`).

Its own module so that the lab's configuration (:mod:`.config`) and the budget rules
(:mod:`jupyterhub_gpulab.fairuse.quota`) share it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..errors import ConfigError

__all__ = ["Term"]


@dataclass(frozen=True)
class Term:
    """The teaching term, ``[start, end)`` (timezone-aware); from ``c.GPULab.term_start`` /
    ``term_end``."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None or self.end <= self.start:
            raise ConfigError(
                f"term [{self.start}, {self.end}) must be two timezone-aware datetimes with the "
                "end after the start, e.g. term_start = '2026-09-07', term_end = '2026-12-19'"
            )

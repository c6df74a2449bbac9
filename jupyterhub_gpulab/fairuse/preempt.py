"""Priority preemption: which running server gives its slice to a queued higher-priority user.
Pure logic, no I/O; the culler warns and stops the chosen server through its own path (rule
``preempt`` in :mod:`.culler`), and the waitlist offers the freed slice to the first in line.

The rule (off unless ``c.GPULabService.preemption = True``; per policy, ``preemptible``): for
each profile's first waiting user who finds no slice free (the caller passes only those:
:func:`.offers.starved`) (the waitlist's order) whose priority is higher than some
running servers' owners', pick among the servers that hold a slice satisfying the queued
request, whose owner is preemptible and of lower priority, and whose GPU has been idle
(:func:`.culler.gpu_idle_since`) for at least ``min_idle_s``: the lowest priority first, then
the longest idle. A server already chosen on an earlier pass (it carries a ``preempt`` warning)
stays chosen while its queued user still waits and its GPU stays idle, so a warning is never
moved to another server; a GPU that gets busy again cancels it (the culler's rule lapses).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from .culler import Server, Settings, gpu_idle_since


def choose(
    servers: Sequence[Server],
    waiting: Iterable,
    matches: Callable[[Server, object], bool],
    now: datetime,
    settings: Settings,
    *,
    min_idle_s: float,
    already: Mapping[tuple[str, str], datetime] = {},
) -> list[Server]:
    """``servers`` with ``preempt_at``/``preempt_for`` set on those chosen (others unchanged).

    ``waiting``: waitlist entries still waiting (``user``, ``profile``, ``request``,
    ``priority``), in serving order; ``matches(server, entry)``: whether the server's slice
    satisfies the entry's request; ``already``: ``{(user, server): when warned}`` of servers
    carrying a ``preempt`` warning."""
    first = {}
    for e in waiting:
        first.setdefault(e.profile, e)
    chosen: dict[tuple[str, str], tuple[datetime, str]] = {}
    open_entries = list(first.values())
    # Keep earlier choices that still serve someone waiting.
    for s in servers:
        key = (s.user, s.name)
        if key in already and gpu_idle_since(s, now, settings) is not None:
            for e in open_entries:
                if e.priority > s.priority and matches(s, e):
                    chosen[key] = (already[key], e.user)
                    open_entries.remove(e)
                    break
    least = timedelta(seconds=min_idle_s)
    for e in open_entries:
        best = None
        for s in servers:
            key = (s.user, s.name)
            if key in chosen or not s.preemptible or s.priority >= e.priority:
                continue
            if s.user == e.user or not matches(s, e):
                continue
            idle = gpu_idle_since(s, now, settings)
            if idle is None or now - idle < least:
                continue
            rank = (s.priority, idle)
            if best is None or rank < best[0]:
                best = (rank, key)
        if best is not None:
            chosen[best[1]] = (now, e.user)
    return [
        replace(s, preempt_at=chosen[(s.user, s.name)][0], preempt_for=chosen[(s.user, s.name)][1])
        if (s.user, s.name) in chosen
        else s
        for s in servers
    ]

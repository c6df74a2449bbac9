"""Fair use: GPU-hour budgets, the GPU-aware culler's decisions, usage accounting and the
utilisation monitor that feeds the culler.

- :mod:`.accounting`: weighted GPU-seconds per allocation, per user / group / profile; CSV.
- :mod:`.quota`: calendar-period budgets, the spawn check, servers over budget.
- :mod:`.culler`: keep / warn / cull for one server (pure).
- :mod:`.monitor`: per-slice utilisation samples from NVML, in bounded ring buffers.
"""

from .accounting import Usage, UsageRow, gpu_seconds, to_csv, usage
from .culler import Decision, Limits, Sample, Server, Settings, decide, next_warnings
from .quota import (
    Budget,
    OverBudget,
    Term,
    check_spawn,
    over_budget_servers,
    period_window,
    session_limit,
    user_budget,
    window_start,
)

__all__ = [
    "Budget",
    "Decision",
    "Limits",
    "OverBudget",
    "Sample",
    "Server",
    "Settings",
    "Term",
    "Usage",
    "UsageRow",
    "check_spawn",
    "decide",
    "gpu_seconds",
    "next_warnings",
    "over_budget_servers",
    "period_window",
    "session_limit",
    "to_csv",
    "usage",
    "user_budget",
    "window_start",
]

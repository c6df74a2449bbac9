"""The one clock gpulab reads, so tests can move time (as jupyterhub-idle-culler does)."""

from __future__ import annotations

from datetime import datetime, timezone


def utcnow() -> datetime:
    """Timezone-aware current UTC time. Tests monkeypatch this single function."""
    return datetime.now(timezone.utc)

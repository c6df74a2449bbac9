"""What a course server's last content pull says, for the course page and the API: the parser of
``~/.gpulab/content.status`` (written by :func:`.content.pull_script`; its docstring gives the
format) and the one line staff read per student. Pure: :mod:`.contentread` reads the file.

The file lives in the student's home, so the student can write anything into it: every field
is checked, unknown lines are dropped, the reason is cut to one line of at most
:data:`MAX_REASON` characters and user:password parts of URLs are removed before anyone sees
it. A traceback never reaches the page: the pull reports git's last error line only.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from .records import NAME

__all__ = [
    "SourceStatus",
    "parse_status",
    "describe",
    "one_line",
    "MAX_STATUS_BYTES",
    "MAX_REASON",
]

#: The most of a status file read (bytes); a course has a handful of sources, a line each.
MAX_STATUS_BYTES = 16 * 1024
#: The most characters of one reason shown.
MAX_REASON = 200
#: States of one source: pulled; pulled with the student's previous copy kept aside; failed.
STATES = ("pulled", "kept", "failed")

_BACKUP = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}_backup_[0-9]{14}(\.[0-9]{1,4})?$")
_CREDENTIALS = re.compile(r"(?i)([a-z][a-z0-9+.-]*://)[^/@\s]*@")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


@dataclass(frozen=True)
class SourceStatus:
    """One source's last pull: ``state`` (one of :data:`STATES`), ``dir`` (``~/<dir>``), ``at``
    (aware UTC), ``backup`` (the folder in the home holding the student's previous copy, or
    ``""``), ``reason`` (one line: why it failed, or why the copy was kept aside)."""

    state: str
    dir: str
    at: datetime
    backup: str = ""
    reason: str = ""


def one_line(text: str, limit: int = MAX_REASON) -> str:
    """``text`` as one line of at most ``limit`` characters, without credentials in URLs."""
    text = _CREDENTIALS.sub(r"\1", _CONTROL.sub(" ", text)).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def parse_status(text: str) -> tuple[SourceStatus, ...]:
    """The sources of a status file's ``text`` (at most :data:`MAX_STATUS_BYTES` of it are
    read); a line that does not have the written form is dropped, never raised."""
    out = []
    for line in text[:MAX_STATUS_BYTES].splitlines():
        parts = line.split("\t")
        if len(parts) != 5:
            continue
        state, d, at, backup, reason = parts
        if state not in STATES or not NAME.match(d) or (backup and not _BACKUP.match(backup)):
            continue
        try:
            when = datetime.strptime(at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        except ValueError:
            continue
        out.append(SourceStatus(state, d, when, backup, one_line(reason)))
    return tuple(out)


def describe(sources: tuple[SourceStatus, ...], when: Callable[[datetime], str]) -> dict | None:
    """What staff read for one student: ``{"state", "at", "message", "sources"}`` or ``None``
    when nothing was pulled yet. ``state``: ``failed`` when a source failed, else ``kept`` when
    a copy was kept aside, else ``pulled``; ``at``: ISO time of the latest pull; ``message``:
    one line per the worst source, e.g. ``pulled at Mon 2026-10-05 14:00 CEST``, ``failed:
    ~/ml101: cannot read the repository: fatal: …``, ``history rewritten: your copy kept in
    ~/ml101_backup_20261005120000; pulled at …``; ``when`` formats a time for people."""
    if not sources:
        return None
    at = max(s.at for s in sources)
    failed = [s for s in sources if s.state == "failed"]
    kept = [s for s in sources if s.backup]
    parts = []
    if failed:
        state = "failed"
        parts.append(
            "failed: "
            + "; ".join(f"~/{s.dir}: {s.reason or 'see ~/.gpulab/content.log'}" for s in failed)
        )
    for s in kept:
        why = (
            f"{s.reason}: your copy"
            if s.state == "kept" and s.reason
            else f"your copy of ~/{s.dir}"
        )
        parts.append(f"{why} kept in ~/{s.backup}")
    if not failed:
        state = "kept" if kept else "pulled"
        parts.append(f"pulled at {when(at)}")
    return {
        "state": state,
        "at": at.isoformat(),
        "message": one_line("; ".join(parts), 2 * MAX_REASON),
        "sources": [
            {"dir": s.dir, "state": s.state, "at": s.at.isoformat(), "backup": s.backup,
             "reason": s.reason}
            for s in sources
        ],
    }  # fmt: skip

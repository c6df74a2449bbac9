"""The course page in its reader's words: what happened to each student's server, each
assignment's last collect and return, and where the staff member opens the collected work.

Pure functions over what :mod:`.courseview` reads (the pre-start's progress, the ledger's
refusals, the course's audit trail, the hub's active servers); no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: A refused course server as its staff read it, by the ledger's refusal reason
#: (:data:`~jupyterhub_gpulab.errors.STATUS_BY_REASON`): ``(one student's row, with {user};
#: the phrase the start-all's summary counts)``.
STAFF_REFUSALS = {
    "no-free-slice": (
        "{user} has no free slice: every slice of the course's profile is taken (reserve seats "
        "for the sessions to keep some)",
        "no free slice of the course's profile",
    ),
    "waitlist": (
        "{user} has no free slice: users queued earlier wait for the free ones",
        "no free slice (others are queued for it)",
    ),
    "quota": (
        "{user} already holds as many GPU slices as their groups allow, in another of their "
        "servers: that one must stop first",
        "they already hold as many GPU slices as their groups allow",
    ),
    "budget": ("{user}'s GPU-hour budget is spent", "their GPU-hour budget is spent"),
    "not-in-course": (
        "{user} is neither on the roster nor on the staff",
        "not on the roster or staff",
    ),
    "gpu-runtime-missing": (
        "the host cannot attach GPUs (an admin must install the NVIDIA Container Toolkit)",
        "the host cannot attach GPUs",
    ),
    "misconfigured": (
        "the lab's configuration is broken (an admin must fix it)",
        "the lab's configuration is broken",
    ),
}


def _code(reason: str, refusal: tuple[str, str] | None, status: int | None) -> str | None:
    code = refusal[0] if refusal else None
    if code == "quota" and "GPU-hour" in refusal[1]:
        return "budget"  # the same 429 reason as the slice limit; its message says which
    if code is None and status == 503 and reason.startswith("No free"):
        return "no-free-slice"
    return code


def staff_reason(
    user: str,
    reason: str,
    refusal: tuple[str, str] | None = None,
    status: int | None = None,
    *,
    summary: bool = False,
) -> str:
    """Why ``user``'s course server did not start, addressed to the staff: ``reason`` is what
    the hub told (in the student's words, "Stop one of your servers…"); ``refusal`` the
    ledger's record of the refusal, ``(reason code, message)``, when the spawner made one;
    ``status`` the hub's HTTP status. ``summary``: the phrase without the name, which the
    start-all's summary counts ("1 refused: no free slice of the course's profile"). ``""``
    when nothing went wrong."""
    if not reason:
        return ""
    words = STAFF_REFUSALS.get(_code(reason, refusal, status) or "")
    if words:
        return words[1] if summary else words[0].format(user=user)
    return reason if summary else f"{user}'s server did not start: {reason}"


def _report(entry, done_state: str) -> dict:
    """One collect or return (an audit entry whose detail holds ``report``), for the page."""
    report: Mapping[str, Mapping] = entry.detail.get("report") or {}
    done = sorted(u for u, r in report.items() if r.get("state") == done_state)
    skipped = [
        {"user": u, "state": r.get("state", ""), "reason": r.get("reason", "")}
        for u, r in sorted(report.items())
        if r.get("state") != done_state
    ]
    return {
        "at": entry.at.isoformat(),
        "who": entry.who,
        "done": done,
        "skipped": skipped,
        "of": len(report),
    }


def copy_reports(audit: Iterable) -> dict[str, dict[str, dict]]:
    """``{assignment: {"collect": report, "return": report}}``: each assignment's latest collect
    (``done``: who submitted) and return (``done``: who got feedback) from the audit trail
    (newest first, as :meth:`~jupyterhub_gpulab.courses.store.CourseStore.audit` gives it).
    A report: ``at`` (ISO UTC), ``who``, ``done`` (users), ``skipped`` (``user``, ``state``,
    ``reason``: "missing", "no assignments/hw1 folder"), ``of`` (roster size then)."""
    out: dict[str, dict[str, dict]] = {}
    for entry in audit:
        kind = {"collect": "submitted", "return": "returned"}.get(entry.action)
        name = entry.detail.get("assignment") if isinstance(entry.detail, dict) else None
        if kind is None or not name or entry.action in out.get(name, {}):
            continue
        out.setdefault(name, {})[entry.action] = _report(entry, kind)
    return out


def staff_server(reader: str | None, server_name: str, active: Mapping) -> dict | None:
    """The reader's own course server, where the staff folder (collected work, feedback) is
    mounted: ``{"user", "state", "url"}`` (``url``: its address on the proxy while it runs,
    else ``None``: the page links the hub's spawn page); ``None`` without a reader."""
    if not reader:
        return None
    server = active.get((reader, server_name))
    running = server is not None and server.state == "running"
    return {
        "user": reader,
        "state": server.state if server is not None else "stopped",
        "url": server.url if running else None,
    }

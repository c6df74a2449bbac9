"""The status bar's line from the service's ``GET me`` record. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Mapping

#: What each isolation level means for the student, short (the service's words, shortened).
LEVELS = {
    "hard": "isolated",
    "soft": "shared",
    "framework": "shared, capped by the framework",
    "mps": "shared, capped by MPS",
}


def _gib(n: int | None) -> str:
    if not n:
        return "?"
    g = n / 2**30
    return f"{g:.0f} GiB" if g >= 10 or g == int(g) else f"{g:.1f} GiB"


def _isolation(env: Mapping[str, str], level: str | None) -> str | None:
    # the container knows best: the spawner's GPULAB_ISOLATION, and the image's hook
    mine = env.get("GPULAB_ISOLATION")
    if mine == "soft" and env.get("GPULAB_SEAT_MEMORY_BYTES"):
        mine = "framework"
    return mine or level


#: How often the status bar asks (seconds), unless ``$GPULAB_STATUS_REFRESH_S`` says otherwise.
REFRESH_S = 60


def refresh_seconds(env: Mapping[str, str]) -> int:
    """``$GPULAB_STATUS_REFRESH_S`` (whole seconds, at least 1; else :data:`REFRESH_S`): how
    often the status bar asks; a warning shows at most that long after the culler gives it."""
    raw = env.get("GPULAB_STATUS_REFRESH_S", "")
    return max(1, int(raw)) if raw.isdigit() else REFRESH_S


def gpu_idle_warning(me: Mapping, server_name: str) -> dict | None:
    """The culler's GPU-idle warning for server ``server_name`` in the service's ``me`` record
    (``{"message", "due_at"}``: when the server will be stopped, ISO UTC), or ``None``. It is
    the one the status bar offers **Keep** and **Move to CPU** for."""
    for w in me.get("warnings") or ():
        if (
            w.get("rule") == "gpu-idle"
            and w.get("kind") == "warning"
            and w.get("server_name") == server_name
        ):
            return {"message": w.get("message") or "", "due_at": w.get("due_at")}
    return None


def summarise(me: Mapping, server_name: str, env: Mapping[str, str]) -> dict:
    """``{"text", "title", "level", "slice", "gpu_hours", "page", "warning", "refresh_s"}`` for
    server ``server_name`` of the user ``me`` describes (``refresh_s``: :func:`refresh_seconds`).
    ``level`` is ``"warn"`` while the culler's GPU-idle warning for this server stands
    (``warning``: :func:`gpu_idle_warning`), else ``"low"`` when under 10 % of the budget is
    left (or it is spent) or the host warns that the seat is over its GPU memory cap, else
    ``"ok"``. A host-checked seat's text carries its use: ``GPU memory 0.8 of 1 GiB``."""
    server = next((s for s in me.get("servers") or () if s.get("name") == server_name), None)
    sl = server.get("slice") if server else None
    if sl:
        kind = (
            sl.get("mig_profile")
            and f"MIG {sl['mig_profile']}"
            or {
                "gpu": "whole GPU",
                "shared": "shared seat",
            }.get(sl.get("kind"), sl.get("kind") or "GPU")
        )
        iso = _isolation(env, sl.get("isolation"))
        # a seat's cap is all for tensors: each CUDA process's context is outside it
        tensors = " for tensors" if sl.get("kind") == "shared" else ""
        gpu = f"{kind}, {_gib(sl.get('memory_bytes'))}{tensors}, {LEVELS.get(iso, iso)}"
        if sl.get("seat_memory"):  # the host's view of the seat: "GPU memory 0.8 of 1 GiB"
            gpu += f" · {sl['seat_memory']}"
        title = sl.get("description") or gpu
        if sl.get("seat_check"):
            title += f"\nSeat cap: {sl['seat_check']}"
        if sl.get("isolation_detail"):
            title += f" — {sl['isolation_detail']}"
        if sl.get("tensor_memory"):
            title += f"\nMemory: {sl['tensor_memory']}"
    else:
        gpu, title = "no GPU", "This server holds no GPU slice (a CPU-only profile)."
    hours = me.get("gpu_hours") or {}
    budget = hours.get("budget")
    level = "ok"
    if budget:
        left = max(0.0, float(budget.get("remaining_hours") or 0.0))
        limit = float(budget.get("limit_hours") or 0.0)
        quota = f"{left:.1f} of {limit:g} GPU-h left"
        if budget.get("exhausted") or (limit and left < 0.1 * limit):
            level = "low"
    else:
        quota = f"{float(hours.get('used_hours') or 0.0):.1f} GPU-h used, no budget"
    if hours.get("describe"):
        title += f"\n{hours['describe']}"
    # the seat guard's warning (rule "seat-memory"): the student's first sight of it here
    over = [
        w for w in me.get("warnings") or ()
        if w.get("rule") == "seat-memory" and w.get("server_name") == server_name
    ]  # fmt: skip
    if over:
        level = "low"
        gpu += " — OVER its GPU memory cap"
        title = f"{over[0].get('message', '')}\n{title}"
    warning = gpu_idle_warning(me, server_name)
    if warning:
        level = "warn"
        title = f"{warning['message']}\n\n{title}"
    return {
        "text": f"GPU: {gpu} · {quota}",
        "title": title,
        "level": level,
        "slice": sl,
        "gpu_hours": hours,
        "page": "/services/gpulab/me",
        "warning": warning,
        "refresh_s": refresh_seconds(env),
    }

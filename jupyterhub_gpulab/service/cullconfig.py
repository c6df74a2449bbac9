"""The culler's settings, ``c.GPULabService.*`` (the service's Configurable inherits them).

Durations are written as admins write them elsewhere (``"90s"``, ``"10m"``, ``"4h"``) or as a
number of seconds, and are stored in seconds (:class:`~..lab.traits.Duration`).
"""

from __future__ import annotations

from traitlets import Bool, Float, Unicode
from traitlets.config import LoggingConfigurable

from ..lab.traits import ChoiceEnum, Duration

#: What a slice with no utilisation figure counts as (``c.GPULabService.unknown_utilization``).
UNKNOWN_UTILIZATION = ("busy", "idle")


class CullerTraits(LoggingConfigurable):
    """The GPU-aware culler's traits (see :mod:`jupyterhub_gpulab.service.culling`)."""

    cull_every = Duration(
        "1m",
        positive=True,
        config=True,
        help="""How often the culler looks at every running server (a duration, ``"1m"``, or seconds).

        Each pass lists servers from the hub, matches them with open allocations, reads the
        utilisation history and budgets, then warns or stops. ``c.GPULabService.cull_every =
        "1m"``""",
    )

    cull_warn_before = Duration(
        "10m",
        config=True,
        help="""How long before a server is stopped its user is warned (hub home page and the gpulab
        user page). A rule found already due is warned now and acted on this long after.
        ``c.GPULabService.cull_warn_before = "10m"``""",
    )

    cull_dry_run = Bool(
        False,
        config=True,
        help="""Only log what the culler would do ("[dry-run] warn …", "[dry-run] cull …"): no
        warning is shown, nothing is stopped. Try new timeouts with it first.
        ``c.GPULabService.cull_dry_run = True``""",
    )

    gpu_idle_threshold = Float(
        5.0,
        min=0.0,
        max=100.0,
        config=True,
        help="""Below this utilisation (percent, 0-100) a slice counts as idle for the
        ``gpu_idle_timeout`` rule. ``c.GPULabService.gpu_idle_threshold = 5.0``""",
    )

    gpu_idle_spare_active = Duration(
        0,
        config=True,
        help="""Spare an idle GPU from the ``gpu_idle_timeout`` rule while its user is at the
        keyboard and nobody needs the slice (a duration; 0, the default, turns it off).

        A server is spared, neither warned nor stopped for its idle GPU, while all of these
        hold: its user was at the keyboard within this long (the last keystroke, click or
        scroll its JupyterLab extension reported, for servers running the lab image; else the
        hub's ``last_activity``: an open tab, a kernel); a user starting its profile now would still find a free slice (free, and not
        kept by a course booking); and nobody is on the waitlist for a slice it could give.
        The pass the last free slice is taken or someone queues, the rule applies again from
        the GPU's idle clock, which kept running: a server idle past its timeout is warned at
        once and stopped ``cull_warn_before`` later (Keep and Move to CPU are offered as
        always). The ``idle``, ``max-age``, budget and preemption rules are unchanged.

        Use it where beginners think between GPU cells (the term simulation: most GPU-idle
        stops hit users at the keyboard). The price: idle slices stay held while they are
        free (at most ``gpu_idle_spare_longest`` past the timeout), and the next user to
        need one waits up to ``cull_warn_before`` for it. The hub refreshes ``last_activity``
        every ``JupyterHub.last_activity_interval`` (5 min by default): shorter than that, a
        user at the keyboard is spared only part of the time; each minute longer holds the
        slice of a user who left a minute longer.
        ``c.GPULabService.gpu_idle_spare_active = "5m"``""",
    )

    gpu_idle_spare_longest = Duration(
        "1h",
        allow_none=True,
        config=True,
        help="""How long past its ``gpu_idle_timeout`` an idle GPU may be spared by
        ``gpu_idle_spare_active`` at most (a duration; ``None``: as long as nobody needs it).

        The hub counts an open tab as activity, so a tab left open over an idle GPU looks like a
        user at the keyboard: this bounds how long such a slice stays held while it is free.
        Servers whose JupyterLab extension reports keystrokes are judged by those, not by the
        tab, so a lab whose image has the extension can set it longer (the term simulation met
        every target of issue 22 with ``"4h"``).
        A user thinking between GPU cells runs one again well within it (the term simulation's
        students: a GPU cell every 40 min on average). Past it the ``gpu-idle`` rule is due: the
        user is warned at once and stopped ``cull_warn_before`` later.
        ``c.GPULabService.gpu_idle_spare_longest = "1h"``""",
    )

    utilization_history = Duration(
        "4h",
        positive=True,
        config=True,
        help="""How much utilisation history the service keeps per slice (memory: one sample per
        ``sample_interval``). Must cover the longest ``gpu_idle_timeout`` plus
        ``cull_warn_before``. ``c.GPULabService.utilization_history = "4h"``""",
    )

    max_sample_gap = Duration(
        "2m",
        positive=True,
        config=True,
        help="""A gap between utilisation samples longer than this (the service was down or busy)
        restarts the GPU-idle clock: the culler never calls a GPU idle that it did not watch.
        The samples live in the service's memory, so a restart of the service (a hub restart
        restarts a hub-managed one) restarts every running server's clock too.
        ``c.GPULabService.max_sample_gap = "2m"``""",
    )

    proc_root = Unicode(
        "/proc",
        config=True,
        help="""Where the host's ``/proc`` is visible, to map GPU processes to containers for
        shared seats (NVML reports host pids). ``c.GPULabService.proc_root = "/host/proc"``""",
    )

    unknown_utilization = ChoiceEnum(
        UNKNOWN_UTILIZATION,
        "busy",
        config=True,
        help="""What a slice whose utilisation NVML cannot report counts as for the GPU-idle
        rule: ``"busy"`` (default: a missing figure never lets that rule stop a server) or
        ``"idle"``. With ``"idle"``, a lab whose devices report no utilisation (declared vGPU
        guests, MIG on Ampere, a demo without GPUs) still enforces ``gpu_idle_timeout``: such a
        server is warned and stopped ``gpu_idle_timeout`` after the service began watching it,
        whatever runs on it, because nothing says the GPU is busy. Use it where that is meant (a
        demo, or a profile whose ``gpu_idle_timeout`` is meant as a session cap).
        ``c.GPULabService.unknown_utilization = "idle"``""",
    )

    proxy_url = Unicode(
        "",
        config=True,
        help="""The hub's public address as the service reaches it (``"http://127.0.0.1:8000"``),
        used only to ask a server about busy kernels before stopping it for inactivity, and only
        when the service's token holds ``access:servers`` (``configure_service`` does not grant
        it; see the docs' admin guide, "Fair use"). Empty: kernels are not read.
        ``c.GPULabService.proxy_url = "http://127.0.0.1:8000"``""",
    )

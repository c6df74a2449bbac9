"""The culler's settings, ``c.GPULabService.*`` (the service's Configurable inherits them).

Durations are written as admins write them elsewhere (``"90s"``, ``"10m"``, ``"4h"``) or as a
number of seconds; :meth:`CullerTraits.seconds` reads one back in seconds.
"""

from __future__ import annotations

from traitlets import Bool, Float, TraitError, Unicode, Union, validate
from traitlets.config import LoggingConfigurable

from ..units import UnitError, parse_seconds

#: What a slice with no utilisation figure counts as (``c.GPULabService.unknown_utilization``).
UNKNOWN_UTILIZATION = ("busy", "idle")


def _duration(default: str, help: str) -> Union:
    return Union([Float(), Unicode()], default_value=default, config=True, help=help)


class CullerTraits(LoggingConfigurable):
    """The GPU-aware culler's traits (see :mod:`jupyterhub_gpulab.service.culling`)."""

    cull_every = _duration(
        "1m",
        """How often the culler looks at every running server (a duration, ``"1m"``, or seconds).

        Each pass lists servers from the hub, matches them with open allocations, reads the
        utilisation history and budgets, then warns or stops. ``c.GPULabService.cull_every =
        "1m"``""",
    )

    cull_warn_before = _duration(
        "10m",
        """How long before a server is stopped its user is warned (hub home page and the gpulab
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

    utilization_history = _duration(
        "4h",
        """How much utilisation history the service keeps per slice (memory: one sample per
        ``sample_interval``). Must cover the longest ``gpu_idle_timeout`` plus
        ``cull_warn_before``. ``c.GPULabService.utilization_history = "4h"``""",
    )

    max_sample_gap = _duration(
        "2m",
        """A gap between utilisation samples longer than this (the service was down or busy)
        restarts the GPU-idle clock: the culler never calls a GPU idle that it did not watch.
        ``c.GPULabService.max_sample_gap = "2m"``""",
    )

    proc_root = Unicode(
        "/proc",
        config=True,
        help="""Where the host's ``/proc`` is visible, to map GPU processes to containers for
        shared seats (NVML reports host pids). ``c.GPULabService.proc_root = "/host/proc"``""",
    )

    unknown_utilization = Unicode(
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
        it; see the README's "Fair use"). Empty: kernels are not read.
        ``c.GPULabService.proxy_url = "http://127.0.0.1:8000"``""",
    )

    @validate("cull_every", "cull_warn_before", "utilization_history", "max_sample_gap")
    def _valid_duration(self, proposal):
        name = proposal["trait"].name
        value = proposal["value"]
        try:
            seconds = parse_seconds(value, f"c.GPULabService.{name}")
        except UnitError as e:
            raise TraitError(str(e)) from None
        if isinstance(value, float):
            seconds = value
        if name != "cull_warn_before" and seconds <= 0:
            raise TraitError(f"c.GPULabService.{name} must be longer than 0 s, e.g. '1m'")
        return proposal["value"]

    @validate("unknown_utilization")
    def _valid_unknown(self, proposal):
        if proposal["value"] not in UNKNOWN_UTILIZATION:
            raise TraitError(
                f"c.GPULabService.unknown_utilization {proposal['value']!r} must be "
                "'busy' (never cull on a missing figure) or 'idle'"
            )
        return proposal["value"]

    def seconds(self, name: str) -> float:
        """Trait ``name`` (a duration) in seconds."""
        value = getattr(self, name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        return float(parse_seconds(value, f"c.GPULabService.{name}"))

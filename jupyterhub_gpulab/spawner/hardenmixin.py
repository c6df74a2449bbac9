"""The hardening half of GPUDockerSpawner: the lab-wide PID limit and capabilities, and what one
profile's container gets (rules: :mod:`jupyterhub_gpulab.lab.hardening`)."""

from __future__ import annotations

from traitlets import HasTraits, Integer, List, TraitError, Unicode, validate

from ..lab.hardening import (
    DEFAULT_PIDS_LIMIT,
    cap_add_problems,
    host_config_problems,
    pids_limit_problem,
)
from ..lab.profile import Profile
from . import container as ct


class HardeningMixin(HasTraits):
    """Mixed into :class:`~.gpudocker.GPUDockerSpawner` (before DockerSpawner in the MRO)."""

    pids_limit = Integer(
        DEFAULT_PIDS_LIMIT,
        config=True,
        help=f"""Most processes and threads one server's container may hold (Docker's
        ``--pids-limit``; every thread counts), so that a fork bomb stops inside its container.

        Default {DEFAULT_PIDS_LIMIT}; at least 64. A profile's ``pids_limit`` overrides it.
        ``c.GPUDockerSpawner.pids_limit = 2048``
        """,
    )

    @validate("pids_limit")
    def _check_pids_limit(self, proposal):
        problem = pids_limit_problem(proposal.value)
        if problem:
            raise TraitError(f"c.GPUDockerSpawner.{problem}")
        return proposal.value

    cap_add = List(
        Unicode(),
        config=True,
        help="""Linux capabilities every container gets back (names such as ``"CHOWN"``).

        Containers start with none (``CapDrop: ALL``) and with ``no-new-privileges``: a notebook
        server running as an ordinary user needs none. Images that start as root and switch user
        themselves need some (``["CHOWN", "SETUID", "SETGID", "FOWNER", "DAC_OVERRIDE"]``). Only
        Docker's default capabilities may be added; ``SYS_ADMIN`` and the like are refused. A
        profile's ``cap_add`` replaces this list for that profile.
        ``c.GPUDockerSpawner.cap_add = ["CHOWN"]``
        """,
    )

    @validate("cap_add")
    def _check_cap_add(self, proposal):
        caps, problems = cap_add_problems(proposal.value)
        if problems:
            raise TraitError("; ".join(f"c.GPUDockerSpawner.{m}" for m in problems))
        return list(caps)

    @validate("extra_host_config")
    def _check_extra_host_config(self, proposal):
        problems = host_config_problems(proposal.value)
        if problems:
            raise TraitError("; ".join(problems))
        return proposal.value

    def hardening_for(self, profile: Profile | None, security_opt=()) -> dict:
        """Docker ``HostConfig`` entries confining a container of ``profile`` (``None``: the
        lab-wide settings); ``security_opt`` are the admin's own options, kept."""
        pids = self.pids_limit
        caps = self.cap_add
        if profile is not None:
            pids = profile.pids_limit if profile.pids_limit is not None else pids
            caps = profile.cap_add if profile.cap_add is not None else caps
        return ct.hardening(pids_limit=pids, cap_add=caps, security_opt=security_opt)

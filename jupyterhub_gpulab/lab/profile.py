"""The :class:`Profile` record: one configured profile, what a user picks.

Its own module so that the rules that take profiles (:mod:`.profiles` loads and entitles,
:mod:`.policy` combines group policies, :mod:`.choice` turns a user's choice into one) import it
without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..inventory.model import SliceRequest

__all__ = ["Profile"]


@dataclass(frozen=True)
class Profile:
    """One configured profile.

    ``slice`` is what it asks for (``SliceRequest()``: no GPU). ``cpu_limit`` is in cores,
    ``mem_limit`` in bytes, ``idle_timeout`` / ``gpu_idle_timeout`` / ``max_age`` in seconds
    (``None``: unset; the service's culler enforces them). ``groups`` empty means open to every
    user. ``env`` is a read-only mapping (excluded from the hash). ``pids_limit`` (processes and
    threads) and ``cap_add`` (capability names such as ``"CHOWN"``, from Docker's default set)
    override the spawner's ``c.GPUDockerSpawner.pids_limit`` / ``cap_add`` for this profile
    (``None``: the spawner's; see :mod:`.hardening`). ``shm_size`` is the size of the
    container's ``/dev/shm`` in bytes (``None``: ``c.GPUDockerSpawner.shm_size``).
    """

    slug: str
    display_name: str
    image: str
    description: str = ""
    slice: SliceRequest = SliceRequest()
    cpu_limit: float | None = None
    mem_limit: int | None = None
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    groups: tuple[str, ...] = ()
    default: bool = False
    idle_timeout: int | None = None
    gpu_idle_timeout: int | None = None
    max_age: int | None = None
    pids_limit: int | None = None
    cap_add: tuple[str, ...] | None = None
    shm_size: int | None = None

    @property
    def wants_gpu(self) -> bool:
        return self.slice.wants_gpu

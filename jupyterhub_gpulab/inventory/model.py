"""The shapes every part of gpulab shares: devices, slices, inventories and slice requests.

Pure data, no I/O. An :class:`Inventory` comes either from NVML (:mod:`.nvml`) or from
configuration (:mod:`.declared`); the ledger, spawner and service consume both the same way.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from ..units import format_bytes


class SliceKind(str, enum.Enum):
    """What a slice gives a container."""

    GPU = "gpu"  #: a whole device (a physical GPU or a vGPU guest such as ``GRID P40-1Q``)
    MIG = "mig"  #: one MIG device (``MIG-<uuid>``) with a profile such as ``1g.10gb``
    SHARED = "shared"  #: one of N seats on a device, with a memory cap and a compute share

    def __str__(self) -> str:
        return self.value


#: What a shared seat's caps are, by whether the host runs an MPS control daemon (``None``: not
#: known here, as in the service, which does not see the spawner's ``mps`` setting).
_SEAT_CAPS = {
    True: "memory and compute are capped by MPS",
    False: "memory and compute caps are only advisory (the host runs no MPS)",
    None: (
        "memory and compute are capped where the host runs MPS; elsewhere memory is capped by "
        "the framework in gpulab's images, only advisory in others"
    ),
}


#: A seat without MPS in an image whose frameworks cap memory (images/site/gpulab_seatcap.py).
_FRAMEWORK_CAP = (
    "memory capped by the framework (PyTorch, TensorFlow, JAX) and, where the host's NVML "
    "reports each process's memory, checked from the host: a process that bypasses the "
    "framework and holds more than the seat is ended after a short grace; compute shared"
)


def isolation(
    kind: SliceKind | str, mps: bool | None = None, framework_cap: bool = False
) -> tuple[str, str]:
    """``(level, sentence)`` for a slice of ``kind``: the one wording the spawn form, the spawn
    progress and the service's pages use. ``level`` is ``"hard"`` (whole GPU, MIG: isolated in
    hardware) or ``"soft"`` (shared seat); ``mps`` says whether a seat's caps are enforced
    (``None``: unknown); ``framework_cap`` that the image's frameworks cap a seat's memory
    ("capped by the framework", between soft and MPS). Raises ``ValueError`` for an unknown
    kind."""
    kind = SliceKind(kind)
    if kind is SliceKind.GPU:
        return "hard", "a whole GPU, yours alone"
    if kind is SliceKind.MIG:
        return "hard", "a MIG instance: hardware-isolated memory and compute"
    caps = _SEAT_CAPS[mps] if mps or not framework_cap else _FRAMEWORK_CAP
    return "soft", f"a shared seat: {caps}; not isolated from the other seats"


#: What holds a shared seat's cap, in the one wording of the pages, the API, the spawn form and
#: the course page (:func:`seat_check`): the image's framework hook caps it and the service checks
#: its processes' GPU memory from the host, or only the hook holds it.
HOST_ENFORCED = "framework-capped, host-enforced"
SOFT = "soft"


def seat_check(kind: SliceKind | str | None, host_checked: bool | None) -> str | None:
    """:data:`HOST_ENFORCED` or :data:`SOFT` for a slice of ``kind`` whose memory the host
    checks (``host_checked``: a sample's, or :func:`profile_seat_check`'s expectation), ``None``
    unless it is a shared seat."""
    if kind is None or SliceKind(kind) is not SliceKind.SHARED:
        return None
    return HOST_ENFORCED if host_checked else SOFT


def profile_seat_check(
    inventory: Inventory, request: SliceRequest, framework_cap: bool
) -> str | None:
    """:func:`seat_check` of the seats a profile asking ``request`` may get, before any is taken:
    host-enforced only when its image caps them (``framework_cap``) and every such seat is on
    this host (the service's guard reads no other node's seats yet) on a GPU that is not a vGPU
    guest (whose NVML lists no process's memory); a student may land on any of them."""
    devices = inventory.device_by_uuid()
    seats = [s for s in inventory.slices if request.matches(s)]
    checked = bool(seats) and all(
        s.node == "local" and s.device_uuid in devices and devices[s.device_uuid].vgpu_type is None
        for s in seats
    )
    return seat_check(request.kind, framework_cap and checked)


def describe_slice(
    kind: SliceKind | str,
    device_index: int,
    device_name: str,
    memory_bytes: int,
    *,
    mig_profile: str | None = None,
    seat: int | None = None,
    seats: int | None = None,
    share: float = 1.0,
) -> str:
    """A user-facing one-liner for a slice, from its fields (a :class:`Slice`'s or a ledger
    row's): ``"MIG 1g.10gb on GPU 0 (NVIDIA A100-SXM4-40GB)"``, ``"shared seat 2 of 4 (4 GiB,
    25% compute) on GPU 1 (Tesla T4)"``, ``"whole GPU 2 (NVIDIA A40), 48 GiB"``."""
    kind = SliceKind(kind)
    where = f"GPU {device_index} ({device_name})"
    if kind is SliceKind.MIG:
        return f"MIG {mig_profile} on {where}"
    if kind is SliceKind.SHARED:
        return (
            f"shared seat {seat + 1 if seat is not None else '?'} of {seats} "
            f"({format_bytes(memory_bytes)}, {share:.0%} compute) on {where}"
        )
    return f"whole {where}, {format_bytes(memory_bytes)}"


@dataclass(frozen=True)
class Device:
    """A GPU as NVML reports it.

    ``memory_bytes`` is the total framebuffer memory in bytes (``nvmlDeviceGetMemoryInfo().total``).
    ``compute_capability`` is ``(major, minor)`` or ``None`` when unknown (declared devices).
    ``vgpu_type`` is the vGPU profile (``"P40-1Q"``) for a vGPU guest, else ``None``.
    ``driver_version`` is the host's NVIDIA driver (``nvmlSystemGetDriverVersion``, e.g.
    ``(580, 65, 6)``), ``None`` when unknown.
    """

    uuid: str
    index: int
    name: str
    memory_bytes: int
    compute_capability: tuple[int, int] | None = None
    mig_enabled: bool = False
    node: str = "local"
    vgpu_type: str | None = None
    driver_version: tuple[int, ...] | None = None

    def describe(self) -> str:
        """``"GPU 0 (NVIDIA A100-SXM4-40GB)"``."""
        return f"GPU {self.index} ({self.name})"


@dataclass(frozen=True)
class Slice:
    """The unit gpulab allocates; ``id`` is stable across restarts and rescans.

    - ``gpu``: ``id`` is the device UUID (``GPU-…``).
    - ``mig``: ``id`` is the MIG device UUID (``MIG-…``), ``mig_profile`` e.g. ``"1g.10gb"``.
    - ``shared``: ``id`` is ``"<GPU uuid>/seat-<n>"``; ``seat`` is n (0-based) of ``seats``.

    ``visible_id`` is what the container receives in ``NVIDIA_VISIBLE_DEVICES`` and in the Docker
    device request (the GPU UUID, or the MIG UUID). ``memory_bytes`` is the memory the slice gives
    (a seat's cap). ``share`` is the fraction of the device it represents (1.0 for a whole GPU,
    ``g/7`` for an ``Ng`` MIG slice of an A100/H100 per its compute slices, the seat's compute share
    for a shared seat); usage accounting weighs GPU-seconds by it. ``rank`` orders slices of one kind
    for placement (lower first). ``compute_capability`` and ``driver_version`` are the device's
    (:class:`Device`), for matching images to the GPUs they can use (``None``: unknown).
    """

    id: str
    kind: SliceKind
    device_uuid: str
    device_index: int
    device_name: str
    memory_bytes: int
    visible_id: str
    share: float = 1.0
    node: str = "local"
    mig_profile: str | None = None
    seat: int | None = None
    seats: int | None = None
    rank: int = 0
    compute_capability: tuple[int, int] | None = None
    driver_version: tuple[int, ...] | None = None

    def describe(self) -> str:
        """A user-facing one-liner (:func:`describe_slice`):
        ``"MIG 1g.10gb on GPU 0 (NVIDIA A100-SXM4-40GB)"``."""
        return describe_slice(
            self.kind,
            self.device_index,
            self.device_name,
            self.memory_bytes,
            mig_profile=self.mig_profile,
            seat=self.seat,
            seats=self.seats,
            share=self.share,
        )

    def explain(self, mps: bool | None = None, framework_cap: bool = False) -> str:
        """:meth:`describe` and what it isolates (:func:`isolation`), for the spawn progress:
        ``"MIG 1g.10gb on GPU 0 (…) — a MIG instance: hardware-isolated memory and compute"``."""
        return f"{self.describe()} — {isolation(self.kind, mps, framework_cap)[1]}"

    @property
    def isolation(self) -> str:
        """``"hard"`` for whole GPUs and MIG (hardware-isolated), ``"soft"`` for shared seats."""
        return isolation(self.kind)[0]


@dataclass(frozen=True)
class Inventory:
    """Devices and their slices, with where they came from.

    ``source`` is ``"nvml"``, ``"declared"`` or ``"none"`` (no driver: zero devices).
    ``warnings`` are human-readable lines for the log and ``gpulab inventory``.
    ``shared_settings`` maps a device UUID to its shared-seat settings, for devices split in seats.
    """

    devices: tuple[Device, ...] = ()
    slices: tuple[Slice, ...] = ()
    source: str = "none"
    warnings: tuple[str, ...] = ()

    def slice_by_id(self) -> dict[str, Slice]:
        return {s.id: s for s in self.slices}

    def device_by_uuid(self) -> dict[str, Device]:
        return {d.uuid: d for d in self.devices}


@dataclass(frozen=True)
class SliceRequest:
    """What a profile asks for. ``kind=None`` means no GPU (a CPU-only profile).

    - ``gpu``: optional ``min_memory_bytes`` and ``model`` (case-insensitive substring of the
      device name, e.g. ``"A100"``).
    - ``mig``: ``mig_profile`` is required (``"1g.10gb"``).
    - ``shared``: optional ``min_memory_bytes`` (the seat's cap must be at least this).

    ``min_compute_capability`` (``(7, 5)``) and ``min_driver`` (``(580, 65, 6)``) are what the
    profile's image needs of the device (:mod:`..lab.images`, from its labels; ``None``: no
    need). ``max_compute_capability`` (``(9, 0)``) is the newest architecture an image without
    PTX carries machine code for: a device of a later major cannot run it (a cubin runs on later
    minors of its own major only). A slice whose device's figure is unknown is not excluded.
    """

    kind: SliceKind | None = None
    min_memory_bytes: int = 0
    model: str | None = None
    mig_profile: str | None = None
    min_compute_capability: tuple[int, int] | None = None
    min_driver: tuple[int, ...] | None = None
    max_compute_capability: tuple[int, int] | None = None

    @property
    def wants_gpu(self) -> bool:
        return self.kind is not None

    @property
    def wanted_mig_profile(self) -> str | None:
        """The ``mig_profile`` a matching slice has: the request's for MIG, else none."""
        return self.mig_profile if self.kind is SliceKind.MIG else None

    def matches(self, s: Slice) -> bool:
        """Whether slice ``s`` satisfies this request (drain and holders are the ledger's job).

        The one rule, also written in SQL by :func:`~..ledger.queries.slice_filter` (a test
        checks the two agree): same kind; the same ``mig_profile`` (none unless MIG); at least
        ``min_memory_bytes``; ``model`` a case-insensitive substring of the device name; the
        device's compute capability and driver at least the image's minimums, and its major no
        later than the image's newest architecture's, where known."""
        return (
            self.kind is not None
            and s.kind is self.kind
            and s.mig_profile == self.wanted_mig_profile
            and s.memory_bytes >= self.min_memory_bytes
            and (not self.model or self.model.lower() in s.device_name.lower())
            and (
                self.min_compute_capability is None
                or s.compute_capability is None
                or s.compute_capability >= self.min_compute_capability
            )
            and (
                self.min_driver is None
                or s.driver_version is None
                or s.driver_version >= self.min_driver
            )
            and (
                self.max_compute_capability is None
                or s.compute_capability is None
                or s.compute_capability[0] <= self.max_compute_capability[0]
            )
        )

    @property
    def unrestricted(self) -> SliceRequest:
        """This request without the image's needs (what the profile itself asks for)."""
        return SliceRequest(self.kind, self.min_memory_bytes, self.model, self.mig_profile)

    def describe(self) -> str:
        """``"MIG 1g.10gb"``, ``"whole GPU (A100, >= 40 GiB)"``, ``"shared GPU seat"``, ``"no GPU"``."""
        if self.kind is None:
            return "no GPU"
        if self.kind is SliceKind.MIG:
            return f"MIG {self.mig_profile}"
        details = []
        if self.model:
            details.append(self.model)
        if self.min_memory_bytes:
            details.append(f">= {format_bytes(self.min_memory_bytes)}")
        base = "whole GPU" if self.kind is SliceKind.GPU else "shared GPU seat"
        return f"{base} ({', '.join(details)})" if details else base


def parse_version(text: str) -> tuple[int, ...]:
    """``"580.65.06"`` → ``(580, 65, 6)``; ``"7.5"`` → ``(7, 5)``. Raises ``ValueError`` for
    anything but dot-separated integers."""
    parts = text.strip().split(".")
    if not text.strip() or not all(p.isdigit() for p in parts):
        raise ValueError(f"not a version of dot-separated numbers: {text!r}")
    return tuple(int(p) for p in parts)


def format_version(v: Iterable[int]) -> str:
    """``(580, 65, 6)`` → ``"580.65.06"`` (NVIDIA's two-digit minor parts); ``(7, 5)`` → ``"7.5"``."""
    v = tuple(v)
    if len(v) == 3:
        return f"{v[0]}.{v[1]:02d}.{v[2]:02d}"
    return ".".join(str(p) for p in v)


def cc_key(cc: tuple[int, int] | None) -> int | None:
    """A compute capability as one sortable integer: ``(7, 5)`` → ``75``, ``(12, 0)`` → ``120``
    (the ledger's ``slices.cc_key``; minor versions stay below 10)."""
    return None if cc is None else cc[0] * 10 + cc[1]


def driver_key(version: tuple[int, ...] | None) -> int | None:
    """A driver version as one sortable integer: ``(580, 65, 6)`` → ``580065006`` (the ledger's
    ``slices.driver_key``; missing parts count 0)."""
    if version is None:
        return None
    a, b, c = (tuple(version) + (0, 0, 0))[:3]
    return a * 1_000_000 + b * 1_000 + c


@dataclass(frozen=True)
class SharedSettings:
    """How a device is split into seats: ``seats`` seats of ``memory_bytes`` each, each with
    ``compute_share`` (0 < share <= 1) of the SMs (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``)."""

    seats: int
    memory_bytes: int
    compute_share: float
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Utilization:
    """One utilisation sample of a slice: ``gpu_percent`` (0–100, the share of the sample
    period a kernel ran: GPM's busy share, ``nvmlDeviceGetUtilizationRates``, or a seat's
    processes' share) and ``memory_used_bytes`` (bytes), each ``None`` where NVML cannot tell
    (MIG devices report no utilisation rate; a vanished device reports nothing); ``at`` (aware
    UTC) when it was taken, ``None`` for a bare NVML read. The monitor keeps a history of them
    for the culler; the pages show the latest. ``host_checked`` (shared seats): ``True`` where
    NVML listed the device's processes with their memory, so the host checks the seat's cap
    (:mod:`jupyterhub_gpulab.fairuse.seatguard`); ``False`` where it cannot (a "soft" seat);
    ``None`` for other slices and for figures from elsewhere (node agents)."""

    gpu_percent: float | None = None
    memory_used_bytes: int | None = None
    at: datetime | None = None
    host_checked: bool | None = None

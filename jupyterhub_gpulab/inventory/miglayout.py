"""Re-lay a MIG GPU between layouts (class ``7x1g.10gb`` ↔ research ``2x3g.40gb``) through NVML's
GPU and compute instance calls; never a MIG mode change, never a GPU reset.

- :func:`parse_layout` reads ``"7x1g.10gb"``, ``"2x3g.40gb"``, ``"1x4g.40gb,1x3g.40gb"``;
  :func:`check_layout` holds it against the GPU's GPU instance profiles.
- :func:`plan` says what to destroy and create: GPU instances already in the target (with their
  compute instance) are kept, a GPU instance left without its compute instance (a run killed
  mid-change) gets one, the rest is destroyed; placements for the new ones are chosen so all fit.
- :func:`apply` does it: compute instances destroyed, then their GPU instances, then GPU instances
  created (``nvmlDeviceCreateGpuInstanceWithPlacement``), then one full-size compute instance on
  each. Re-running after a crash reads what is there and converges; running it on a GPU already
  in the layout changes nothing.

NVML's ``IN_USE`` (a process holds a compute instance) and ``NO_PERMISSION`` (not root) are
reported as :class:`LayoutRefused`, never retried. Callers keep the ledger's allocations off the
GPU first (``gpulab mig-layout``, :mod:`jupyterhub_gpulab.cli.miglayout`).
"""

from __future__ import annotations

import ctypes
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .nvml import gi_profiles, profile_suffix
from .nvml_calls import describe_error, load_nvml, shutdown
from .slices import mig_profile_name

__all__ = [
    "Instance",
    "LayoutError",
    "LayoutIncomplete",
    "LayoutRefused",
    "Plan",
    "Profile",
    "apply",
    "check_layout",
    "format_layout",
    "parse_layout",
    "plan",
    "read_gpu",
    "round_trip",
]

_GROUP = re.compile(r"^(?:(\d+)\s*[x×*]\s*)?(\d+g\.\d+gb(?:[+-][a-z.]+)?)$")
#: compute slices -> the NVML_COMPUTE_INSTANCE_PROFILE_* name of a full-size compute instance
_CI_PROFILES = {
    1: "NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE",
    2: "NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE",
    3: "NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE",
    4: "NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE",
    6: "NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE",
    7: "NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE",
    8: "NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE",
}


class LayoutError(ValueError):
    """The layout is not one this GPU can hold (bad syntax, unknown profile, does not fit)."""


class LayoutRefused(RuntimeError):
    """NVML refused before anything changed, or for a reason an admin must fix first (MIG mode
    off, not root, a process on a MIG instance)."""


class LayoutIncomplete(RuntimeError):
    """The GPU was changed part way: it is between layouts; running the same layout again
    finishes it."""


@dataclass(frozen=True)
class Profile:
    """A GPU instance profile of this GPU: ``name`` (``1g.10gb``), NVML's profile ``id``, its
    compute slices, the most instances of it, where it may start and how many memory slices."""

    name: str
    id: int
    slices: int
    instances: int
    starts: tuple[int, ...]
    size: int


@dataclass
class Instance:
    """A GPU instance on the GPU: its profile, GPU instance id, placement start, and its compute
    instances (NVML handles). ``complete``: exactly one, the full-size one (a MIG device)."""

    profile: str
    gi_id: int
    start: int
    handle: Any = None
    cis: list[Any] = field(default_factory=list)
    complete: bool = False


@dataclass
class Plan:
    destroy: list[Instance] = field(default_factory=list)
    finish: list[Instance] = field(default_factory=list)  # GPU instances missing their CI
    create: list[tuple[str, int]] = field(default_factory=list)  # (profile, placement start)

    @property
    def empty(self) -> bool:
        return not (self.destroy or self.finish or self.create)


def parse_layout(spec: str) -> list[str]:
    """``"7x1g.10gb"`` → seven ``"1g.10gb"``; groups joined by ``,`` or ``+`` with spaces
    (``"1x4g.40gb,1x3g.40gb"``); a count of 1 may be left out. Raises :class:`LayoutError`."""
    out: list[str] = []
    for group in re.split(r"\s*,\s*|\s+\+\s+", spec.strip().lower()):
        m = _GROUP.match(group)
        if not m or m.group(1) == "0":
            raise LayoutError(
                f"{spec!r} is not a MIG layout: write COUNTxPROFILE groups joined by commas, "
                "e.g. 7x1g.10gb, 2x3g.40gb or 1x4g.40gb,1x3g.40gb"
            )
        out += [m.group(2)] * int(m.group(1) or 1)
    return out


def format_layout(profiles: list[str]) -> str:
    counts = Counter(profiles)
    return ",".join(f"{n}x{p}" for p, n in sorted(counts.items(), key=lambda x: (-_g(x[0]), x[0])))


def check_layout(layout: list[str], profiles: dict[str, Profile], gpu: str) -> None:
    """Raise :class:`LayoutError` naming the valid profiles if ``layout`` uses another, or when
    its GPU instances cannot all be placed on the GPU."""
    unknown = sorted(set(layout) - set(profiles))
    if unknown:
        raise LayoutError(
            f"{gpu} has no MIG profile {', '.join(unknown)}; its profiles are "
            f"{', '.join(sorted(profiles, key=lambda p: (_g(p), p)))}"
        )
    if _place([profiles[p] for p in layout], set()) is None:
        raise LayoutError(
            f"{format_layout(layout)} does not fit on {gpu}: it has 7 compute slices and 8 "
            "memory slices, and each profile fits only at some places"
        )


def plan(current: list[Instance], target: list[str], profiles: dict[str, Profile]) -> Plan:
    """What turns ``current`` into ``target`` (profile names). Keeps what already matches;
    when the kept instances leave no room for the rest, starts from an empty GPU."""
    wanted = Counter(target)
    keep: list[Instance] = []
    for inst in sorted(current, key=lambda i: (not i.complete, i.gi_id)):
        if wanted[inst.profile] > 0 and (inst.complete or not inst.cis):
            wanted[inst.profile] -= 1
            keep.append(inst)
    missing = [profiles[p] for p, n in wanted.items() for _ in range(n)]
    taken = {c for i in keep for c in range(i.start, i.start + profiles[i.profile].size)}
    starts = _place(missing, taken)
    if starts is None:  # the kept ones are in the way: lay the whole GPU out again
        keep, missing = [], [profiles[p] for p in target]
        starts = _place(missing, set())
        if starts is None:
            raise LayoutError(f"{format_layout(target)} does not fit on this GPU")
    kept = {id(i) for i in keep}
    return Plan(
        destroy=[i for i in current if id(i) not in kept],
        finish=[i for i in keep if not i.complete],
        create=[(p.name, s) for p, s in zip(_largest_first(missing), starts)],
    )


def read_gpu(nvml: Any, device: Any) -> tuple[dict[str, Profile], list[Instance]]:
    """The GPU's GPU instance profiles (by name) and the GPU instances on it now. Raises
    :class:`LayoutRefused` when the GPU is not in MIG mode."""
    modes = _call(nvml, lambda: nvml.nvmlDeviceGetMigMode(device), "read its MIG mode")
    if int(modes[0]) != nvml.NVML_DEVICE_MIG_ENABLE:
        raise LayoutRefused(
            "MIG mode is off, so it has no MIG instances to re-lay. gpulab never changes MIG "
            "mode (that needs a GPU reset, with nothing running): an admin enables it with "
            "`nvidia-smi -i <index> -mig 1` and resets the GPU"
        )
    memory = int(nvml.nvmlDeviceGetMemoryInfo(device).total)
    profiles: dict[str, Profile] = {}
    by_id: dict[int, Profile] = {}
    for pid, (constant, info) in gi_profiles(nvml, device).items():
        name = mig_profile_name(
            int(info.sliceCount), int(info.memorySizeMB), memory, profile_suffix(nvml, constant)
        )
        starts, size = _placements(nvml, device, pid)
        prof = Profile(name, pid, int(info.sliceCount), int(info.instanceCount), starts, size)
        profiles[name] = by_id[pid] = prof
    instances: list[Instance] = []
    for prof in profiles.values():
        handles = (nvml.c_nvmlGpuInstance_t * max(prof.instances, 1))()
        count = ctypes.c_uint(0)
        _call(
            nvml,
            lambda p=prof, h=handles, c=count: nvml.nvmlDeviceGetGpuInstances(
                device, p.id, h, ctypes.byref(c)
            ),
            "list its GPU instances",
        )
        for gi in handles[: count.value]:
            info = nvml.nvmlGpuInstanceGetInfo(gi)
            cis, full = _compute_instances(nvml, gi, prof.slices)
            instances.append(
                Instance(
                    prof.name,
                    int(info.id),
                    int(info.placement.start),
                    gi,
                    cis,
                    complete=len(cis) == 1 and full == 1,
                )
            )
    return profiles, sorted(instances, key=lambda i: i.start)


def apply(nvml: Any, uuid: str, layout: list[str] | str) -> tuple[list[str], Plan]:
    """Re-lay GPU ``uuid`` (``GPU-…``) as ``layout``; returns ``(the layout before, the plan
    done)``. Raises :class:`LayoutError` (bad layout, nothing changed), :class:`LayoutRefused`
    (nothing changed, or NVML refused: a process on an instance, not root) or
    :class:`LayoutIncomplete` (changed part way: run again)."""
    target = parse_layout(layout) if isinstance(layout, str) else list(layout)
    nvml, missing = load_nvml(nvml)
    if nvml is None:
        raise LayoutRefused(missing)
    nvml.nvmlInit()
    try:
        device = _call(nvml, lambda: nvml.nvmlDeviceGetHandleByUUID(uuid), "find it")
        profiles, current = read_gpu(nvml, device)
        check_layout(target, profiles, uuid)
        todo = plan(current, target, profiles)
        _run(nvml, device, todo, profiles)
        return [i.profile for i in current], todo
    finally:
        shutdown(nvml)


def round_trip(nvml: Any, uuid: str, layout: list[str] | str) -> dict:
    """``scripts/gpu-check.sh``'s layout check: re-lay ``uuid`` as ``layout``, then back to the
    layout it had, reading NVML after each. ``{"before", "during", "after"}`` (as
    :func:`format_layout` writes them) and ``"ok"``: each read matched its target. Raises what
    :func:`apply` raises; nothing else is touched (MIG mode, other GPUs)."""
    target = parse_layout(layout) if isinstance(layout, str) else list(layout)
    before, _ = apply(nvml, uuid, target)
    during, _ = apply(nvml, uuid, before)  # back; returns the layout it found: the target's
    after, _ = apply(nvml, uuid, before)  # a no-op that reads the layout back
    same = sorted(during) == sorted(target) and sorted(after) == sorted(before)
    return {"before": format_layout(before), "during": format_layout(during),
            "after": format_layout(after), "ok": same}  # fmt: skip


# -- doing it ---------------------------------------------------------------------------------------


def _run(nvml: Any, device: Any, todo: Plan, profiles: dict[str, Profile]) -> None:
    changed = False
    try:
        for inst in todo.destroy:  # compute instances first: NVML refuses a GPU instance with any
            for ci in inst.cis:
                nvml.nvmlComputeInstanceDestroy(ci)
                changed = True
        for inst in todo.destroy:
            nvml.nvmlGpuInstanceDestroy(inst.handle)
            changed = True
        new = []
        for name, start in todo.create:
            placement = nvml.c_nvmlGpuInstancePlacement_t(start=start, size=profiles[name].size)
            new.append(
                (
                    nvml.nvmlDeviceCreateGpuInstanceWithPlacement(
                        device, profiles[name].id, placement
                    ),
                    profiles[name],
                )
            )
            changed = True
        for gi, prof in new + [(i.handle, profiles[i.profile]) for i in todo.finish]:
            ci_profile = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, getattr(nvml, _CI_PROFILES[prof.slices]), _engine(nvml)
            )
            nvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile.id)
            changed = True
    except nvml.NVMLError_InUse:
        raise LayoutRefused(
            "NVML says a MIG instance on it is in use (a process runs on it, though the ledger "
            "shows no allocation: `nvidia-smi` lists it); stop that process and run this again"
            + (". The GPU is between layouts until then" if changed else "; nothing was changed")
        ) from None
    except nvml.NVMLError_NoPermission:
        raise LayoutRefused(
            "NVML refused the change (no permission): re-laying MIG instances needs root on the "
            "GPU's host" + ("" if not changed else "; the GPU is between layouts until then")
        ) from None
    except Exception as exc:
        if not changed:
            raise
        what = describe_error(exc) if isinstance(exc, nvml.NVMLError) else repr(exc)
        raise LayoutIncomplete(
            f"stopped part way ({what}): the GPU is between layouts; run the same command again "
            "to finish"
        ) from exc


# -- small helpers ----------------------------------------------------------------------------------


def _call(nvml: Any, fn, what: str):
    try:
        return fn()
    except nvml.NVMLError_NotSupported:
        raise LayoutRefused(f"NVML cannot {what}: this GPU has no MIG (not supported)") from None
    except nvml.NVMLError_NoPermission:
        raise LayoutRefused(
            f"NVML refused to {what} (no permission): run as root on the GPU's host"
        ) from None
    except nvml.NVMLError_NotFound:
        raise LayoutRefused("NVML does not know this GPU on this host (`nvidia-smi -L`)") from None


def _engine(nvml: Any) -> int:
    return nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED


def _placements(nvml: Any, device: Any, profile_id: int) -> tuple[tuple[int, ...], int]:
    count = ctypes.c_uint(0)
    nvml.nvmlDeviceGetGpuInstancePossiblePlacements(device, profile_id, None, ctypes.byref(count))
    found = (nvml.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
    nvml.nvmlDeviceGetGpuInstancePossiblePlacements(device, profile_id, found, ctypes.byref(count))
    items = found[: count.value]
    return tuple(int(p.start) for p in items), int(items[0].size) if items else 0


def _compute_instances(nvml: Any, gi: Any, slices: int) -> tuple[list[Any], int]:
    """Every compute instance on GPU instance ``gi`` (whatever its profile), and how many of them
    are full-size."""
    found: list[Any] = []
    full = 0
    full_constant = getattr(nvml, _CI_PROFILES.get(slices, ""), None)
    for constant in range(int(getattr(nvml, "NVML_COMPUTE_INSTANCE_PROFILE_COUNT", 0))):
        try:
            info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, constant, _engine(nvml))
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_InvalidArgument):
            continue
        handles = (nvml.c_nvmlComputeInstance_t * max(int(info.instanceCount), 1))()
        count = ctypes.c_uint(0)
        nvml.nvmlGpuInstanceGetComputeInstances(gi, info.id, handles, ctypes.byref(count))
        found += handles[: count.value]
        if constant == full_constant:
            full += count.value
    return found, full


def _g(profile: str) -> int:
    return int(profile.split("g", 1)[0])


def _largest_first(profiles: list[Profile]) -> list[Profile]:
    return sorted(profiles, key=lambda p: (-p.size, -p.slices, p.name))


def _place(profiles: list[Profile], taken: set[int]) -> list[int] | None:
    """Starts (in :func:`_largest_first` order) where ``profiles`` all fit beside ``taken``
    memory slices, or ``None``: backtracking over each profile's possible placements."""
    todo = _largest_first(profiles)

    def go(i: int, used: set[int]) -> list[int] | None:
        if i == len(todo):
            return []
        p = todo[i]
        for s in p.starts:
            cells = set(range(s, s + p.size))
            if not cells & used:
                rest = go(i + 1, used | cells)
                if rest is not None:
                    return [s, *rest]
        return None

    return go(0, set(taken))

"""What a container gets for its slice: environment, Docker device request, labels, hardening.

Pure builders, no Docker calls, tested without an engine (as kubespawner's ``objects.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..inventory.model import Slice, SliceKind
from ..lab.hardening import SECURITY_OPT
from ..lab.profiles import is_protected_env

#: Docker labels gpulab puts on every container it starts.
LABEL_ALLOCATION = "org.jupyter.gpulab.allocation"
LABEL_USER = "org.jupyter.gpulab.user"
LABEL_SERVER = "org.jupyter.gpulab.server"
LABEL_SLICE = "org.jupyter.gpulab.slice"
LABEL_PROFILE = "org.jupyter.gpulab.profile"
LABEL_NODE = "org.jupyter.gpulab.node"
#: The lab's id (its ledger's, a uuid) and name: a hub touches only its own lab's containers.
#: (Not ``…gpulab.lab``: images/build-singleuser.sh labels the image with that, and a container
#: inherits its image's labels.)
LABEL_LAB = "org.jupyter.gpulab.lab-id"
LABEL_LAB_NAME = "org.jupyter.gpulab.lab-name"
#: The course slug of a course server: set only when the courses' pre-spawn hook decided this start
#: is that course's server (:mod:`jupyterhub_gpulab.courses.hubhook`); Distribute and the content
#: read act only on servers that carry it (a named server merely called like a course has none).
LABEL_COURSE = "org.jupyter.gpulab.course"

ATTACH_MODES = ("device_request", "cdi", "env")


def slice_env(s: Slice | None, *, mps: bool = False, framework_cap: bool = False) -> dict[str, str]:
    """Environment for a container holding ``s`` (``None``: a CPU-only profile).

    - no slice: ``NVIDIA_VISIBLE_DEVICES=void`` (the NVIDIA runtime then exposes no GPU);
    - whole GPU / MIG: ``NVIDIA_VISIBLE_DEVICES`` is the GPU or MIG UUID;
    - shared seat: the device UUID plus the caps: with ``mps`` (the host runs an MPS control
      daemon) ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (``"0=<MiB>M"``, NVIDIA MPS docs §5.2) and
      ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` (0-100); always the frameworks' allow-growth switches
      (``TF_FORCE_GPU_ALLOW_GROWTH``, ``XLA_PYTHON_CLIENT_PREALLOCATE=false``) and
      ``PYTORCH_CUDA_ALLOC_CONF`` so a seat does not grab the whole device's memory, and
      ``GPULAB_SEAT_MEMORY_BYTES`` / ``GPULAB_ISOLATION`` for notebooks to read. The image's
      start-up hook (``framework_cap``: its ``org.jupyter.gpulab.seat-cap`` label) caps the
      frameworks at ``GPULAB_SEAT_MEMORY_BYTES``; ``GPULAB_ISOLATION`` is then ``framework``
      (``mps`` with MPS, ``soft`` otherwise).
    """
    if s is None:
        return {"NVIDIA_VISIBLE_DEVICES": "void", "GPULAB_ISOLATION": "none"}
    env = {
        "NVIDIA_VISIBLE_DEVICES": s.visible_id,
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
        "GPULAB_SLICE": s.id,
        "GPULAB_SLICE_KIND": s.kind.value,
        "GPULAB_ISOLATION": s.isolation,
    }
    if s.kind is SliceKind.SHARED:
        mib = s.memory_bytes // 2**20
        env.update(
            {
                "GPULAB_SEAT_MEMORY_BYTES": str(s.memory_bytes),
                "TF_FORCE_GPU_ALLOW_GROWTH": "true",
                "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
            }
        )
        if framework_cap:
            env["GPULAB_ISOLATION"] = "framework"
        if mps:
            env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={mib}M"
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(1, round(s.share * 100)))
            env["GPULAB_ISOLATION"] = "mps"
    return env


def merge_env(*layers: Mapping[str, str], protected: Mapping[str, str]) -> dict[str, str]:
    """Merge env layers left to right, drop protected names from them (the rule profiles are
    refused by at load, :func:`~..lab.profiles.is_protected_env`), then apply ``protected``
    (gpulab's slice variables) last, so nothing a profile or user sets can change the slice."""
    env: dict[str, str] = {}
    for layer in layers:
        env.update({k: v for k, v in layer.items() if not is_protected_env(k)})
    env.update(protected)
    return env


def device_requests(s: Slice | None, mode: str) -> list[dict]:
    """Docker ``HostConfig.DeviceRequests`` for ``s`` in attach ``mode``.

    - ``device_request``: ``{"Driver": "nvidia", "DeviceIDs": [uuid], "Capabilities": [["gpu"]]}``
      (needs the NVIDIA Container Toolkit); never a count.
    - ``cdi``: ``{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=<uuid>"]}`` (Docker >= 25 with a
      CDI spec from ``nvidia-ctk cdi generate --device-name-strategy=uuid``).
    - ``env``: none; the host's default runtime (``nvidia``) reads ``NVIDIA_VISIBLE_DEVICES``.

    Raises ``ValueError`` for an unknown mode.
    """
    if mode not in ATTACH_MODES:
        raise ValueError(f"attach mode {mode!r} is unknown; use one of {', '.join(ATTACH_MODES)}")
    if s is None or mode == "env":
        return []
    if mode == "cdi":
        return [{"Driver": "cdi", "DeviceIDs": [f"nvidia.com/gpu={s.visible_id}"]}]
    return [{"Driver": "nvidia", "DeviceIDs": [s.visible_id], "Capabilities": [["gpu"]]}]


def hardening(
    *, pids_limit: int, cap_add: Iterable[str] = (), security_opt: Iterable[str] = ()
) -> dict:
    """Docker ``HostConfig`` entries that confine every container (rules: :mod:`..lab.hardening`).

    ``{"Privileged": False, "PidsLimit": pids_limit, "SecurityOpt": [..., "no-new-privileges:true"],
    "CapDrop": ["ALL"], "CapAdd": [...] or None}``. ``cap_add`` are validated capability names
    (``"CHOWN"``), given as Docker writes them (``"CAP_CHOWN"``). ``security_opt`` are options the
    admin set already (``extra_host_config``, e.g. a seccomp profile): kept, except any
    ``no-new-privileges`` setting, which is always ``true``. The result replaces those keys.
    """
    added = sorted({f"CAP_{c}" for c in cap_add})
    kept = [o for o in security_opt if not o.replace("=", ":").startswith("no-new-privileges")]
    return {
        "Privileged": False,
        "PidsLimit": int(pids_limit),
        "SecurityOpt": kept + list(SECURITY_OPT),
        "CapDrop": ["ALL"],
        "CapAdd": added or None,
    }


def labels(
    *,
    allocation_id: int | None,
    user: str,
    server_name: str,
    profile: str,
    slice_id: str | None,
    node: str,
    lab: str,
    lab_name: str | None = None,
    course: str | None = None,
) -> dict[str, str]:
    """The labels that let a restarted hub match containers to allocations, and tell this
    lab's containers (``lab``: the ledger's lab id) from another lab's on the same engine;
    ``course``: the slug of the course whose server this is (``None``: not a course server)."""
    out = {
        LABEL_LAB: lab,
        LABEL_USER: user,
        LABEL_SERVER: server_name,
        LABEL_PROFILE: profile,
        LABEL_NODE: node,
    }
    if lab_name:
        out[LABEL_LAB_NAME] = lab_name
    if allocation_id is not None:
        out[LABEL_ALLOCATION] = str(allocation_id)
    if slice_id is not None:
        out[LABEL_SLICE] = slice_id
    if course:
        out[LABEL_COURSE] = course
    return out


RUNTIME_MISSING_MARKERS = (
    'could not select device driver "nvidia"',
    'could not select device driver "cdi"',
    "unknown or invalid runtime name: nvidia",
    "failed to inject cdi devices",
    "unresolvable cdi devices",
    "nvidia-container-cli",
)


def is_gpu_runtime_missing(error_text: str) -> bool:
    """Whether a Docker engine error means the host cannot attach GPUs (no NVIDIA Container
    Toolkit, no CDI spec, or a broken driver), as opposed to any other start failure."""
    text = error_text.lower()
    return any(m.lower() in text for m in RUNTIME_MISSING_MARKERS)

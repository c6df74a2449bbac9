"""How much of the host a user's container may reach: capabilities, privileges, process limits.

Pure rules, no I/O; the spawner (``spawner/container.py``) builds Docker's ``HostConfig`` from them,
profiles (:mod:`.profiles`) and the spawner's traits validate with them, and ``gpulab
check-config`` warns with :func:`limit_warnings`.

Every container gets, whatever its profile:

- ``no-new-privileges``: a setuid program (``sudo``, ``su``, a copied ``/tmp/id`` with the setuid
  bit) runs with the caller's privileges, never root's;
- ``CapDrop: ALL``: jupyterhub-singleuser running as an ordinary user (uid 1000 in the usual
  images) needs no Linux capability: a process that is not root holds none, and with
  ``no-new-privileges`` it can gain none. A profile may add back, by name, only capabilities from
  Docker's default set (:data:`ADDABLE_CAPABILITIES`), for images that start as root and switch
  user themselves;
- a PID limit (``PidsLimit``, every thread counts): a fork bomb stops at the limit instead of
  taking the host. Default :data:`DEFAULT_PIDS_LIMIT`, per profile ``pids_limit``.

An admin's ``c.DockerSpawner.extra_host_config`` may not set what would undo this
(:func:`host_config_problems`).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..units import format_bytes

#: Docker's default capability set (moby ``oci/caps/defaults.go``): what a container gets unless
#: told otherwise. gpulab drops them all; a profile may add these back, and only these.
ADDABLE_CAPABILITIES = (
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
)  # fmt: skip

#: The other Linux capabilities (capabilities(7)): each lets a process reach past its container
#: (mount, trace other processes, load modules, change the network, read any file …).
ESCAPE_CAPABILITIES = (
    "ALL", "AUDIT_CONTROL", "AUDIT_READ", "BLOCK_SUSPEND", "BPF", "CHECKPOINT_RESTORE",
    "DAC_READ_SEARCH", "IPC_LOCK", "IPC_OWNER", "LEASE", "LINUX_IMMUTABLE", "MAC_ADMIN",
    "MAC_OVERRIDE", "NET_ADMIN", "NET_BROADCAST", "PERFMON", "SYSLOG", "SYS_ADMIN", "SYS_BOOT",
    "SYS_MODULE", "SYS_NICE", "SYS_PACCT", "SYS_PTRACE", "SYS_RAWIO", "SYS_RESOURCE", "SYS_TIME",
    "SYS_TTY_CONFIG", "WAKE_ALARM",
)  # fmt: skip

#: Security options every container gets.
SECURITY_OPT = ("no-new-privileges:true",)

#: Processes and threads one container may hold by default. Generous for deep learning (a
#: PyTorch process runs a thread per core, DataLoader workers are processes) and far below the
#: kernel's ``pid_max`` (4,194,304 on 64-bit hosts), so a fork bomb stays inside its container.
DEFAULT_PIDS_LIMIT = 4096
#: Below this jupyterhub-singleuser and a kernel cannot start (their own threads count).
MIN_PIDS_LIMIT = 64
MAX_PIDS_LIMIT = 1_000_000

ALLOWED_FIX = "allowed: " + ", ".join(ADDABLE_CAPABILITIES)

#: ``extra_host_config`` keys (docker-py's ``create_host_config`` names) that would undo the
#: confinement or the slice attachment; gpulab sets these itself.
OWNED_HOST_CONFIG = (
    "cap_add", "cap_drop", "device_cgroup_rules", "device_requests", "devices", "pids_limit",
    "privileged",
)  # fmt: skip


def host_config_problems(extra: dict) -> list[str]:
    """Why an admin's ``c.DockerSpawner.extra_host_config`` would weaken the containers: keys in
    :data:`OWNED_HOST_CONFIG`, or a ``security_opt`` that turns ``no-new-privileges`` off."""
    problems = [
        f"c.DockerSpawner.extra_host_config[{key!r}] is refused: gpulab sets it on every "
        "container (no privileges, no capabilities, a PID limit, only the allocated GPU); use "
        "c.GPUDockerSpawner.pids_limit / cap_add or a profile's pids_limit / cap_add"
        for key in sorted(extra)
        if key in OWNED_HOST_CONFIG
    ]
    opts = extra.get("security_opt") or ()
    if any(str(o).replace("=", ":").startswith("no-new-privileges") for o in opts):
        problems.append(
            "c.DockerSpawner.extra_host_config['security_opt'] may not set no-new-privileges: "
            "gpulab always sets it to true; remove that entry"
        )
    return problems


def pids_limit_problem(value: object) -> str | None:
    """Why ``value`` is not a usable PID limit (a message with the fix), or ``None``."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"pids_limit must be a whole number of processes such as 4096, got {value!r}"
    if value < MIN_PIDS_LIMIT:
        what = "no limit, which lets a fork bomb take the host" if value <= 0 else "too few"
        return (
            f"pids_limit {value} is {what}; the server and its kernel need at least "
            f"{MIN_PIDS_LIMIT}: write e.g. {DEFAULT_PIDS_LIMIT}"
        )
    if value > MAX_PIDS_LIMIT:
        return f"pids_limit {value} is no limit at all; write at most {MAX_PIDS_LIMIT}, e.g. {DEFAULT_PIDS_LIMIT}"
    return None


def normalize_capability(name: str) -> str:
    """``"cap_chown"`` / ``"CAP_CHOWN"`` / ``"chown"`` -> ``"CHOWN"`` (Docker accepts either)."""
    name = name.strip().upper()
    return name[4:] if name.startswith("CAP_") else name


def cap_add_problems(value: object) -> tuple[tuple[str, ...], list[str]]:
    """Validate a ``cap_add`` list: ``(capabilities, problems)``.

    ``capabilities`` are the valid names, normalised (``"CHOWN"``), sorted and without
    duplicates; each problem is a message with the fix: not a list of strings, a capability
    outside Docker's default set (``SYS_ADMIN``, ``ALL`` …: refused, a user could escape their
    slice), or a name that is no Linux capability.
    """
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        return (), [f"cap_add must be a list of capability names such as ['CHOWN'], got {value!r}"]
    caps: set[str] = set()
    problems = []
    for raw in value:
        if not isinstance(raw, str) or not raw.strip():
            problems.append(
                f"cap_add entries must be capability names such as 'CHOWN', got {raw!r}"
            )
            continue
        name = normalize_capability(raw)
        if name in ADDABLE_CAPABILITIES:
            caps.add(name)
        elif name in ESCAPE_CAPABILITIES:
            problems.append(
                f"cap_add {raw!r} is refused: it would let a user escape their container and "
                f"slice; only Docker's default capabilities may be added back ({ALLOWED_FIX})"
            )
        else:
            problems.append(f"cap_add {raw!r} is not a Linux capability; {ALLOWED_FIX}")
    return tuple(sorted(caps)), problems


def limit_warnings(
    limits: Iterable[tuple[str, float | None, int | None]], *, host_cpus: int, host_memory: int
) -> list[str]:
    """Warnings for limits the host cannot give: ``limits`` are ``(who, cpu_limit in cores,
    mem_limit in bytes)`` (``None``: unset), ``host_cpus`` and ``host_memory`` (bytes) what the
    host has. A container can never use more than the host has, so such a limit is no limit and
    usually a typo or a profile copied from a bigger server."""
    out = []
    for who, cpu, mem in limits:
        if mem is not None and mem > host_memory:
            out.append(
                f"{who}: mem_limit {format_bytes(mem)} is more than this host's memory "
                f"({format_bytes(host_memory)}); it limits nothing here"
            )
        if cpu is not None and cpu > host_cpus:
            out.append(
                f"{who}: cpu_limit {cpu:g} cores is more than this host's {host_cpus}; it limits "
                "nothing here"
            )
    return out

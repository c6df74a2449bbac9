"""The Docker Swarm service of one server: a pure builder of ``APIClient.create_service``'s
keyword arguments (tested without an engine, as :mod:`.container` is for containers).

What every gpulab service gets, whatever the admin's ``extra_*`` settings say:

- **its slice only**: the environment's ``NVIDIA_VISIBLE_DEVICES`` is the slice's UUID (``void``
  for a CPU profile; :func:`~.container.slice_env`). A Swarm service cannot carry a device
  request (moby/swarmkit#1244), so GPU nodes run the NVIDIA runtime as Docker's default runtime,
  which reads that variable;
- **its node**: a GPU server is pinned to the slice's node by a placement constraint on the
  Swarm node id (``node.id==<id>``); a CPU server avoids the nodes out of service
  (``node.id!=<id>`` each). Swarm places and runs the task; the ledger chose the slice;
- **once**: restart condition ``none``. A failed or lost task is released and reported, as a
  dead container is; a new start makes a new service;
- **hardened** as containers are (:mod:`..lab.hardening`): ``CapabilityDrop: ALL`` (plus the
  profile's allowed ``cap_add``), the PID limit (``Resources.Limits.Pids``) and
  ``Privileges.NoNewPrivileges`` (honoured by Docker ≥ 25; older engines drop the field, so their
  ``daemon.json`` sets ``"no-new-privileges": true``: README);
- **reachable without IPVS**: the server's port published in ``host`` mode on its node (no
  ingress routing mesh, no virtual IP: endpoint mode ``dnsrr``); the hub connects to the node's
  address and that port (:mod:`.swarmtasks`);
- ``/dev/shm`` of the profile's (or the lab's) ``shm_size``: a ``tmpfs`` mount, services having
  no ``ShmSize``;
- **labelled** with the lab, user, server, profile, node, allocation and slice, on the service
  and its containers (:func:`~.container.labels`), which the reconcile and a restarted hub read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from docker.types import ContainerSpec, DriverConfig, Mount, Placement, Resources, TaskTemplate

__all__ = ["EXTRA_REFUSED", "constraints_for", "harden", "mounts_from_binds", "service_spec"]

#: ``extra_*`` keys an admin may not set: they would undo the slice, the pin or the hardening.
EXTRA_REFUSED = {
    "extra_container_spec": {
        "env", "privileges", "cap_add", "cap_drop", "sysctls", "labels", "image", "isolation",
    },
    "extra_task_spec": {"container_spec", "placement", "restart_policy", "resources"},
    "extra_resources_spec": {"generic_resources"},
    "extra_endpoint_spec": {"mode", "ports"},
}  # fmt: skip


def constraints_for(node_id: str | None, avoid: Iterable[str] = (), extra=()) -> list[str]:
    """Placement constraints: on node ``node_id`` (a GPU server), else off every node in
    ``avoid`` (a CPU server); then the admin's own."""
    own = [f"node.id=={node_id}"] if node_id else [f"node.id!={n}" for n in sorted(set(avoid))]
    return own + list(extra)


def mounts_from_binds(binds: Mapping[str, Mapping], driver: str = "", options=None) -> list:
    """DockerSpawner's ``volume_binds`` (``{source: {"bind": target, "mode": "rw"}}``) as
    Swarm mounts: an absolute source is a bind mount on the node, a name is a volume (created
    on the node by ``driver``, local by default: a multi-host driver, or NFS, keeps a user's
    files when their next server runs on another node)."""
    config = DriverConfig(name=driver, options=options or None) if driver else None
    return [
        Mount(
            target=v["bind"],
            source=source,
            type="bind" if source.startswith("/") else "volume",
            read_only=v.get("mode") == "ro",
            driver_config=config if not source.startswith("/") else None,
        )
        for source, v in binds.items()
    ]


def harden(template: dict, hardening: Mapping) -> None:
    """Put :func:`~.container.hardening`'s rules (a container's ``HostConfig`` entries) into a
    task template, in Swarm's terms."""
    spec = template["ContainerSpec"]
    spec["CapabilityDrop"] = list(hardening["CapDrop"])
    if hardening.get("CapAdd"):
        spec["CapabilityAdd"] = list(hardening["CapAdd"])
    else:
        spec.pop("CapabilityAdd", None)
    privileges = dict(spec.get("Privileges") or {})
    privileges["NoNewPrivileges"] = "no-new-privileges:true" in hardening["SecurityOpt"]
    spec["Privileges"] = privileges
    limits = template.setdefault("Resources", {}).setdefault("Limits", {})
    limits["Pids"] = int(hardening["PidsLimit"])


def service_spec(
    *,
    name: str,
    image: str,
    env: Mapping[str, str],
    args: list[str],
    labels: Mapping[str, str],
    port: int,
    constraints: list[str],
    hardening: Mapping,
    mounts: list | None = None,
    shm_size: int | None = None,
    mem_limit: int | None = None,
    cpu_limit: float | None = None,
    mem_guarantee: int | None = None,
    cpu_guarantee: float | None = None,
    networks: Iterable[str] = (),
    extra: Mapping[str, Mapping] | None = None,
) -> dict:
    """``create_service`` keyword arguments for one server (module docstring). ``extra`` maps
    SwarmSpawner's ``extra_container_spec``, ``extra_resources_spec``, ``extra_placement_spec``,
    ``extra_task_spec``, ``extra_endpoint_spec`` and ``extra_create_kwargs`` to their values
    (docker-py's keyword arguments; :data:`EXTRA_REFUSED` keys are refused when configured)."""
    extra = extra or {}
    mounts = list(mounts or [])
    if shm_size:  # a service has no ShmSize: a tmpfs on /dev/shm of that size (bytes)
        mounts.append(Mount(target="/dev/shm", source=None, type="tmpfs", tmpfs_size=int(shm_size)))
    container = ContainerSpec(
        **{
            "image": image,
            "args": args,
            "mounts": mounts,
            **dict(extra.get("extra_container_spec") or {}),
            "env": [f"{k}={v}" for k, v in env.items()],
            "labels": dict(labels),
        }
    )
    resources = Resources(
        **{
            "mem_limit": mem_limit,
            "mem_reservation": mem_guarantee,
            "cpu_limit": int(cpu_limit * 1e9) if cpu_limit else None,
            "cpu_reservation": int(cpu_guarantee * 1e9) if cpu_guarantee else None,
            **dict(extra.get("extra_resources_spec") or {}),
        }
    )
    placement_extra = dict(extra.get("extra_placement_spec") or {})
    placement = Placement(
        **{
            **placement_extra,
            "constraints": constraints + list(placement_extra.get("constraints") or []),
        }
    )
    template = TaskTemplate(
        **{
            "networks": list(networks),
            **dict(extra.get("extra_task_spec") or {}),
            "container_spec": container,
            "resources": resources,
            "placement": placement,
            "restart_policy": {"Condition": "none"},
        }
    )
    harden(template, hardening)
    endpoint = {
        **{k[0].upper() + k[1:]: v for k, v in (extra.get("extra_endpoint_spec") or {}).items()},
        "Mode": "dnsrr",
        "Ports": [{"Protocol": "tcp", "TargetPort": int(port), "PublishMode": "host"}],
    }
    return {
        **dict(extra.get("extra_create_kwargs") or {}),
        "task_template": template,
        "endpoint_spec": endpoint,
        "name": name,
        "labels": dict(labels),
    }

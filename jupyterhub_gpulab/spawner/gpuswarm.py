"""``GPUSwarmSpawner``: the Docker Swarm backend of the spawner core; one lab over many GPU hosts.

``c.JupyterHub.spawner_class = "gpulab-swarm"``. The contract is GPUDockerSpawner's (profiles,
entitlement, budgets, the claim released on every exit path, refusals within a second, the saved
choice, re-adoption after a hub restart); what differs is where a server runs:

- ``start()``: the ledger claims a (node, slice) among every node's free slices
  (:meth:`_claim_node` is ``None``: the allocation is on its slice's node); the service
  (:mod:`~jupyterhub_gpulab.backends.swarmspec`) is pinned to that node by a placement constraint on its Swarm node id, gets
  ``NVIDIA_VISIBLE_DEVICES=<the slice's UUID>``, the profile's limits, the hardened defaults and
  the lab's labels, and publishes its port in host mode on its node. Swarm places and runs the
  task; a task it cannot place ("no suitable node": the node is down, drained, paused) or that
  fails is released and refused to the user with the reason, within a second of Swarm saying so.
  A CPU profile's service may land on any node in service.
- ``poll()``: the task's state (:mod:`.swarmtasks`). A task Swarm gave up on because its node
  stopped answering (its engine killed, the host down) ends the allocation as ``node-lost`` and
  leaves the user a notice; a failed task ends it as ``task-failed``. While the node is merely
  unreachable, its allocations stay (their tasks may still run) and its free slices are out of
  service (:mod:`jupyterhub_gpulab.ledger.nodes`).
- the hub reaches a server at its node's address and published port (no ingress mesh, no
  virtual IPs: they need IPVS, which some hosts lack); the tasks reach the hub at
  ``c.JupyterHub.hub_connect_ip`` on the nodes' network.
- the reconcile (:mod:`.reconcile`) lists this lab's services by label, on every node, and
  records Swarm's node states in the ledger each pass (a node Swarm lists as down, paused or
  drained takes no new slice claim).

Everything else is the core's (:mod:`.core`) and SwarmSpawner's (dockerspawner: the client, the
one engine thread, the service's removal at stop).
"""

from __future__ import annotations

from dockerspawner import SwarmSpawner
from traitlets import Dict, Unicode, validate

from ..backends import swarmspec
from ..errors import SpawnRefused
from ..lab.profile import Profile
from . import container as ct
from . import swarmtasks
from .backendbase import EngineBackend
from .core import SliceSpawnerCore
from .formmixin import ProfileFormMixin
from .hardenmixin import HardeningMixin
from .labguard import LabGuardMixin
from .labobject import LabObject
from .recovery import RecoveryMixin
from .runtime import LabRuntime
from .swarmservice import SwarmService, SwarmTaskError


class SwarmObjects:
    """The backend half the core calls (before the core in the MRO: :mod:`.core`)."""

    #: the node holding this course server's course volumes (set by the courses' pre-spawn
    #: hook at each start, :mod:`jupyterhub_gpulab.courses.coursenode`): its slice is claimed
    #: there, and a CPU server is pinned there; ``None``: not a course server, or no volume yet
    course_node: str | None = None

    def _claim_node(self, rt: LabRuntime) -> str | None:
        return None  # every node's slices; the allocation is on its slice's node

    def _only_node(self) -> str | None:
        return self.course_node

    def _lab_object(self, obj) -> LabObject:
        return LabObject.from_service(obj, "unknown")

    def _labels_of(self, obj) -> dict:
        return (obj.get("Spec") or {}).get("Labels") or {}

    async def _start_object(self, rt: LabRuntime, profile: Profile):
        self._apply_profile(profile)
        s = self._current_slice
        where = f" on node {s.node}" if s is not None else ""
        self._emit(50, f"Creating service {self.object_name}{where}")
        return await super(SliceSpawnerCore, self).start()  # DockerSpawner's: create, start

    async def _list_lab_objects(self) -> list[LabObject]:
        """This lab's services (by its label) in any state, with their task's; Swarm's nodes are
        recorded in the ledger on the way."""
        await self._nodes(max_age=0)
        lab = self.runtime().identity.uuid
        services = await self.docker("services", filters={"label": f"{ct.LABEL_LAB}={lab}"})
        tasks = await self.docker("tasks")
        by_service: dict[str, list] = {}
        for t in tasks:
            by_service.setdefault(t.get("ServiceID"), []).append(t)
        return [
            LabObject.from_service(
                svc, swarmtasks.service_state(by_service.get(svc["ID"], [])).state
            )
            for svc in services
        ]

    def _attach_slice(self, create_kwargs: dict, s) -> None:
        """Pin ``create_kwargs`` (a ``create_service`` request) to slice ``s``'s node (a CPU
        server: off the nodes out of service), and label it with this server's allocation."""
        template = create_kwargs["task_template"]
        env = template["ContainerSpec"].get("Env") or []
        want = ct.slice_env(s, mps=self.mps)["NVIDIA_VISIBLE_DEVICES"]
        if f"NVIDIA_VISIBLE_DEVICES={want}" not in env:
            raise RuntimeError(f"{self._log_name}: the service's environment lost its slice")
        placement = template.setdefault("Placement", {})
        placement["Constraints"] = swarmspec.constraints_for(
            self._pin, self._avoid, placement.get("Constraints") or ()
        )
        labels = self._lab_labels(s, s.node if s else "")
        create_kwargs["labels"] = {**(create_kwargs.get("labels") or {}), **labels}
        template["ContainerSpec"]["Labels"] = {
            **(template["ContainerSpec"].get("Labels") or {}),
            **labels,
        }

    def _start_refusal(self, e: BaseException) -> SpawnRefused | None:
        if not isinstance(e, SwarmTaskError):
            return None
        where = f"GPU server {e.node!r}" if e.node else "the Swarm"
        if e.reason == "unplaceable":
            user = (
                f"Your server cannot start: {where} takes no new servers right now. Its slice "
                "was released; please start again (another node may have room)."
            )
        else:
            user = (
                f"Your server could not start on {where} ({e.reason}). The administrators have "
                "been told; please try again or pick another profile."
            )
        return SpawnRefused(
            user,
            reason="unplaceable" if e.reason == "unplaceable" else "task-failed",
            status_code=503,
            log_message=f"Swarm could not run {self._log_name}'s task: {e}",
        )


class GPUSwarmSpawner(
    ProfileFormMixin,
    SwarmObjects,
    RecoveryMixin,
    LabGuardMixin,
    HardeningMixin,
    EngineBackend,
    SliceSpawnerCore,
    SwarmService,
    SwarmSpawner,
):
    """Spawn each user's server as a Docker Swarm service holding one GPU slice on its node (or
    none, for a CPU profile, on any node), confined (:mod:`..lab.hardening`). Profiles, policies
    and the ledger come from ``c.GPULab``; every node's GPUs from its node agent
    (``c.GPULab.inventory_source = "agents"``)."""

    node_addresses = Dict(
        Unicode(),
        config=True,
        help="""Where the hub reaches each node's published ports, by node name, where that is
        not the address the node joined the Swarm with (``docker node inspect … Status.Addr``).
        ``c.GPUSwarmSpawner.node_addresses = {"gpu2": "10.0.0.12"}``""",
    )

    node_engines = Dict(
        Unicode(),
        config=True,
        help="""Each node's own Docker engine, by node name (``{node: Docker URL}``), for what only
        a node can do: run a command in a course server's container (Distribute, the content
        status) and read and write the volumes it holds (Collect, Return). Empty: only the
        manager's engine is asked (a one-node Swarm). TLS as ``c.DockerSpawner.tls_config``.
        ``c.GPUSwarmSpawner.node_engines = {"gpu2": "tcp://10.0.0.12:2376"}``""",
    )

    volume_driver = Unicode(
        "",
        config=True,
        help="""The volume driver of named volumes (``c.DockerSpawner.volumes`` whose source is a
        name, not a path): local by default, so a user's home volume lives on the node their
        server ran on. Give a multi-host driver (or mount NFS by path) so their files follow
        them. ``c.GPUSwarmSpawner.volume_driver = "local-persist"``""",
    )

    @validate(*swarmspec.EXTRA_REFUSED)
    def _check_extra(self, proposal):
        refused = swarmspec.EXTRA_REFUSED[proposal.trait.name] & set(proposal.value)
        if refused:
            raise ValueError(
                f"c.GPUSwarmSpawner.{proposal.trait.name} may not set {', '.join(sorted(refused))}: "
                "gpulab sets them (the slice's environment, the pin to its node, the hardening, "
                "the labels). Use profiles' env, cap_add and limits instead."
            )
        return proposal.value

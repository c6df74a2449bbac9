"""Which Swarm node a course server runs on: the one that holds its course volumes.

With Docker's ``local`` volume driver (the default, and the only one gpulab tests) a named volume
lives on one node: the one where a container mounted it first, or where gpulab made it. A course
server that Swarm placed on another node would mount a new, empty volume of the same name there:
the student's work would seem gone, and Collect (which reads the first node that holds the
name, :class:`~jupyterhub_gpulab.backends.volumes.NodeVolumes`) would read one of two copies.

So on a Swarm a course server is pinned to the node that holds its course storage, found by asking
every node's engine (:meth:`~jupyterhub_gpulab.backends.volumes.NodeVolumes.node_of`), in this
order:

1. for a staff member, the course's **staff folder** (where Collect writes, Return reads and
   staff write feedback);
2. the user's **course-work volume** of that course;
3. at a first start, the user's **personal home** (the carry-over reads it: the new course-work
   volume is made beside it, so the copy stays on one node; the home itself is never mounted).

``None``: no node holds any of them (a first start with nothing to carry over): Swarm places the
server, and its first mount makes the volume on that node, where the next start finds it (a staff
folder made so is root's until Collect gives it to the images' user).

A staff folder that Collect makes is made beside the course work of the first roster member
who has some (:func:`first_node`), so it lands on a node that runs course servers, not on the
first node of ``c.GPUSwarmSpawner.node_engines`` (often a manager that runs none).

A GPU course server's slice must then be on that node too: its claim is for that node's slices
only (:meth:`~jupyterhub_gpulab.spawner.gpuswarm.SwarmObjects._only_node`). A multi-host volume
driver (``c.GPUSwarmSpawner.volume_driver``), where every node sees the same volume, needs no pin
and gets none; gpulab does not move volumes between nodes (out of scope: use such a driver, or
NFS mounted by path, for homes that follow their users).
"""

from __future__ import annotations

import logging

__all__ = ["course_node", "first_node"]

log = logging.getLogger("gpulab.courses")


def course_node(files, *, work: str, staff_folder: str | None, home: str | None) -> str | None:
    """The node name holding the first of ``staff_folder`` (``None``: not staff), ``work`` and
    ``home`` (``None``: no personal home) that exists (module docstring), or ``None``. ``files``:
    the backend's :class:`~jupyterhub_gpulab.courses.storage.Storage`; one without nodes (one
    Docker host) answers ``None``. Blocking: asks each node's engine."""
    node_of = getattr(files, "node_of", None)
    if node_of is None:
        return None
    found = {v: node_of(v) for v in (staff_folder, work, home) if v}
    if (
        staff_folder
        and found.get(staff_folder)
        and found.get(work) not in (None, found[staff_folder])
    ):
        log.warning(
            "Course volumes on two nodes: staff folder %s on %s, %s on %s; the server runs "
            "beside the staff folder",
            staff_folder, found[staff_folder], work, found[work],
        )  # fmt: skip
    return next((found[v] for v in (staff_folder, work, home) if v and found.get(v)), None)


def first_node(files, volumes) -> str | None:
    """The node holding the first of ``volumes`` that exists (``None``: none does, or ``files``
    has no nodes). Blocking."""
    node_of = getattr(files, "node_of", None)
    if node_of is None:
        return None
    return next((n for n in map(node_of, volumes) if n), None)

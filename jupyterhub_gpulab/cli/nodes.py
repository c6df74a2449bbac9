"""The ``gpulab`` command's node subcommands (:mod:`.cli` registers them)::

    gpulab nodes [--json] [-f jupyterhub_config.py]        # every node: state, agent, Swarm, GPUs
    gpulab node-token NODE [-f jupyterhub_config.py]        # a new agent token for NODE (printed once)
    gpulab node-token NODE --revoke [-f …]                  # refuse NODE's agent from now on
    gpulab node-agent --url … --node … --token-file …       # the node agent (jupyterhub_gpulab.agent)

``nodes`` and ``node-token`` read the ledger, so they run on the hub's host (where the config and
the database credentials are); the agent runs on each GPU node with only its token.
"""

from __future__ import annotations

import json
import sys
from collections import Counter


def _ledger(args):
    from ..lab.config import GPULab
    from ..ledger import Ledger
    from .common import _config

    return Ledger(GPULab(config=_config(args.config)).db_url, auto_upgrade=False)


def cmd_nodes(args) -> int:
    ledger = _ledger(args)
    try:
        nodes = ledger.nodes()
        slices = ledger.slices()
        held = Counter(s["node"] for s in slices if s["held_by"] is not None)
        total = Counter(s["node"] for s in slices if s["present"])
        free = Counter(s["node"] for s in slices if s["available"] and s["held_by"] is None)
    finally:
        ledger.close()
    if args.json:
        from ..service.web.views import node_view

        print(
            json.dumps(
                [
                    {
                        **node_view(n),
                        "slices": total[n.name],
                        "held": held[n.name],
                        "free": free[n.name],
                    }
                    for n in nodes
                ],
                indent=2,
            )
        )
        return 0
    if not nodes:
        print("no nodes in the ledger")
        return 0
    print(f"{'node':<20} {'state':<16} {'slices':>6} {'held':>5} {'free':>5}  agent / engine")
    for n in nodes:
        seen = f"last report {n.agent_seen_at:%Y-%m-%d %H:%M:%S}" if n.agent_seen_at else "no agent"
        engine = f"; {n.engine} {n.engine_state}/{n.engine_availability}" if n.engine else ""
        print(
            f"{n.name:<20} {n.state:<16} {total[n.name]:>6} {held[n.name]:>5} "
            f"{free[n.name]:>5}  {seen}{engine}"
        )
        if n.why_out():
            print(f"{'':<20} {n.why_out()}")
    return 0


def cmd_node_token(args) -> int:
    from ..service.web.inputs import NODE_NAME_CHARS

    node = args.node
    if not node or set(node) - NODE_NAME_CHARS or not node[0].isalnum() or len(node) > 255:
        print(f"gpulab: {node!r} is not a node name (a hostname)", file=sys.stderr)
        return 2
    ledger = _ledger(args)
    try:
        if args.revoke:
            if not ledger.revoke_node_token(node):
                print(f"gpulab: no node {node!r} in the ledger", file=sys.stderr)
                return 1
            print(f"node {node}: its agent token is revoked", file=sys.stderr)
            return 0
        token = ledger.issue_node_token(node)
    finally:
        ledger.close()
    print(
        f"A new agent token for node {node} (any earlier one is refused from now on). Put it in "
        f"a file only root reads on {node}, e.g. /etc/gpulab/node-token:",
        file=sys.stderr,
    )
    print(token)
    return 0


def add_node_commands(add) -> None:
    """Register the subcommands with :func:`~jupyterhub_gpulab.cli.build_parser`'s ``add``."""
    add("nodes", cmd_nodes, "list the lab's nodes: state, agent, Swarm engine, slices", True)
    p = add(
        "node-token",
        cmd_node_token,
        "make (or revoke) the token a node's agent reports with; prints it once",
    )
    p.add_argument("node", help="the node's name (its hostname, as Swarm shows it)")
    p.add_argument("--revoke", action="store_true", help="refuse the node's agent from now on")

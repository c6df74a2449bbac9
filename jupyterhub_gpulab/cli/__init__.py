"""The ``gpulab`` command: look at the inventory, check a config, list allocations, upgrade the db.

    gpulab inventory [--json] [-f jupyterhub_config.py]
    gpulab check-config -f jupyterhub_config.py   (with GPUDockerSpawner: also looks at the engine)
    gpulab allocations [--json] [-f jupyterhub_config.py]
    gpulab upgrade-db [-f jupyterhub_config.py]
    gpulab check-auth -f jupyterhub_config.py [--json] CLAIMS   (a JSON file, a JWT, or - for stdin)
    gpulab check-auth -f jupyterhub_config.py --hub-user NAME   (claims of NAME's last login)
    gpulab nodes [--json] [-f jupyterhub_config.py]            (the lab's nodes; cli/nodes.py)
    gpulab node-token NODE [--revoke] [-f jupyterhub_config.py]
    gpulab node-agent --url … --node … --token-file …          (on each GPU node; agent/app.py)
    gpulab mig-layout -f jupyterhub_config.py GPU-UUID 2x3g.40gb [--wait SECONDS]
                                                    (re-lay a MIG GPU, as root; cli/miglayout.py)

Exit status: 0 on success, 1 when the configuration has errors (every one is listed), 2 on bad
usage (``mig-layout``: also 1 refused, 3 stopped part way).
"""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import ConfigError
from .checkconfig import cmd_check_config
from .commands import cmd_allocations, cmd_check_auth, cmd_inventory, cmd_upgrade_db
from .common import DEFAULT_CONFIG, _config
from .miglayout import add_mig_layout_command
from .names import add_names_command
from .nodes import add_node_commands

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gpulab", description="jupyterhub-gpulab administration")
    sub = ap.add_subparsers(dest="command", required=True)

    def add(name, func, help, json_flag=False, config_required=False):
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument(
            "-f",
            "--config",
            required=config_required,
            default=None,
            help=f"a jupyterhub_config.py (default: ./{DEFAULT_CONFIG} if present)",
        )
        if json_flag:
            p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(func=func)
        return p

    add(
        "inventory",
        cmd_inventory,
        "show the GPUs and slices NVML or the configuration provides",
        True,
    )
    add(
        "check-config",
        cmd_check_config,
        "validate inventory, profiles and policies; exit 1 listing every error",
        config_required=True,
    )
    add("allocations", cmd_allocations, "list open allocations", True)
    add("upgrade-db", cmd_upgrade_db, "apply ledger schema migrations (back up first)")
    add_node_commands(add)
    add_names_command(add, _config)
    add_mig_layout_command(add)
    sub.add_parser(
        "node-agent",
        help="run the node agent on a GPU node (`gpulab node-agent --help-all` for its settings)",
        add_help=False,
    )
    p = add(
        "check-auth",
        cmd_check_auth,
        "show the groups, policies and profiles a login with these token claims gets; exit 1 "
        "when that login would be refused",
        True,
        config_required=True,
    )
    p.add_argument(
        "claims", nargs="?", help="a JSON file of the claims, a JWT (not verified), or - (stdin)"
    )
    p.add_argument(
        "--hub-user",
        metavar="NAME",
        help="read NAME's claims from their last login (the hub's auth_state; the token in "
        "JUPYTERHUB_API_TOKEN needs admin:auth_state)",
    )
    p.add_argument(
        "--hub-url",
        default=os.environ.get("JUPYTERHUB_API_URL", "http://127.0.0.1:8000/hub/api"),
        help="the hub's API (default: $JUPYTERHUB_API_URL or http://127.0.0.1:8000/hub/api)",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["node-agent"]:
        # a traitlets Application of its own: its flags, --help-all, config file
        from ..agent.app import main as agent_main

        agent_main(argv[1:])
        return 0
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except FileNotFoundError as e:
        print(f"gpulab: {e}", file=sys.stderr)
        return 2
    except ConfigError as e:
        print(f"gpulab: configuration has {len(e.errors)} error(s):", file=sys.stderr)
        for m in e.errors:
            print(f"  - {m}", file=sys.stderr)
        return 1

#!/usr/bin/env bash
# demo-stop.sh — stop what scripts/demo.sh left running, and optionally forget the demo's state.
#
# Why: the demo hub keeps users' servers and its proxy running when JupyterHub stops
# (c.JupyterHub.cleanup_servers = False, cleanup_proxy = False), so a hub restart or upgrade never
# interrupts a user's notebook. Ctrl-C therefore stops only the hub (and its managed gpulab
# service); this script stops the rest.
# What: stops a hub still running from this checkout's jupyterhub_config.py (SIGTERM, then waits),
# the proxy named in <state>/jupyterhub-proxy.pid, and every container this checkout's demo lab
# started (label org.jupyter.gpulab.user, name prefix "jupyter-"); with --purge it also removes
# the state folder (<repo>/.state or GPULAB_STATE_DIR: JupyterHub's and gpulab's databases,
# cookie secrets) and the per-user home volumes (gpulab-home-*). Stops only processes whose
# command line it recognises. Idempotent.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${GPULAB_STATE_DIR:-$REPO/.state}
purge=0
case "${1:-}" in
    --purge) purge=1 ;;
    "") ;;
    *) echo "usage: $0 [--purge]" >&2; exit 2 ;;
esac
say() { echo "demo-stop: $*" >&2; }

# 1. The hub, if it still runs from this checkout's config.
for pid in $(pgrep -f "jupyterhub -f $REPO/jupyterhub_config.py|jupyterhub -f jupyterhub_config.py" || true); do
    [ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" = "$REPO" ] || continue
    say "stopping the hub (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
done

# 2. The proxy JupyterHub left running.
if [ -s "$STATE/jupyterhub-proxy.pid" ]; then
    pid=$(cat "$STATE/jupyterhub-proxy.pid")
    if grep -qa configurable-http-proxy "/proc/$pid/cmdline" 2>/dev/null; then
        say "stopping the proxy (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
    fi
    rm -f "$STATE/jupyterhub-proxy.pid"
fi

# 3. The users' containers (the ledger closes their allocations at the next hub start).
if timeout 10 docker info >/dev/null 2>&1; then
    ids=$(docker ps -aq --filter label=org.jupyter.gpulab.user --filter name='^jupyter-')
    if [ -n "$ids" ]; then
        say "removing $(echo "$ids" | wc -l) container(s)"
        docker rm -f $ids >/dev/null
    fi
    if [ "$purge" = 1 ]; then
        vols=$(docker volume ls -q --filter name='^gpulab-home-' || true)
        [ -n "$vols" ] && { say "removing home volumes: $(echo $vols)"; docker volume rm $vols >/dev/null; }
    fi
fi

if [ "$purge" = 1 ] && [ -d "$STATE" ]; then
    say "removing $STATE"
    rm -rf "$STATE"
fi
say "done"

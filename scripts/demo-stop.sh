#!/usr/bin/env bash
# demo-stop.sh — stop what scripts/demo.sh left running, and optionally forget the demo's state.
#
# Why: the demo hub keeps users' servers and its proxy running when JupyterHub stops
# (c.JupyterHub.cleanup_servers = False, cleanup_proxy = False), so a hub restart or upgrade never
# interrupts a user's notebook. Ctrl-C therefore stops only the hub (and its managed gpulab
# service); this script stops the rest.
# What: stops a hub still running from this checkout's jupyterhub_config.py (SIGTERM, then waits),
# the proxy named in <state>/jupyterhub-proxy.pid, and every container of this checkout's demo
# lab: those labelled with the lab id kept in its ledger (org.jupyter.gpulab.lab-id), so another
# lab's containers on the same engine are never touched. With --purge it also removes the state
# folder (<repo>/.state or GPULAB_STATE_DIR: JupyterHub's and gpulab's databases, cookie secrets).
# No volume is removed: users' homes, the course's staff and course-work volumes (`docker volume rm`
# them by name if you mean to). Stops only processes whose command line it recognises. Idempotent.
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

# 3. The users' containers of this lab (the ledger closes their allocations at the next start).
PY=$REPO/.venv/bin/python
READ_LAB_ID='
from jupyterhub_gpulab.lab.config import GPULab, load_config_file
from jupyterhub_gpulab.ledger.labs import peek_identity
lab = peek_identity(GPULab(config=load_config_file("jupyterhub_config.py")).db_url)
print(lab.uuid if lab else "")
'
lab_id=""
if [ -x "$PY" ]; then
    lab_id=$(cd "$REPO" && GPULAB_STATE_DIR=$STATE "$PY" -c "$READ_LAB_ID" 2>/dev/null | tail -n 1) || lab_id=""
fi
if [ -z "$lab_id" ]; then
    say "no ledger with a lab id in $STATE: no container is this demo's"
elif timeout 10 docker info >/dev/null 2>&1; then
    ids=$(docker ps -aq --filter "label=org.jupyter.gpulab.lab-id=$lab_id")
    if [ -n "$ids" ]; then
        say "removing $(echo "$ids" | wc -l) container(s) of lab $lab_id"
        docker rm -f $ids >/dev/null
    fi
fi

if [ "$purge" = 1 ] && [ -d "$STATE" ]; then
    say "removing $STATE"
    rm -rf "$STATE"
fi
say "done"

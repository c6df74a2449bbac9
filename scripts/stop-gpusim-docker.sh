#!/usr/bin/env bash
# stop-gpusim-docker.sh — stop the GPU-simulating dockerd started by scripts/ensure-gpusim-docker.sh.
#
# Why: that engine (socket /var/run/gpulab-gpusim.sock) runs beside the main one; tests or a
# developer may want it gone (or restarted, e.g. after the stub hook's directory changed).
# What: sends SIGTERM to the pid in /var/run/gpulab-gpusim.pid — only when that pid is a live
# dockerd started with that very pidfile, so the main engine can never be hit — and waits up to
# GPULAB_GPUSIM_STOP_WAIT seconds (default 60) for it to exit. dockerd stops its containers and its
# own containerd on the way out. Leaves the data-root (images stay loaded), the bridge gpusim0,
# the stub hook and the logs in place. Idempotent: silent, exit 0, when it is not running.
set -euo pipefail

PIDFILE=/var/run/gpulab-gpusim.pid
WAIT=${GPULAB_GPUSIM_STOP_WAIT:-60}

die() { echo "stop-gpusim-docker: $*" >&2; exit 1; }

[ -s "$PIDFILE" ] || exit 0
pid=$(cat "$PIDFILE")
case $pid in ''|*[!0-9]*) die "$PIDFILE does not hold a pid: '$pid'" ;; esac
kill -0 "$pid" 2>/dev/null || { rm -f "$PIDFILE"; exit 0; }  # stale
if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != dockerd ] \
    || ! tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qx -- "$PIDFILE"; then
    die "pid $pid in $PIDFILE is not the gpusim dockerd (pid reused?); not touching it"
fi

kill -TERM "$pid"
for _ in $(seq 1 "$WAIT"); do
    kill -0 "$pid" 2>/dev/null || exit 0
    sleep 1
done
die "dockerd $pid did not exit within ${WAIT}s of SIGTERM; see /var/log/gpulab-gpusim-dockerd.log"

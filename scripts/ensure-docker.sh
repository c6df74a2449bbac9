#!/usr/bin/env bash
# ensure-docker.sh — make sure a Docker engine answers on /var/run/docker.sock.
#
# Why: the end-to-end tests and the single-user image build need a real engine, but neither
# development sessions nor CI start with dockerd running.
# What: installs Debian's docker.io with apt when `dockerd` is missing; when `docker info` does not
# answer, starts dockerd detached (setsid, log in /var/log/gpulab-dockerd.log) and waits up to
# GPULAB_DOCKER_WAIT seconds (default 60). Never starts a second dockerd while one is already
# coming up. Idempotent, silent on success, non-zero with a message on stderr on failure.
set -euo pipefail

LOG=/var/log/gpulab-dockerd.log
PIDFILE=/var/run/docker.pid
WAIT=${GPULAB_DOCKER_WAIT:-60}

die() { echo "ensure-docker: $*" >&2; exit 1; }

engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

if ! command -v dockerd >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] || die "dockerd is missing and installing docker.io needs root"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q docker.io >/tmp/gpulab-apt-docker.log 2>&1; then
        apt-get update -q >>/tmp/gpulab-apt-docker.log 2>&1 || true
        apt-get install -y -q docker.io >>/tmp/gpulab-apt-docker.log 2>&1 \
            || die "apt-get install docker.io failed; see /tmp/gpulab-apt-docker.log"
    fi
fi
command -v docker >/dev/null 2>&1 || die "the docker CLI is not on PATH (install docker.io)"

engine_answers && exit 0

# A dockerd that is already running (e.g. still starting, or started by someone else) is waited
# for, not duplicated: a second dockerd on the same pidfile/data-root fails or corrupts state.
running_pid=""
if [ -s "$PIDFILE" ]; then
    pid=$(cat "$PIDFILE")
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null \
        && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]; then
        running_pid=$pid
    fi
fi

if [ -z "$running_pid" ]; then
    [ "$(id -u)" = 0 ] || die "the Docker engine is not running and starting dockerd needs root"
    rm -f "$PIDFILE"  # stale pidfile from a previous, dead dockerd blocks a new start
    echo "--- $(date -Is) started by $0" >>"$LOG"
    setsid dockerd >>"$LOG" 2>&1 </dev/null &
    running_pid=$!
fi

for _ in $(seq 1 "$WAIT"); do
    engine_answers && exit 0
    kill -0 "$running_pid" 2>/dev/null \
        || die "dockerd (pid $running_pid) exited; last lines of $LOG:
$(tail -n 15 "$LOG")"
    sleep 1
done
die "dockerd (pid $running_pid) did not answer on /var/run/docker.sock within ${WAIT}s; see $LOG"

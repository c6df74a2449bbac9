#!/usr/bin/env bash
# stop-swarm.sh — take down the test Swarm of scripts/ensure-swarm.sh, leaving the host as it was.
#
# Why: the Swarm's three engines, their namespaces, veths and route live beside the main engine;
# CI tears them down at the end of a run (GPULAB_SWARM_TEARDOWN=1, scripts/test.sh), a developer
# when done (or to start from nothing: `--purge` also deletes the engines' data, images included).
# What, in order, touching only what ensure-swarm.sh made:
#   * `swarm leave --force` on each engine that answers;
#   * SIGTERM to each dockerd named by /var/run/gpulab-swarm/nX.pid (only when that pid is a
#     dockerd started with that very pidfile), waiting for it; then SIGKILL to any containerd or
#     containerd-shim still running from that engine's exec-root (their command line names it);
#   * unmounts whatever is still mounted under the engines' data and exec roots;
#   * deletes the namespaces gpulab-swn1..3 and gpulab-swc (their veths, bridges, the engines'
#     docker0 and docker_gwbridge go with them), the host's veth gswhost and the route
#     `unreachable 10.213.0.0/16`, and the engines' cgroups /gpulab-swarm-nX.
# The main dockerd, docker0 and the gpusim engine are never touched. Idempotent: silent, exit 0,
# when nothing is there. Root only. Takes /var/run/gpulab-swarm.lock (waits for ensure-swarm.sh).
set -euo pipefail

STATE=/var/lib/gpulab-swarm
RUN=/var/run/gpulab-swarm
NODES="1 2 3"

die() { echo "stop-swarm: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root"
purge=""
[ "${1:-}" = "--purge" ] && purge=1

mkdir -p "$(dirname "$RUN")"
exec 9>"$RUN.lock"
flock -w 300 9 || die "another ensure-swarm.sh or stop-swarm.sh holds $RUN.lock"

pid_of() {
    local pid file=$RUN/n$1.pid
    [ -s "$file" ] || return 1
    pid=$(cat "$file")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] || return 1
    tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qx -- "$file" || return 1
    echo "$pid"
}

for n in $NODES; do
    if [ -S "$RUN/n$n.sock" ]; then
        DOCKER_HOST=unix://$RUN/n$n.sock timeout 20 docker swarm leave --force >/dev/null 2>&1 || true
    fi
done
for n in $NODES; do
    pid=$(pid_of "$n" || true)
    [ -n "$pid" ] || continue
    kill -TERM "$pid"
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && die "dockerd $pid (node $n) did not exit within 30 s"
done
# containerd and shims started from the engines' exec roots (by their command line)
for p in /proc/[0-9]*; do
    cmd=$( { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null || true)
    case $cmd in
        *containerd*"$RUN/n"[123]/*) kill -KILL "${p#/proc/}" 2>/dev/null || true ;;
    esac
done
rm -f "$RUN"/n*.pid "$RUN"/n*.started.json
# mounts left under the engines' folders (deepest first)
awk '{print $2}' /proc/mounts | grep -E "^($STATE|$RUN)/" | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
done
for ns in gpulab-swn1 gpulab-swn2 gpulab-swn3 gpulab-swc; do
    ip netns del "$ns" 2>/dev/null || true
done
ip link del gswhost 2>/dev/null || true
ip route del unreachable 10.213.0.0/16 2>/dev/null || true
for n in $NODES; do
    for c in /sys/fs/cgroup/*/gpulab-swarm-n"$n"; do
        [ -d "$c" ] || continue
        find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    done
done
if [ -n "$purge" ]; then
    rm -rf "$STATE" "$RUN"
fi
exit 0

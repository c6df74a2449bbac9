#!/usr/bin/env bash
# ensure-gpusim-docker.sh — a second, GPU-simulating Docker engine for end-to-end tests.
#
# Why: on a machine without a GPU, Docker accepts an NVIDIA device request
# ({"Driver": "nvidia", "DeviceIDs": [...], "Capabilities": [["gpu"]]}) at create and refuses it at
# start with `could not select device driver "nvidia"`, so no test container can go through the
# engine's real device-request path. In moby 20.10 (daemon/nvidia_linux.go) the "nvidia" device
# driver is registered at daemon init only when `nvidia-container-runtime-hook` is on dockerd's
# PATH; at container start that driver puts NVIDIA_VISIBLE_DEVICES=<DeviceIDs joined by ","> (and
# NVIDIA_DRIVER_CAPABILITIES, for capabilities that are NVIDIA driver capabilities) into the
# container's environment and adds an OCI prestart hook `nvidia-container-runtime-hook prestart`.
# The hook (part of the NVIDIA Container Toolkit) is the one piece of the GPU path this machine
# lacks. This script installs a stand-in for it; everything else — the engine's own device-request
# handling, the environment it injects, the OCI hook invocation by runc — is the real thing.
#
# What:
#   * installs the stub hook in /usr/local/lib/gpulab-gpusim/bin/nvidia-container-runtime-hook
#     (scripts/install-nvidia-standin.sh): for `prestart` it appends {"container_id", "hostname",
#     "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"} as one JSON line to
#     /var/log/gpulab-gpusim-hook.jsonl. It attaches no device (there is none) and always exits 0,
#     so it can never fail a container start (its own errors go to /var/log/gpulab-gpusim-hook.err);
#   * creates the bridge gpusim0 (GPULAB_GPUSIM_CIDR, default 172.30.0.1/16) when missing;
#   * starts, unless it already answers, a second dockerd with its own data-root, exec-root,
#     socket, pidfile, config file and bridge, with the stub's directory first on its PATH. It runs
#     with --iptables=false: a dockerd with iptables on flushes and rebuilds the DOCKER and
#     DOCKER-ISOLATION chains that the main engine (/var/run/docker.sock) shares, wiping that
#     engine's port mappings. Containers reach the host on the gateway address through INPUT, which
#     needs no rule from Docker;
#   * loads gpulab/singleuser:<tag> (first argument, else GPULAB_TEST_IMAGE, else
#     gpulab/singleuser:<installed jupyterhub version>) from the main engine with
#     `docker save | docker load` when it is missing or differs there.
# Never touches the main engine beyond `docker save` (and scripts/ensure-docker.sh, which starts it
# only when it is down). Idempotent. Root only. On success it prints exactly two lines:
#   GPULAB_GPUSIM_DOCKER_HOST=unix:///var/run/gpulab-gpusim.sock
#   GPULAB_GPUSIM_GATEWAY=172.30.0.1
# Stop the engine with scripts/stop-gpusim-docker.sh.
#
# For tests: the engine adds NVIDIA_* to the OCI process environment of the container's main
# process (and so to everything it starts), not to Config.Env: `docker inspect .Config.Env` and
# `docker exec … env` do not show them; read /proc/1/environ or the hook log. With [["gpu"]] only
# NVIDIA_VISIBLE_DEVICES is set ("gpu" is not a driver capability); NVIDIA_DRIVER_CAPABILITIES
# appears for requests such as [["gpu", "compute", "utility"]]. Without iptables, traffic between
# two containers on gpusim0 goes through the host's FORWARD chain (policy DROP here) and is dropped;
# host <-> container traffic, `-p` publishing (userland proxy) and container -> gateway all work.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
NAME=gpulab-gpusim
LIB=/usr/local/lib/$NAME
BIN=$LIB/bin
CONFIG=$LIB/daemon.json
LOG=/var/log/$NAME-dockerd.log
DATA_ROOT=/var/lib/$NAME
EXEC_ROOT=/var/run/$NAME
SOCK=/var/run/$NAME.sock
PIDFILE=/var/run/$NAME.pid
HOST=unix://$SOCK
BRIDGE=gpusim0
CIDR=${GPULAB_GPUSIM_CIDR:-172.30.0.1/16}
WAIT=${GPULAB_GPUSIM_WAIT:-60}
ENGINE_PATH=$BIN:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

die() { echo "ensure-gpusim-docker: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (it starts dockerd and creates a bridge)"
command -v dockerd >/dev/null 2>&1 || "$REPO/scripts/ensure-docker.sh" \
    || die "dockerd is missing and scripts/ensure-docker.sh could not install it"
command -v docker >/dev/null 2>&1 || die "the docker CLI is not on PATH"
command -v ip >/dev/null 2>&1 || die "the ip command (iproute2) is missing"
command -v flock >/dev/null 2>&1 || die "flock (util-linux) is missing"
[ -x /usr/bin/python3 ] || die "/usr/bin/python3 is missing; the stub hook needs it"

# One run at a time: two concurrent runs (e.g. parallel test workers) would both start a dockerd,
# and the loser would report the winner's engine as failed.
exec 9>"/var/run/$NAME.lock"
flock -w $((WAIT + 120)) 9 || die "another ensure-gpusim-docker.sh holds /var/run/$NAME.lock"

gpusim() { DOCKER_HOST=$HOST timeout 20 docker "$@"; }
engine_answers() { gpusim info >/dev/null 2>&1; }

# --- 1. The stub hook (scripts/install-nvidia-standin.sh rewrites it every run, atomically, so edits
# there reach a running engine) --------------------------------------------------------------------
"$REPO/scripts/install-nvidia-standin.sh" || die "installing the stand-in hook failed"
install_file() {  # install_file MODE DEST, content on stdin
    local tmp
    tmp=$(mktemp "$2.XXXXXX")
    cat >"$tmp"
    chmod "$1" "$tmp"
    mv -f "$tmp" "$2"
}
# Its own (empty) config file: an /etc/docker/daemon.json written for the main engine (hosts,
# data-root, bridge…) would otherwise apply here too, or conflict with the flags below.
[ -f "$CONFIG" ] || echo '{}' | install_file 0644 "$CONFIG"

# --- 2. The bridge ------------------------------------------------------------------------------
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge || die "cannot create bridge $BRIDGE"
fi
if [ -z "$(ip -4 -o addr show dev "$BRIDGE")" ]; then
    ip addr add "$CIDR" dev "$BRIDGE" || die "cannot add $CIDR to $BRIDGE (overlaps another route?)"
fi
ip link set "$BRIDGE" up
gateway=$(ip -4 -o addr show dev "$BRIDGE" | awk '{split($4, a, "/"); print a[1]; exit}')
[ -n "$gateway" ] || die "bridge $BRIDGE has no IPv4 address"

# --- 3. The engine ------------------------------------------------------------------------------
pid_of_ours() {  # the pid in our pidfile when it is a live dockerd started with our pidfile
    local pid
    [ -s "$PIDFILE" ] || return 1
    pid=$(cat "$PIDFILE")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] || return 1
    tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qx -- "--pidfile" || return 1
    tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qx -- "$PIDFILE" || return 1
    echo "$pid"
}

running_pid=$(pid_of_ours || true)
if [ -n "$running_pid" ]; then
    # The nvidia driver is registered once, at dockerd init, from dockerd's PATH: an engine
    # started some other way would silently refuse device requests again.
    tr '\0' '\n' <"/proc/$running_pid/environ" | grep -q "^PATH=$BIN:" \
        || die "dockerd $running_pid on $SOCK was not started with $BIN first on PATH; stop it with scripts/stop-gpusim-docker.sh and rerun"
else
    ! engine_answers || die "something answers on $SOCK but is not the dockerd named by $PIDFILE"
    rm -f "$PIDFILE"  # stale: its process is gone (or is not our dockerd)
    mkdir -p "$DATA_ROOT" "$EXEC_ROOT"
    echo "--- $(date -Is) started by $0" >>"$LOG"
    # env -i: the hook inherits dockerd's environment (Hook.Env = os.Environ()), and nothing of the
    # caller's (pyenv shims, DOCKER_HOST, proxies…) should leak into the engine or the hook.
    # 9>&-: dockerd must not inherit the lock, or every later run would wait on it forever.
    env -i PATH="$ENGINE_PATH" HOME=/root \
        setsid dockerd \
            --config-file "$CONFIG" \
            --data-root "$DATA_ROOT" \
            --exec-root "$EXEC_ROOT" \
            -H "$HOST" \
            --pidfile "$PIDFILE" \
            --bridge "$BRIDGE" \
            --iptables=false \
            >>"$LOG" 2>&1 </dev/null 9>&- &
    running_pid=$!
fi

ok=""
for _ in $(seq 1 $((WAIT * 5))); do  # polls every 0.2 s: the engine answers ~0.5 s after start
    if engine_answers; then ok=1; break; fi
    if [ -n "$running_pid" ] && ! kill -0 "$running_pid" 2>/dev/null; then
        die "dockerd (pid $running_pid) exited; last lines of $LOG:
$(tail -n 15 "$LOG")"
    fi
    sleep 0.2
done
[ -n "$ok" ] || die "dockerd did not answer on $SOCK within ${WAIT}s; see $LOG"

# --- 4. The single-user image -------------------------------------------------------------------
image=${1:-${GPULAB_TEST_IMAGE:-}}
if [ -z "$image" ]; then
    hub_version=$("$PYTHON" -c 'import jupyterhub; print(jupyterhub.__version__)') \
        || die "cannot import jupyterhub with $PYTHON to name the image; pass the image as argument"
    image=gpulab/singleuser:$hub_version
fi
main_image_id() { DOCKER_HOST=unix:///var/run/docker.sock timeout 20 docker image inspect -f '{{.Id}}' "$image" 2>/dev/null; }
sim_id=$(gpusim image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
main_id=$(main_image_id || true)
if [ -z "$main_id" ] && [ -z "$sim_id" ]; then
    "$REPO/scripts/ensure-docker.sh" || die "the main Docker engine is down; cannot load $image from it"
    main_id=$(main_image_id) || die "image $image is in neither engine; build it with images/build-singleuser.sh"
fi
if [ -n "$main_id" ] && [ "$main_id" != "$sim_id" ]; then
    DOCKER_HOST=unix:///var/run/docker.sock docker save "$image" | DOCKER_HOST=$HOST docker load -q >/dev/null \
        || die "loading $image into the gpusim engine failed"
fi

echo "GPULAB_GPUSIM_DOCKER_HOST=$HOST"
echo "GPULAB_GPUSIM_GATEWAY=$gateway"

#!/usr/bin/env bash
# ensure-swarm.sh — a real three-node Docker Swarm on this one machine, for the Swarm backend's tests.
#
# Why: gpulab's Swarm backend (jupyterhub_gpulab/spawner/gpuswarm.py) must be tested against real
# Swarm placement, real tasks on several engines and a real engine failure, and a development or
# CI machine has one host. Each node here is a dockerd in network and UTS namespaces of its own
# (facts: /work/shared/notes/swarm-on-one-machine.md, summarised in the README's "Tests" section).
#
# Layout (names and ranges chosen not to meet the host's: see the checks below):
#   * namespace gpulab-swc holds the bridge swbr0 (frames bridged in the host's namespace would meet
#     the main dockerd's FORWARD DROP); the host joins it with ONE veth, gswhost = 10.213.0.1/24,
#     and routes only (10.213.0.0/16 is "unreachable" from the host beyond that /24);
#   * gpulab-swn1 (manager, CPU only), gpulab-swn2 and gpulab-swn3 (workers with GPUs): namespaces
#     of the same names, hostnames of the same names (the Swarm node's hostname: the ledger's node
#     name), addresses 10.213.0.11-13, each a dockerd started with `nsenter --net … unshare --uts`
#     (not `ip netns exec`, which remounts /sys and hides the cgroup v1 mounts dockerd needs):
#     data-root /var/lib/gpulab-swarm/nX, exec-root /var/run/gpulab-swarm/nX, socket
#     /var/run/gpulab-swarm/nX.sock, bridge 10.214.X.1/24, address pools 10.215.X.0/24…,
#     cgroup parent /gpulab-swarm-nX, DOCKER_SERVICE_PREFER_OFFLINE_IMAGE=1 (no registry: a task
#     would first wait ~20 s on a pull that cannot succeed);
#   * the GPU nodes run the `nvidia` runtime as their default runtime (as the README tells admins
#     to configure real GPU nodes), here the stand-in of scripts/install-nvidia-standin.sh, whose
#     hook logs what each container got to /var/log/gpulab-swarm/nX-hook.jsonl;
#   * Swarm: `swarm init` on n1 (advertise 10.213.0.11:2377, address pool 10.216.0.0/16), n2 and
#     n3 joined as workers; a node left Down by an earlier run under the same hostname is removed.
#     No ingress mesh or VIP is used (this kernel has no IPVS): user servers publish a host-mode
#     port on their node, reached at the node's address.
#   * the test image (first argument, else GPULAB_TEST_IMAGE, else gpulab/singleuser:<installed
#     jupyterhub version>) is loaded into every node from the main engine when its id differs there
#     (`docker save | docker load`, in parallel): once per image build, not per run.
#
# Idempotent and fast when everything is up (~1 s): engines that answer are left alone, an engine
# that is down (a test killed it) is started again and rejoins. Never touches the main dockerd,
# docker0 or the gpusim engine. One run at a time (flock). Root only. Stop everything with
# scripts/stop-swarm.sh. On success it prints lines a caller may eval:
#   GPULAB_SWARM_MANAGER=unix:///var/run/gpulab-swarm/n1.sock
#   GPULAB_SWARM_HOST_IP=10.213.0.1
#   GPULAB_SWARM_NODES=gpulab-swn1,gpulab-swn2,gpulab-swn3
#   GPULAB_SWARM_GPU_NODES=gpulab-swn2,gpulab-swn3
#   GPULAB_SWARM_ENGINES=gpulab-swn1=unix:///var/run/gpulab-swarm/n1.sock,…   (each node's engine)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
STATE=/var/lib/gpulab-swarm
RUN=/var/run/gpulab-swarm
LOGS=/var/log/gpulab-swarm
CORE=gpulab-swc
BRIDGE=swbr0
HOST_IF=gswhost
PREFIX=10.213.0
HOST_IP=$PREFIX.1
NODES="1 2 3"
GPU_NODES="2 3"
WAIT=${GPULAB_SWARM_WAIT:-90}
STANDIN=/usr/local/lib/gpulab-gpusim/bin/nvidia-container-runtime
ENGINE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

die() { echo "ensure-swarm: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (it makes network namespaces and starts dockerd)"
for cmd in dockerd docker ip nsenter unshare flock; do
    command -v "$cmd" >/dev/null 2>&1 || die "$cmd is missing"
done

mkdir -p "$RUN" "$STATE" "$LOGS"
exec 9>"$RUN.lock"
flock -w $((WAIT + 180)) 9 || die "another ensure-swarm.sh (or stop-swarm.sh) holds $RUN.lock"

ns() { echo "gpulab-swn$1"; }
sock() { echo "unix://$RUN/n$1.sock"; }
node_docker() { local n=$1; shift; DOCKER_HOST=$(sock "$n") timeout 30 docker "$@"; }
answers() { node_docker "$1" info >/dev/null 2>&1; }
is_gpu() { case " $GPU_NODES " in *" $1 "*) return 0 ;; esac; return 1; }

# --- 1. The network ------------------------------------------------------------------------------
# Refuse ranges the host already routes (another lab, a VPN): every address here is ours alone.
if ! ip link show "$HOST_IF" >/dev/null 2>&1; then
    for net in 10.213.0.0/16 10.214.0.0/16 10.215.0.0/16 10.216.0.0/16; do
        if ip -4 route show to match "${net%/*}" | grep -qv '^default'; then
            die "the host already routes $net ($(ip -4 route show to match "${net%/*}" | grep -v '^default' | head -1)); cannot place the test Swarm there"
        fi
    done
fi
ip netns list | grep -qw "^$CORE" || ip netns add "$CORE"
ip -n "$CORE" link show "$BRIDGE" >/dev/null 2>&1 || ip -n "$CORE" link add "$BRIDGE" type bridge
ip -n "$CORE" link set "$BRIDGE" up
ip -n "$CORE" link set lo up
if ! ip link show "$HOST_IF" >/dev/null 2>&1; then
    ip link add "$HOST_IF" type veth peer name gswcore
    ip link set gswcore netns "$CORE"
    ip -n "$CORE" link set gswcore master "$BRIDGE" up
    ip addr add "$HOST_IP/24" dev "$HOST_IF"
fi
ip link set "$HOST_IF" up
ip route show type unreachable | grep -q '^unreachable 10.213.0.0/16' \
    || ip route add unreachable 10.213.0.0/16
for n in $NODES; do
    name=$(ns "$n")
    ip netns list | grep -qw "^$name" || ip netns add "$name"
    if ! ip -n "$name" link show eth0 >/dev/null 2>&1; then
        ip -n "$CORE" link del "gswn$n" 2>/dev/null || true
        ip link add "gswn$n" type veth peer name eth0 netns "$name"
        ip link set "gswn$n" netns "$CORE"
        ip -n "$CORE" link set "gswn$n" master "$BRIDGE" up
        ip -n "$name" addr add "$PREFIX.1$n/24" dev eth0
    fi
    ip -n "$name" link set lo up
    ip -n "$name" link set eth0 up
    ip -n "$name" route show default | grep -q . || ip -n "$name" route add default via "$HOST_IP"
done

# --- 2. The engines ------------------------------------------------------------------------------
if [ -n "$GPU_NODES" ]; then
    "$REPO/scripts/install-nvidia-standin.sh" || die "installing the NVIDIA stand-in failed"
fi

pid_of() {  # the pid in node n's pidfile when it is a live dockerd started with that pidfile
    local pid file=$RUN/n$1.pid
    [ -s "$file" ] || return 1
    pid=$(cat "$file")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] || return 1
    tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qx -- "$file" || return 1
    echo "$pid"
}

write_config() {  # the node's own daemon.json (never /etc/docker/daemon.json)
    local n=$1 file=$STATE/n$1.json tmp
    tmp=$(mktemp "$file.XXXXXX")
    # no-new-privileges: what the README tells admins for engines older than Docker 25, whose
    # Swarm drops a service's Privileges.NoNewPrivileges
    if is_gpu "$n"; then
        cat >"$tmp" <<EOF
{
  "no-new-privileges": true,
  "default-runtime": "nvidia",
  "runtimes": {"nvidia": {"path": "$STANDIN",
                          "runtimeArgs": ["--gpulab-hook-log", "$LOGS/n$n-hook.jsonl"]}}
}
EOF
    else
        echo '{"no-new-privileges": true}' >"$tmp"
    fi
    chmod 0644 "$tmp"
    mv -f "$tmp" "$file"
}

stop_engine() {  # stop node n's dockerd (ours, by its pidfile) and wait for it
    local pid
    pid=$(pid_of "$1") || return 0
    kill -TERM "$pid"
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
    die "the engine of $(ns "$1") (pid $pid) did not stop within 30 s"
}

for n in $NODES; do
    write_config "$n"
    # an engine started with another daemon.json (this script changed) is restarted with this one
    if pid_of "$n" >/dev/null && ! cmp -s "$STATE/n$n.json" "$RUN/n$n.started.json"; then
        stop_engine "$n"
    fi
    answers "$n" && continue
    pid_of "$n" >/dev/null && continue  # still starting: waited for below
    cp "$STATE/n$n.json" "$RUN/n$n.started.json"
    rm -f "$RUN/n$n.pid"
    mkdir -p "$STATE/n$n" "$RUN/n$n"
    echo "--- $(date -Is) started by $0" >>"$LOGS/n$n-dockerd.log"
    # env -i: nothing of the caller's environment (DOCKER_HOST, proxies…) leaks into the engine.
    # 9>&-: the engine must not inherit the lock, or every later run would wait on it forever.
    env -i PATH="$ENGINE_PATH" HOME=/root DOCKER_SERVICE_PREFER_OFFLINE_IMAGE=1 \
        setsid nsenter --net="/run/netns/$(ns "$n")" unshare --uts -- sh -c "hostname $(ns "$n") && exec dockerd \
            --config-file $STATE/n$n.json \
            --data-root $STATE/n$n \
            --exec-root $RUN/n$n \
            -H $(sock "$n") \
            --pidfile $RUN/n$n.pid \
            --bip 10.214.$n.1/24 \
            --default-address-pool base=10.215.$((n * 16)).0/20,size=24 \
            --cgroup-parent /gpulab-swarm-n$n" \
        >>"$LOGS/n$n-dockerd.log" 2>&1 </dev/null 9>&- &
done
for n in $NODES; do
    ok=""
    for _ in $(seq 1 $((WAIT * 5))); do
        if answers "$n"; then ok=1; break; fi
        sleep 0.2
    done
    [ -n "$ok" ] || die "the engine of $(ns "$n") did not answer within ${WAIT}s; last lines of $LOGS/n$n-dockerd.log:
$(tail -n 15 "$LOGS/n$n-dockerd.log")"
done

# --- 3. The Swarm --------------------------------------------------------------------------------
state_of() { node_docker "$1" info -f '{{.Swarm.LocalNodeState}}' 2>/dev/null; }
node_id_of() { node_docker "$1" info -f '{{.Swarm.NodeID}}' 2>/dev/null || true; }
if [ "$(state_of 1)" != active ]; then
    node_docker 1 swarm init --advertise-addr "$PREFIX.11" --listen-addr "$PREFIX.11:2377" \
        --default-addr-pool 10.216.0.0/16 >/dev/null || die "swarm init on $(ns 1) failed"
fi
token=$(node_docker 1 swarm join-token -q worker)
members=$(node_docker 1 node ls -q)
for n in $NODES; do
    [ "$n" = 1 ] && continue
    st=$(state_of "$n")
    if [ "$st" = active ] && ! echo "$members" | grep -qx "$(node_id_of "$n")"; then
        # a member of a Swarm an earlier n1 made (its data-root was removed): join this one
        node_docker "$n" swarm leave --force >/dev/null 2>&1 || true
        st=inactive
    fi
    case $st in
        active|pending) ;;
        *) node_docker "$n" swarm join --token "$token" --advertise-addr "$PREFIX.1$n" \
               --listen-addr "$PREFIX.1$n:2377" "$PREFIX.11:2377" >/dev/null \
               || die "$(ns "$n") could not join the Swarm" ;;
    esac
done
ready=""
for _ in $(seq 1 $((WAIT * 2))); do
    rows=$(node_docker 1 node ls --format '{{.ID}} {{.Hostname}} {{.Status}}' 2>/dev/null || true)
    count=0
    for n in $NODES; do
        echo "$rows" | grep -q " $(ns "$n") Ready$" && count=$((count + 1))
    done
    if [ "$count" = "$(echo $NODES | wc -w)" ]; then ready=1; break; fi
    sleep 0.5
done
[ -n "$ready" ] || die "the Swarm's nodes are not all Ready within ${WAIT}s:
$(node_docker 1 node ls 2>&1)"
# A node an earlier run joined under the same hostname and then lost stays Down in the list:
# remove it, so that a hostname names one node.
echo "$rows" | awk '$3 != "Ready" {print $1}' | while read -r stale; do
    node_docker 1 node rm --force "$stale" >/dev/null 2>&1 || true
done

# --- 4. The image on every node -----------------------------------------------------------------
image=${1:-${GPULAB_TEST_IMAGE:-}}
if [ -z "$image" ]; then
    hub_version=$("$PYTHON" -c 'import jupyterhub; print(jupyterhub.__version__)') \
        || die "cannot import jupyterhub with $PYTHON to name the image; pass the image as argument"
    image=gpulab/singleuser:$hub_version
fi
main_id=$(DOCKER_HOST=unix:///var/run/docker.sock timeout 20 docker image inspect -f '{{.Id}}' "$image" 2>/dev/null) \
    || die "image $image is not in the main engine; build it with images/build-singleuser.sh"
pids=()
for n in $NODES; do
    have=$(node_docker "$n" image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
    [ "$have" = "$main_id" ] && continue
    (DOCKER_HOST=unix:///var/run/docker.sock docker save "$image" \
        | DOCKER_HOST=$(sock "$n") docker load -q >/dev/null) &
    pids+=($!)
done
for p in "${pids[@]}"; do
    wait "$p" || die "loading $image into a Swarm node failed"
done

echo "GPULAB_SWARM_MANAGER=$(sock 1)"
echo "GPULAB_SWARM_HOST_IP=$HOST_IP"
echo "GPULAB_SWARM_NODES=$(for n in $NODES; do printf '%s,' "$(ns "$n")"; done | sed 's/,$//')"
echo "GPULAB_SWARM_GPU_NODES=$(for n in $GPU_NODES; do printf '%s,' "$(ns "$n")"; done | sed 's/,$//')"
echo "GPULAB_SWARM_ENGINES=$(for n in $NODES; do printf '%s=%s,' "$(ns "$n")" "$(sock "$n")"; done | sed 's/,$//')"

#!/usr/bin/env bash
# demo.sh — THE hub command (README): bring up the demo lab and run JupyterHub in the foreground.
#
# On a fresh Debian/Ubuntu machine (root): installs the Debian packages the hub needs, starts
# dockerd if absent, installs the proxy, installs this checkout (pip, editable), builds the
# framework images (gpulab/base, gpulab/pytorch, gpulab/tensorflow: no registry needed; the CPU
# variants, or the CUDA ones where nvidia-smi sees a GPU), checks the configuration, and runs
# `jupyterhub -f jupyterhub_config.py`. Open http://127.0.0.1:8000 (GPULAB_PORT to change it) and
# log in with any password: student1 (students, dl101), researcher1 (researchers),
# instructor1 (instructors, dl101-staff), admin (admin). ./scripts/demo-stop.sh stops it all.
# On a host with NVIDIA GPUs the same config discovers them through NVML.
# GPULAB_DEMO_AUTH=oidc ./scripts/demo.sh logs in through a local OpenID Connect provider instead
# (scripts/demo-idp.sh: the same users, Keycloak-shaped groups, any password), as with campus SSO.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

step() { echo "demo: $*" >&2; }
# the demo's state (both databases, cookie secrets, the crypt key): root's alone
mkdir -p "${GPULAB_STATE_DIR:-$REPO/.state}" && chmod 700 "${GPULAB_STATE_DIR:-$REPO/.state}"
step "packages";  scripts/ensure-packages.sh --hub-only
step "docker";    scripts/ensure-docker.sh
step "proxy";     scripts/ensure-proxy.sh
step "install (virtual environment $REPO/.venv)"
PYTHON=$(scripts/ensure-venv.sh | tail -n 1)
export PYTHON PATH="$(dirname "$PYTHON"):$PATH"
# The hub's API listens on the containers' network, at docker0's address: asked of the engine
# here, since jupyterhub_config.py asks nothing while it loads (it runs in every gpulab process).
if [ -z "${GPULAB_HUB_IP:-}" ]; then
    GPULAB_HUB_IP=$("$PYTHON" -c 'from jupyterhub_gpulab.spawner.network import bridge_gateway as g; print(g("bridge", default="172.17.0.1"))')
    export GPULAB_HUB_IP
fi
# The CUDA variants where this host has a GPU (as jupyterhub_config.py decides), else the CPU ones.
if [ -z "${GPULAB_IMAGE_VARIANT:-}" ]; then
    GPULAB_IMAGE_VARIANT=cpu
    command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && GPULAB_IMAGE_VARIANT=cuda
fi
export GPULAB_IMAGE_VARIANT
step "images: base, pytorch, tensorflow ($GPULAB_IMAGE_VARIANT; first time ~5 min for cpu, longer for cuda)"
images/build-image.sh --variant "$GPULAB_IMAGE_VARIANT" base pytorch tensorflow >/dev/null
case "${GPULAB_DEMO_AUTH:=dummy}" in
dummy) ;;
oidc)
    step "local identity provider (GPULAB_DEMO_AUTH=oidc)"
    STATE=${GPULAB_STATE_DIR:-$REPO/.state}
    GPULAB_IDP_ISSUER=$(scripts/demo-idp.sh | tail -n 1)
    export GPULAB_IDP_ISSUER GPULAB_DEMO_AUTH
    # auth_state (the provider's tokens, for refreshing groups) is stored encrypted
    [ -s "$STATE/jupyterhub_crypt_key" ] || (umask 077; "$PYTHON" -c 'import secrets; print(secrets.token_hex(32))' >"$STATE/jupyterhub_crypt_key")
    JUPYTERHUB_CRYPT_KEY=$(cat "$STATE/jupyterhub_crypt_key")
    export JUPYTERHUB_CRYPT_KEY
    trap 'kill "$(cat "$STATE/idp.pid")" 2>/dev/null || true' EXIT
    ;;
*) echo "demo: GPULAB_DEMO_AUTH=$GPULAB_DEMO_AUTH is unknown; use dummy (default) or oidc" >&2; exit 2 ;;
esac
step "config";    gpulab check-config -f jupyterhub_config.py
step "starting JupyterHub on http://${GPULAB_IP:-127.0.0.1}:${GPULAB_PORT:-8000} (Ctrl-C to stop)"
if [ "$GPULAB_DEMO_AUTH" = oidc ]; then
    # not exec: the EXIT trap stops the provider. A signal to this script (Ctrl-C, kill) is
    # passed on to the hub, which stops as it would in the foreground.
    "$PYTHON" -m jupyterhub -f jupyterhub_config.py "$@" &
    hub=$!
    trap 'kill -TERM "$hub" 2>/dev/null || true' INT TERM
    rc=0
    wait "$hub" || rc=$?
    while kill -0 "$hub" 2>/dev/null; do wait "$hub" || rc=$?; done
    exit "$rc"
else
    exec "$PYTHON" -m jupyterhub -f jupyterhub_config.py "$@"
fi

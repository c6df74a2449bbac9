#!/usr/bin/env bash
# test-setup.sh — bring up everything the test suite needs on a fresh dev or CI machine.
#
# Why: sessions and CI start with no Docker engine, PostgreSQL stopped, a proxy command that does
# not run as installed, and no single-user image (there is no registry to pull one from).
# What, in order (the image needs the installed JupyterHub's version): scripts/ensure-packages.sh, scripts/ensure-docker.sh, scripts/ensure-postgres.sh, scripts/ensure-proxy.sh,
# images/build-singleuser.sh and images/build-image.sh (skipped when current), the gpusim engine and
# the test Swarm (scripts/ensure-gpusim-docker.sh, scripts/ensure-swarm.sh), then
# scripts/ensure-venv.sh test
# (this checkout, editable, in <repo>/.venv). Idempotent; ~1 s when everything is already up.
# It cannot export into its caller; on success it prints lines a caller may eval:
#   GPULAB_PYTHON=<repo>/.venv/bin/python
#   GPULAB_TEST_POSTGRES_URL=postgresql+psycopg://gpulab:gpulab@127.0.0.1:5432/gpulab_test
#   GPULAB_TEST_IMAGE=gpulab/singleuser:<hub version>
#   GPULAB_TEST_LAB_IMAGE=gpulab/singleuser:<hub version>-lab   (with ipykernel: tests that run a kernel)
#   GPULAB_TEST_BASE_IMAGE=gpulab/base:<hub version>, GPULAB_TEST_PYTORCH_IMAGE=gpulab/pytorch:<v>-cpu,
#   GPULAB_TEST_TENSORFLOW_IMAGE=gpulab/tensorflow:<v>-cpu  (images/build-image.sh)
#   GPULAB_GPUSIM_DOCKER_HOST=unix:///var/run/gpulab-gpusim.sock
#   GPULAB_GPUSIM_GATEWAY=172.30.0.1
#   GPULAB_SWARM_MANAGER=… GPULAB_SWARM_HOST_IP=… GPULAB_SWARM_NODES=… GPULAB_SWARM_GPU_NODES=…
#   GPULAB_SWARM_ENGINES=…   (scripts/ensure-swarm.sh: the test Swarm)
#   GPULAB_OIDC_PROVIDER_MODULE=/var/cache/gpulab/npm/oidc-provider-<v>/node_modules/oidc-provider/lib/index.js
# GPULAB_TEST_NEEDS (a comma-separated subset of docker,postgres,hub,browser,swarm,sso, the
# test markers; "none"; default "all") limits the set-up to what those tests need: the packages and
# the venv always; dockerd, the images and the gpusim engine for docker or swarm; PostgreSQL for
# postgres; the proxy for hub, docker, browser, swarm or sso (they start hubs); the Swarm for
# swarm; the OIDC provider for sso. Lines of parts not set up are not printed.
# Called by scripts/test.sh and .ci/run. Stops at the first failing step, naming it on stderr.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NEEDS=${GPULAB_TEST_NEEDS:-all}

# need MARKER...: whether the selection needs any of these markers' parts
need() {
    local m
    for m in "$@"; do
        case ",$NEEDS," in *,all,* | *",$m,"*) return 0 ;; esac
    done
    return 1
}

run_step() {
    local name=$1; shift
    "$@" || { echo "test-setup: step '$name' failed (exit $?)" >&2; exit 1; }
}

run_step packages "$REPO/scripts/ensure-packages.sh"
if need docker swarm; then run_step docker "$REPO/scripts/ensure-docker.sh"; fi
if need postgres; then pg_url=$(run_step postgres "$REPO/scripts/ensure-postgres.sh" | tail -n 1); fi
if need hub docker browser swarm sso; then run_step proxy "$REPO/scripts/ensure-proxy.sh"; fi
# Install this checkout (editable, with its test extras) into the checkout's own virtual
# environment, made from Debian's /usr/bin/python3 (which refuses pip installs of its own).
PYTHON=$(run_step venv "$REPO/scripts/ensure-venv.sh" test | tail -n 1)
export PYTHON
echo "GPULAB_PYTHON=$PYTHON"
if need postgres; then echo "GPULAB_TEST_POSTGRES_URL=$pg_url"; fi
if need docker swarm; then
    image=$(run_step image "$REPO/images/build-singleuser.sh" | tail -n 1)
    lab_image=$(GPULAB_IMAGE_LAB=1 run_step image-lab "$REPO/images/build-singleuser.sh" | tail -n 1)
    # The framework images (CPU variants), from their lock files; cached, ~4 min cold, ~1 s warm.
    framework_tags=$(run_step framework-images "$REPO/images/build-image.sh" --variant cpu base pytorch tensorflow)
    mapfile -t framework <<<"$framework_tags"
    echo "GPULAB_TEST_IMAGE=$image"
    echo "GPULAB_TEST_LAB_IMAGE=$lab_image"
    echo "GPULAB_TEST_BASE_IMAGE=${framework[0]}"
    echo "GPULAB_TEST_PYTORCH_IMAGE=${framework[1]}"
    echo "GPULAB_TEST_TENSORFLOW_IMAGE=${framework[2]}"
    # A second engine whose NVIDIA device-request path runs (with a stand-in for the toolkit's hook).
    GPULAB_TEST_IMAGE=$image run_step gpusim "$REPO/scripts/ensure-gpusim-docker.sh"
fi
if need swarm; then
    # A real three-node Docker Swarm in network namespaces, the test image on every node (marker swarm)
    GPULAB_TEST_IMAGE=$image run_step swarm "$REPO/scripts/ensure-swarm.sh" "$image"
fi
if need sso; then
    # npm's oidc-provider: the real identity provider of the SSO tests (marker sso)
    oidc=$(run_step oidc-provider "$REPO/scripts/ensure-oidc-provider.sh" | tail -n 1)
    echo "GPULAB_OIDC_PROVIDER_MODULE=$oidc"
fi

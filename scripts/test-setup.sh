#!/usr/bin/env bash
# test-setup.sh — bring up everything the test suite needs on a fresh dev or CI machine.
#
# Why: sessions and CI start with no Docker engine, PostgreSQL stopped, a proxy command that does
# not run as installed, and no single-user image (there is no registry to pull one from).
# What, in order (the image needs the installed JupyterHub's version): scripts/ensure-packages.sh, scripts/ensure-docker.sh, scripts/ensure-postgres.sh, scripts/ensure-proxy.sh,
# images/build-singleuser.sh (skipped when the image is current), then `pip install -e '.[test]'`
# unless this checkout is already the installed one. Idempotent; ~1 s when everything is already up.
# It cannot export into its caller; on success it prints lines a caller may eval:
#   GPULAB_TEST_POSTGRES_URL=postgresql+psycopg://gpulab:gpulab@127.0.0.1:5432/gpulab_test
#   GPULAB_TEST_IMAGE=gpulab/singleuser:<hub version>
#   GPULAB_GPUSIM_DOCKER_HOST=unix:///var/run/gpulab-gpusim.sock
#   GPULAB_GPUSIM_GATEWAY=172.30.0.1
# Called by scripts/test.sh and .ci/run. Stops at the first failing step, naming it on stderr.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}

run_step() {
    local name=$1; shift
    "$@" || { echo "test-setup: step '$name' failed (exit $?)" >&2; exit 1; }
}

run_step packages "$REPO/scripts/ensure-packages.sh"
run_step docker "$REPO/scripts/ensure-docker.sh"
pg_url=$(run_step postgres "$REPO/scripts/ensure-postgres.sh" | tail -n 1)
run_step proxy "$REPO/scripts/ensure-proxy.sh"
# Install this checkout (editable), unless it is already the one Python imports: a clone tested
# next to another checkout must not run the other checkout's code in hub subprocesses.
# (The test extras are checked too: demo.sh installs the package without them.)
installed=$(cd / && "$PYTHON" -c 'import pytest, pytest_asyncio, hypothesis, psycopg, selenium, requests, jupyterhub_gpulab, os; print(os.path.dirname(os.path.dirname(jupyterhub_gpulab.__file__)))' 2>/dev/null || true)
if [ "$installed" != "$REPO" ]; then
    (cd "$REPO" && "$PYTHON" -m pip install -q -e '.[test]' >/tmp/gpulab-pip-install.log 2>&1) \
        || { echo "test-setup: pip install -e '.[test]' failed; see /tmp/gpulab-pip-install.log" >&2; exit 1; }
fi
image=$(run_step image "$REPO/images/build-singleuser.sh" | tail -n 1)
# A second engine whose NVIDIA device-request path runs (with a stand-in for the toolkit's hook).
gpusim=$(GPULAB_TEST_IMAGE=$image run_step gpusim "$REPO/scripts/ensure-gpusim-docker.sh")


echo "GPULAB_TEST_POSTGRES_URL=$pg_url"
echo "GPULAB_TEST_IMAGE=$image"
echo "$gpusim"

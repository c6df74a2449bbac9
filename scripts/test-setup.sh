#!/usr/bin/env bash
# test-setup.sh — bring up everything the test suite needs on a fresh dev or CI machine.
#
# Why: sessions and CI start with no Docker engine, PostgreSQL stopped, a proxy command that does
# not run as installed, and no single-user image (there is no registry to pull one from).
# What, in order: scripts/ensure-docker.sh, scripts/ensure-postgres.sh, scripts/ensure-proxy.sh,
# images/build-singleuser.sh (skipped when the image is current), then `pip install -e '.[test]'`
# when jupyterhub_gpulab is not importable. Idempotent; ~1 s when everything is already up.
# It cannot export into its caller; on success it prints exactly two lines a caller may eval:
#   GPULAB_TEST_POSTGRES_URL=postgresql+psycopg://gpulab:gpulab@127.0.0.1:5432/gpulab_test
#   GPULAB_TEST_IMAGE=gpulab/singleuser:<hub version>
# Called by scripts/test.sh and .ci/run. Stops at the first failing step, naming it on stderr.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}

run_step() {
    local name=$1; shift
    "$@" || { echo "test-setup: step '$name' failed (exit $?)" >&2; exit 1; }
}

run_step docker "$REPO/scripts/ensure-docker.sh"
pg_url=$(run_step postgres "$REPO/scripts/ensure-postgres.sh" | tail -n 1)
run_step proxy "$REPO/scripts/ensure-proxy.sh"
image=$(run_step image "$REPO/images/build-singleuser.sh" | tail -n 1)

if ! "$PYTHON" -c 'import jupyterhub_gpulab' >/dev/null 2>&1; then
    (cd "$REPO" && "$PYTHON" -m pip install -q -e '.[test]' >/tmp/gpulab-pip-install.log 2>&1) \
        || { echo "test-setup: pip install -e '.[test]' failed; see /tmp/gpulab-pip-install.log" >&2; exit 1; }
fi

echo "GPULAB_TEST_POSTGRES_URL=$pg_url"
echo "GPULAB_TEST_IMAGE=$image"

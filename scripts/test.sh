#!/usr/bin/env bash
# test.sh — THE test command (README, .ci/run): set up what the tests need, then run pytest.
#
# On a fresh Debian/Ubuntu machine (root) it installs the Debian packages, starts dockerd and
# PostgreSQL, installs the proxy, builds the single-user image, installs this checkout with its
# test extras, and runs the whole suite, Docker and browser tests included. Arguments go to pytest
# (e.g. `scripts/test.sh -k ledger -x`). GPULAB_SWARM_TEARDOWN=1 (CI) takes the test Swarm down
# after the run (scripts/stop-swarm.sh); otherwise it stays up for the next run, as dockerd does.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

setup=$("$REPO/scripts/test-setup.sh")
while IFS='=' read -r key value; do
    case "$key" in GPULAB_*) export "$key=$value" ;; esac
done <<<"$setup"

cd "$REPO"
export PATH="$(dirname "$GPULAB_PYTHON"):$PATH"
if [ "${GPULAB_SWARM_TEARDOWN:-}" != 1 ]; then
    exec "$GPULAB_PYTHON" -m pytest "$@"
fi
# CI (.ci/run): take the test Swarm down afterwards, whatever pytest's outcome
rc=0
"$GPULAB_PYTHON" -m pytest "$@" || rc=$?
"$REPO/scripts/stop-swarm.sh" || echo "test.sh: stop-swarm.sh failed" >&2
exit $rc

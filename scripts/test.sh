#!/usr/bin/env bash
# test.sh — THE test command (README, .ci/run): set up what the tests need, then run pytest.
#
# On a fresh Debian/Ubuntu machine (root) it installs the Debian packages, starts dockerd and
# PostgreSQL, installs the proxy, builds the single-user image, installs this checkout with its
# test extras, and runs the whole suite, Docker and browser tests included. Arguments go to pytest
# (e.g. `scripts/test.sh -k ledger -x`). GPULAB_SWARM_TEARDOWN=1 (CI) takes the test Swarm down
# after the run (scripts/stop-swarm.sh); otherwise it stays up for the next run, as dockerd does.
# It sets up only what the selected tests need: where the checkout's venv exists it asks pytest
# (`pytest --gpulab-needs <args>`, tests/conftest.py: the markers of the selected tests) and passes
# the answer to test-setup.sh as GPULAB_TEST_NEEDS; `scripts/test.sh -m unit` sets up no engine,
# database or proxy. Without a venv (a fresh machine, CI), or with GPULAB_TEST_NEEDS=all, it sets
# up everything.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

needs=${GPULAB_TEST_NEEDS:-}
if [ -z "$needs" ] && [ -x "$REPO/.venv/bin/python" ]; then
    # (pytest exits 5 here: it collected, then ran nothing; an error leaves no answer: "all")
    asked=$(cd "$REPO" && .venv/bin/python -m pytest -q -p no:cacheprovider --gpulab-needs "$@" \
        2>/dev/null) || true
    needs=$(sed -n 's/^gpulab-needs=//p' <<<"$asked" | tail -n 1)
fi
setup=$(GPULAB_TEST_NEEDS=${needs:-all} "$REPO/scripts/test-setup.sh")
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

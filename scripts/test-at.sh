#!/usr/bin/env bash
# test-at.sh — run a command with the wall clock at a chosen UTC moment (libfaketime), e.g.
#   scripts/test-at.sh '2026-12-07 00:05' .venv/bin/python -m pytest -m unit
# for the moments a calendar rule turns over: Monday 00:05 UTC, Sunday 23:58, a Berlin DST change
# (2026-10-25 00:30 UTC, 2027-03-28 00:30 UTC), 31 December 23:58. Every process it starts (pytest,
# a test's hub; tests/hubtools.py hands a hub's managed services the same variables) reads the
# clock moved by the same offset, and the clock advances. Docker containers and PostgreSQL keep
# their own clock: use it for unit and hub tests (docs/source/developing.md, "The suite at a
# chosen moment", names the one test that fails under libfaketime at any moment). Needs libfaketime (Debian: apt-get install faketime). Not used by CI.
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: $0 'YYYY-MM-DD HH:MM[:SS]' command [args...]  (the moment in UTC)" >&2
    exit 2
fi
lib=$(find /usr/lib /usr/local/lib -name libfaketime.so.1 2>/dev/null | grep -v MT | head -n1)
if [ -z "$lib" ]; then
    echo "libfaketime is not installed (Debian/Ubuntu: apt-get install faketime)" >&2
    exit 2
fi
target=$(date -u -d "$1 UTC" +%s) || { echo "not a moment: $1" >&2; exit 2; }
shift
offset=$((target - $(date -u +%s)))
# a relative offset, not the "@start" form: a process started later (the hub, its service) must
# not start the clock over again at the same moment
export LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}"
export FAKETIME="$(printf '%+d' "$offset")s" FAKETIME_NO_CACHE=1
exec "$@"

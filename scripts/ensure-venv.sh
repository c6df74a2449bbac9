#!/usr/bin/env bash
# ensure-venv.sh — the project's own Python environment: create it, install this checkout into it.
#
# Why: Debian's /usr/bin/python3 is "externally managed" (PEP 668): `pip install` into it fails, so
# every script installs into a virtual environment of this checkout instead, made from Debian's own
# interpreter (`python3-venv` is installed with apt when missing).
# What: creates $GPULAB_VENV (default <repo>/.venv, git-ignored) with $GPULAB_BASE_PYTHON (default
# /usr/bin/python3, falling back to the first python3 on PATH), then `pip install -e '.[EXTRAS]'`
# (first argument, e.g. `test`; none for the hub alone) unless the venv already imports this
# checkout with those extras. Idempotent; ~1 s when current. Prints one line: the venv's python.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${GPULAB_VENV:-$REPO/.venv}
EXTRAS=${1:-}
BASE=${GPULAB_BASE_PYTHON:-/usr/bin/python3}
[ -x "$BASE" ] || BASE=$(command -v python3 || true)
LOG=/tmp/gpulab-pip-$(echo "$REPO" | md5sum | cut -c1-8).log

die() { echo "ensure-venv: $*" >&2; exit 1; }
[ -n "$BASE" ] || die "no python3 found; apt-get install -y python3 python3-venv"

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
    if ! "$BASE" -c 'import ensurepip, venv' 2>/dev/null; then
        [ "$(id -u)" = 0 ] || die "python3-venv is missing; sudo apt-get install -y python3-venv"
        minor=$("$BASE" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q "python$minor-venv" >/tmp/gpulab-apt-venv.log 2>&1 || {
            apt-get update -q >>/tmp/gpulab-apt-venv.log 2>&1 || true
            apt-get install -y -q "python$minor-venv" >>/tmp/gpulab-apt-venv.log 2>&1 \
                || die "apt-get install python$minor-venv failed; see /tmp/gpulab-apt-venv.log"
        }
    fi
    rm -rf "$VENV"
    "$BASE" -m venv "$VENV" || die "$BASE -m venv $VENV failed"
fi
PY=$VENV/bin/python

probe='import jupyterhub_gpulab, icalendar, recurring_ical_events, os; print(os.path.dirname(os.path.dirname(jupyterhub_gpulab.__file__)))'
[ "$EXTRAS" = test ] && probe="import pytest, pytest_asyncio, hypothesis, psycopg, selenium, requests, ltiauthenticator; $probe"
installed=$(cd / && "$PY" -c "$probe" 2>/dev/null || true)
# An editable install keeps the code current, but not its metadata: a pyproject.toml that gained
# a dependency or an entry point (JupyterHub finds spawners and authenticators by entry point)
# needs a new install, so the install is stamped with the pyproject's hash and the extras.
stamp=$VENV/.gpulab-install
want="$(sha256sum "$REPO/pyproject.toml" | cut -c1-64) $EXTRAS"
have=$(cat "$stamp" 2>/dev/null || true)
# (a venv installed with the test extras also serves a call without them)
if [ "$installed" != "$REPO" ] || { [ "$have" != "$want" ] && [ "$have" != "${want}test" ]; }; then
    spec=.
    [ -n "$EXTRAS" ] && spec=".[$EXTRAS]"
    (cd "$REPO" && "$PY" -m pip install -q --disable-pip-version-check -e "$spec" >"$LOG" 2>&1) \
        || die "pip install -e '$spec' into $VENV failed; see $LOG"
    echo "$want" >"$stamp"
fi
echo "$PY"

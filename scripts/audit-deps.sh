#!/usr/bin/env bash
# audit-deps.sh — check the installed Python packages against a vulnerability database.
#
# Why: pyproject.toml's floors keep known-vulnerable releases out of new installs, but the set a
# lab (or CI) actually runs is what matters, and advisories appear after a release: CI checks it.
# What: `pip freeze` of $GPULAB_VENV (default <repo>/.venv, made or brought up to date by
# ensure-venv.sh with the test extras; this checkout's own editable install left out), audited by pip-audit (installed on first use into its own venv,
# $GPULAB_AUDIT_VENV, default <repo>/.venv/audit-tool, so its dependencies are not the lab's) with
# PyPI's JSON API as the database (it carries the OSV advisories of every release).
# Exit: 0 when nothing known is found, or when no database is reachable (it says so, loudly, on
# stderr: an offline CI machine cannot check); 1 when a package has a known vulnerability (pip-audit
# lists each with its advisory and the fixed versions); 2 when the check itself cannot run.
# Packages PyPI does not know (private or newer than its index) are listed as not audited.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${GPULAB_VENV:-$REPO/.venv}
TOOL=${GPULAB_AUDIT_VENV:-$VENV/audit-tool}
DB=${GPULAB_AUDIT_URL:-https://pypi.org/pypi/pip/json}

die() { echo "audit-deps: $*" >&2; exit 2; }
bash "$REPO/scripts/ensure-venv.sh" test >/dev/null || die "ensure-venv.sh failed"

if ! "$VENV/bin/python" -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1], timeout=15)" "$DB" 2>/dev/null; then
    echo "audit-deps: NOT CHECKED: the vulnerability database ($DB) cannot be reached from here;" \
        "run scripts/audit-deps.sh where PyPI is reachable" >&2
    exit 0
fi

if [ ! -x "$TOOL/bin/pip-audit" ]; then
    "$VENV/bin/python" -m venv "$TOOL" || die "cannot make $TOOL"
    "$TOOL/bin/python" -m pip install -q --disable-pip-version-check pip-audit >/tmp/gpulab-audit-pip.log 2>&1 \
        || die "pip install pip-audit failed; see /tmp/gpulab-audit-pip.log"
fi

reqs=$(mktemp)
report=$(mktemp)
trap 'rm -f "$reqs" "$report"' EXIT
"$VENV/bin/python" -m pip freeze --disable-pip-version-check --exclude-editable >"$reqs"
echo "audit-deps: $(wc -l <"$reqs") packages of $VENV against PyPI's advisories" >&2
# --no-deps --disable-pip: the frozen set is the whole, pinned environment; nothing is resolved
rc=0
"$TOOL/bin/pip-audit" --progress-spinner off --no-deps --disable-pip -r "$reqs" \
    --vulnerability-service pypi --format json --output "$report" 2>/dev/null || rc=$?
[ -s "$report" ] || die "pip-audit wrote no report (exit $rc)"
# what was found, and how much could be checked at all: a release the database does not know
# (a private index, a mirror newer than PyPI) is not a clean one
"$VENV/bin/python" - "$report" <<'PY'
import json, sys

deps = json.load(open(sys.argv[1]))["dependencies"]
skipped = [d for d in deps if d.get("skip_reason")]
bad = [d for d in deps if d.get("vulns")]
for d in bad:
    for v in d["vulns"]:
        fix = ", ".join(v.get("fix_versions") or []) or "none yet"
        print(f"VULNERABLE: {d['name']} {d['version']}: {v['id']} (fixed in {fix})")
checked = len(deps) - len(skipped)
if not checked:
    print(f"audit-deps: NOT CHECKED: the database knows none of the {len(deps)} installed releases")
print(f"audit-deps: {checked} of {len(deps)} packages checked, {len(bad)} with known vulnerabilities")
if skipped:
    names = ", ".join(d["name"] for d in skipped[:10])
    more = f" and {len(skipped) - 10} more" if len(skipped) > 10 else ""
    print(f"audit-deps: NOT CHECKED ({len(skipped)}): unknown to the database: {names}{more}")
PY
exit "$rc"

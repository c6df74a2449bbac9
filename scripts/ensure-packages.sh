#!/usr/bin/env bash
# ensure-packages.sh — install the Debian packages the hub and the test suite use, if missing.
#
# Why: a fresh Debian/Ubuntu machine (and CI) has none of them; one apt-get call for all is
# faster than one per script. What: docker.io (the engine), debootstrap (the single-user image
# is built without a registry), postgresql (ledger tests on PostgreSQL), chromium +
# chromium-driver (the admin page is tested in a real browser), node-configurable-http-proxy
# (JupyterHub's proxy), iproute2, and prometheus (a real Prometheus scrapes the hub and the
# service in the tests; its promtool checks the shipped alert rules; its daemon is not started).
# Pass --hub-only to skip what only the tests need.
# Idempotent and silent when everything is present; needs root otherwise.
set -euo pipefail

pkgs=(docker.io debootstrap node-configurable-http-proxy iproute2 ca-certificates)
[ "${1:-}" = "--hub-only" ] || pkgs+=(postgresql chromium chromium-driver prometheus)

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

[ "$(id -u)" = 0 ] || { echo "ensure-packages: missing ${missing[*]}; run as root or: sudo apt-get install -y ${missing[*]}" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive
log=/tmp/gpulab-apt.log
echo "ensure-packages: installing ${missing[*]} (log: $log)" >&2
apt-get update -q >"$log" 2>&1 || true
apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$log" 2>&1 \
    || { echo "ensure-packages: apt-get install failed; see $log" >&2; tail -n 20 "$log" >&2; exit 1; }

#!/usr/bin/env bash
# ensure-oidc-provider.sh — npm's `oidc-provider` for the local identity provider
# (scripts/idp/local-idp.mjs) that the SSO tests (marker `sso`) and the demo's
# GPULAB_DEMO_AUTH=oidc log in through.
#
# Why: campus SSO is tested against a real OpenID Connect provider, not a mock; `oidc-provider`
# is a certified implementation from the npm registry. Version 8 runs on Node 18 (Debian 12's
# `nodejs`) and later; 9 warns below Node 22.
# What: installs Debian's nodejs (and npm when node came without it) if missing, then
# `npm install oidc-provider@$VERSION` into $GPULAB_NPM_CACHE (default /var/cache/gpulab/npm,
# else ~/.cache/gpulab/npm when not root) unless already there. Idempotent; ~0.1 s when current.
# Prints one line: the module's entry file (OIDC_PROVIDER_MODULE for local-idp.mjs).
set -euo pipefail

VERSION=8.8.1
if [ -z "${GPULAB_NPM_CACHE:-}" ]; then
    if [ "$(id -u)" = 0 ]; then GPULAB_NPM_CACHE=/var/cache/gpulab/npm; else GPULAB_NPM_CACHE=$HOME/.cache/gpulab/npm; fi
fi
DIR=$GPULAB_NPM_CACHE/oidc-provider-$VERSION
ENTRY=$DIR/node_modules/oidc-provider/lib/index.js
die() { echo "ensure-oidc-provider: $*" >&2; exit 1; }

if [ -f "$ENTRY" ] && [ -f "$DIR/.complete" ]; then echo "$ENTRY"; exit 0; fi

missing=()
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || die "missing ${missing[*]}; sudo apt-get install -y ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/gpulab-apt-node.log 2>&1 || {
        apt-get update -q >>/tmp/gpulab-apt-node.log 2>&1 || true
        apt-get install -y -q --no-install-recommends "${missing[@]}" >>/tmp/gpulab-apt-node.log 2>&1 \
            || die "apt-get install ${missing[*]} failed; see /tmp/gpulab-apt-node.log"
    }
fi
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 18 ] || die "Node.js $major is too old for oidc-provider $VERSION (needs 18 or later)"

mkdir -p "$DIR"
log=/tmp/gpulab-npm-oidc-provider.log
(cd "$DIR" && echo '{"private": true}' >package.json \
    && npm install --no-audit --no-fund --no-save "oidc-provider@$VERSION" >"$log" 2>&1) \
    || die "npm install oidc-provider@$VERSION into $DIR failed; see $log"
[ -f "$ENTRY" ] || die "npm installed no $ENTRY; see $log"
touch "$DIR/.complete"
echo "$ENTRY"

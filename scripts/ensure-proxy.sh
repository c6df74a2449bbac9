#!/usr/bin/env bash
# ensure-proxy.sh — make `configurable-http-proxy` (JupyterHub's default proxy) runnable from PATH.
#
# Why: JupyterHub starts the proxy by that name. Debian's node-configurable-http-proxy installs
# /usr/bin/configurable-http-proxy, but with this machine's node (NodeSource build) its
# dependencies under /usr/share/nodejs are not found unless NODE_PATH=/usr/share/nodejs.
# What: if the command already answers `--version`, do nothing. Else prefer the Debian package:
# install a small wrapper /usr/local/bin/configurable-http-proxy (ahead of /usr/bin on PATH) that
# sets NODE_PATH and execs Debian's script. Fall back to `npm install -g configurable-http-proxy`.
# Verifies with `configurable-http-proxy --version`. Idempotent, silent on success.
set -euo pipefail

DEBIAN_CHP=/usr/share/nodejs/configurable-http-proxy/bin/configurable-http-proxy
WRAPPER=/usr/local/bin/configurable-http-proxy
MARKER="installed by jupyterhub-gpulab scripts/ensure-proxy.sh"

die() { echo "ensure-proxy: $*" >&2; exit 1; }
chp_works() { timeout 20 configurable-http-proxy --version >/dev/null 2>&1; }

chp_works && exit 0

# Debian's package: usable when its dependencies resolve through NODE_PATH.
if [ -x "$DEBIAN_CHP" ] && NODE_PATH=/usr/share/nodejs timeout 20 "$DEBIAN_CHP" --version >/dev/null 2>&1; then
    if [ ! -e "$WRAPPER" ] || grep -qF "$MARKER" "$WRAPPER"; then
        tmp=$(mktemp "$WRAPPER.XXXXXX")
        cat >"$tmp" <<WRAP
#!/bin/sh
# $MARKER:
# Debian's node-configurable-http-proxy finds its node modules only with NODE_PATH=/usr/share/nodejs.
NODE_PATH=/usr/share/nodejs\${NODE_PATH:+:\$NODE_PATH}
export NODE_PATH
exec $DEBIAN_CHP "\$@"
WRAP
        chmod 0755 "$tmp"
        mv -f "$tmp" "$WRAPPER"
        hash -r
    fi
    chp_works && exit 0
fi

# Fallback: npm's package (5.x warns EBADENGINE with some node versions, and works).
command -v npm >/dev/null 2>&1 || die "neither Debian's node-configurable-http-proxy nor npm is usable; apt-get install -y node-configurable-http-proxy (or npm)"
npm install -g --no-fund --no-audit configurable-http-proxy >/tmp/gpulab-npm-chp.log 2>&1 \
    || die "npm install -g configurable-http-proxy failed; see /tmp/gpulab-npm-chp.log"
hash -r
chp_works || die "configurable-http-proxy still does not run: $(command -v configurable-http-proxy || echo 'not on PATH') — PATH=$PATH"

#!/usr/bin/env bash
# build.sh — build the jupyterlab-gpulab wheel (server extension + prebuilt JupyterLab extension).
#
# The JupyterLab part is built with JupyterLab's own builder (npm's @jupyterlab/builder, run by
# `jupyter labextension build`): a prebuilt (federated) extension, so JupyterLab loads it from
# the single-user server, with no rebuild of JupyterLab and nothing from a CDN. npm installs from
# package-lock.json (`npm ci`); the builder runs in a build venv holding the jupyterlab version
# of images/locks/base.txt. The wheel is cached under $GPULAB_CACHE_DIR/labext/<source hash>/;
# the last line of stdout is its path. Called by images/build-image.sh.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${GPULAB_CACHE_DIR:-/var/cache/gpulab}
PYTHON=${PYTHON:-$HERE/../../.venv/bin/python}
die() { echo "jupyterlab-gpulab: $*" >&2; exit 1; }
command -v npm >/dev/null || die "npm is missing (apt-get install -y npm, or Node.js from your distribution)"

src_hash=$(cd "$HERE" && find . -path ./node_modules -prune -o -type f ! -path './jupyterlab_gpulab/labextension/*' -print0 \
    | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
OUT="$CACHE/labext/$src_hash"
if wheel=$(ls "$OUT"/jupyterlab_gpulab-*.whl 2>/dev/null | head -n 1) && [ -n "$wheel" ]; then
    echo "$wheel"
    exit 0
fi
jl_version=$(sed -n 's/^jupyterlab==\([^ ]*\).*/\1/p' "$HERE/../locks/base.txt")
[ -n "$jl_version" ] || die "images/locks/base.txt pins no jupyterlab"
LOG="$CACHE/labext/build.log"
mkdir -p "$CACHE/labext"
: >"$LOG"
VENV="$CACHE/labext/venv-$jl_version"
if [ ! -x "$VENV/bin/jupyter-labextension" ]; then
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV" >>"$LOG" 2>&1
    "$VENV/bin/pip" install -q --find-links "$CACHE/wheels/locked" "jupyterlab==$jl_version" hatchling >>"$LOG" 2>&1 \
        || { tail -n 20 "$LOG" >&2; die "could not install jupyterlab==$jl_version for the build"; }
fi
WORK=$(mktemp -d /var/tmp/gpulab-labext.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
(cd "$HERE" && tar --exclude=./node_modules --exclude=./jupyterlab_gpulab/labextension -cf - .) | tar -C "$WORK" -xf -
# JupyterLab's own package.json names the core packages the extension shares (no download).
core=$("$VENV/bin/python" -c 'import jupyterlab, os; print(os.path.join(os.path.dirname(jupyterlab.__file__), "staging", "package.json"))')
build() {
    cd "$WORK" \
        && npm ci --no-audit --no-fund --cache "$CACHE/npm-cache" --prefer-offline \
        && PATH="$VENV/bin:$PATH" jupyter labextension build --core-package-file "$core" . \
        && [ -s jupyterlab_gpulab/labextension/package.json ] \
        && "$VENV/bin/pip" wheel -q --no-deps --no-build-isolation -w "$WORK/dist" .
}
build >>"$LOG" 2>&1 || { tail -n 30 "$LOG" >&2; die "build failed; see $LOG"; }
mkdir -p "$OUT.tmp"
cp "$WORK"/dist/jupyterlab_gpulab-*.whl "$OUT.tmp/"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
ls "$OUT"/jupyterlab_gpulab-*.whl

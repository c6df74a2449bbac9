#!/usr/bin/env bash
# lock.sh [NAME...] — regenerate the framework images' lock files (images/locks/*.txt) from their
# inputs (images/locks/*.in): every package pinned with the sha256 of each of its wheels, for
# `pip install --require-hashes`.
#
# Resolver: uv (`pip install uv`; `uv pip compile --generate-hashes`), for the images' CPython
# 3.11 on manylinux_2_36 x86_64 (Debian bookworm's glibc 2.36), wheels only. uv resolves from
# the index's metadata, so the CUDA locks resolve without downloading the CUDA wheels (GBs).
# base.txt is resolved first; every framework lock is constrained by it (-c base.txt), so a
# framework image only adds packages to the base image's venv. pytorch-cpu resolves against
# --find-links $GPULAB_LOCAL_WHEELS (default /opt/wheels), where the 2.13.0+cpu wheel lies.
# After a JupyterHub upgrade, edit the jupyterhub pin in base.in, run this, then build.
# NAME: base, pytorch-cpu, pytorch-cuda, pytorch-cuda12-legacy, tensorflow-cpu, tensorflow-cuda
# (default: all).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
UV=${UV:-$(command -v uv || echo "$HERE/../.venv/bin/uv")}
[ -x "$UV" ] || { echo "lock.sh: uv is missing: $HERE/../.venv/bin/pip install uv" >&2; exit 1; }
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(base pytorch-cpu pytorch-cuda pytorch-cuda12-legacy tensorflow-cpu tensorflow-cuda)
cd "$HERE/locks"
for name in "${names[@]}"; do
    [ -f "$name.in" ] || { echo "lock.sh: no $name.in" >&2; exit 1; }
    extra=()
    [ "$name" = pytorch-cpu ] && extra=(--find-links "${GPULAB_LOCAL_WHEELS:-/opt/wheels}")
    "$UV" pip compile -q --generate-hashes --python-version 3.11 \
        --python-platform x86_64-manylinux_2_36 --only-binary :all: --no-strip-extras \
        --custom-compile-command "images/lock.sh $name" "${extra[@]}" "$name.in" -o "$name.txt"
    echo "images/locks/$name.txt: $(grep -c '==' "$name.txt") packages"
done

#!/usr/bin/env bash
# build-image.sh [--force] [--refresh] [--variant cpu|cuda|cuda12-legacy] IMAGE... — the framework images,
# without a registry, from hash-checked lock files.
#
# IMAGE: base | pytorch | tensorflow | all (= all three). Tags (<v>: the hub's JupyterHub version):
#   gpulab/base:<v>                 JupyterLab, numpy, pandas, matplotlib, scikit-learn, ipywidgets,
#                                   nbgitpuller, jupyterlab-nvdashboard, gpulab's JupyterLab entry
#   gpulab/pytorch:<v>-<variant>    base + torch (cpu: the 2.13.0+cpu wheel; cuda: PyPI's CUDA 13
#                                   build with its nvidia-* wheels, and torchvision; cuda12-legacy:
#                                   PyPI's torch 2.7.1, a CUDA 12.6 build from sm_50, for GPUs
#                                   before Turing such as a Tesla P40: docs/source/admin/images.md)
#   gpulab/tensorflow:<v>-<variant> base + tensorflow-cpu (cpu) or tensorflow[and-cuda] (cuda,
#                                   with LD_LIBRARY_PATH on its pip-installed CUDA libraries)
# --variant (default cpu, or $GPULAB_IMAGE_VARIANT) picks the framework build; base has none;
# cuda12-legacy exists for pytorch only (images/locks/pytorch-cuda12-legacy.txt).
#
# How: the same path as build-singleuser.sh (no Dockerfile, no registry): a Debian bookworm
# minbase rootfs (debootstrap, cached), a venv at /opt/venv owned by jovyan (students may `pip
# install`), every wheel downloaded on the host for the chroot's CPython 3.11 / glibc 2.36 with
# `pip download --require-hashes -r images/locks/<image>-<variant>.txt` (cached), installed offline
# in the chroot with `pip install --require-hashes --no-deps`; then `docker import` with labels
# stating the framework versions, CUDA major, minimum driver and compute capability
# (jupyterhub_gpulab/lab/images.py). Layers of the cache under $GPULAB_CACHE_DIR
# (/var/cache/gpulab): rootfs-*.tar, wheels/locked/, and layers/base-<key>.tar (the base rootfs
# with its venv), which the framework images start from.
#
# An image is skipped when its tag exists with the same recipe label (a hash of this script, its
# lock, the files it copies and the hub version); --force rebuilds, --refresh also re-runs
# debootstrap and re-downloads the wheels. Locks: images/lock.sh regenerates them.
# Quiet on success but one line per image on stdout: its tag. Needs root and a Docker engine.
# GPULAB_VERBOSE=1 shows the build log on stderr.
set -euo pipefail

die() { echo "build-image: $*" >&2; exit 1; }

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
force=0
refresh=0
variant=${GPULAB_IMAGE_VARIANT:-cpu}
images=()
while [ $# -gt 0 ]; do
    case "$1" in
        --force) force=1 ;;
        --refresh) force=1; refresh=1 ;;
        --variant) shift; variant=${1:-} ;;
        --variant=*) variant=${1#--variant=} ;;
        -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
        -*) die "unknown option $1 (use --force, --refresh, --variant cpu|cuda|cuda12-legacy)" ;;
        all) images+=(base pytorch tensorflow) ;;
        base|pytorch|tensorflow) images+=("$1") ;;
        *) die "unknown image '$1': use base, pytorch, tensorflow or all" ;;
    esac
    shift
done
[ ${#images[@]} -gt 0 ] || die "name the images to build: base, pytorch, tensorflow or all"
case "$variant" in cpu|cuda|cuda12-legacy) ;; *) die "--variant must be cpu, cuda or cuda12-legacy, not '$variant'" ;; esac
for img in "${images[@]}"; do
    [ "$img" = base ] || [ -f "$HERE/locks/$img-$variant.txt" ] \
        || die "no $variant variant of $img (no images/locks/$img-$variant.txt); cuda12-legacy is pytorch only"
done
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot)"
command -v debootstrap >/dev/null 2>&1 || die "debootstrap missing: apt-get install -y debootstrap"
timeout 10 docker info >/dev/null 2>&1 || die "the Docker engine does not answer; run scripts/ensure-docker.sh"

PYTHON=${PYTHON:-$REPO/.venv/bin/python}
hub_version=$("$PYTHON" -c 'import jupyterhub; print(jupyterhub.__version__)') \
    || die "cannot import jupyterhub with $PYTHON; run scripts/ensure-venv.sh first"
locked_hub=$(sed -n 's/^jupyterhub==\([^ ]*\).*/\1/p' "$HERE/locks/base.txt")
[ "$locked_hub" = "$hub_version" ] || echo "build-image: warning: images/locks/base.txt pins" \
    "jupyterhub $locked_hub but the hub runs $hub_version; regenerate the locks (images/lock.sh)" >&2

SUITE=bookworm
MIRROR=${GPULAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# git: nbgitpuller shells out to it; procps, less, nano: what a terminal user expects.
INCLUDE=python3,python3-venv,ca-certificates,git,procps,less,nano
CHROOT_PY=3.11.2
GLIBC_MINOR=36
CACHE=${GPULAB_CACHE_DIR:-/var/cache/gpulab}
BASE_TAR="$CACHE/rootfs-$SUITE-minbase-$(echo "$INCLUDE" | sha256sum | cut -c1-8).tar"
WHEELS="$CACHE/wheels/locked"
LOCAL_WHEELS=${GPULAB_LOCAL_WHEELS:-/opt/wheels}   # where this project's machines keep torch+cpu
LOG="$CACHE/build-image.log"
mkdir -p "$CACHE/layers" "$WHEELS"

lockfile() { # IMAGE -> its lock file
    if [ "$1" = base ]; then echo "$HERE/locks/base.txt"; else echo "$HERE/locks/$1-$variant.txt"; fi
}
tag_of() {
    if [ "$1" = base ]; then echo "gpulab/base:$hub_version"; else echo "gpulab/$1:$hub_version-$variant"; fi
}
ext_dir="$HERE/jupyterlab-gpulab"
ext_hash=$(cd "$ext_dir" && find . -path ./node_modules -prune -o -type f ! -path './lib/labextension/*' -print0 \
    | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
base_key=$( { echo "$INCLUDE $hub_version $ext_hash"; cat "$HERE/locks/base.txt" "$0" \
    "$HERE/site/"*; (cd "$HERE/rootfs" && find . -type f | sort | xargs cat); } | sha256sum | cut -c1-16)
recipe_of() { { echo "$base_key $variant"; cat "$(lockfile "$1")"; } | sha256sum | cut -c1-16; }
label() { docker image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true; }
current() { [ "$force" = 0 ] && [ "$(label "$(tag_of "$1")" org.jupyter.gpulab.recipe)" = "$(recipe_of "$1")" ]; }

todo=()
for img in "${images[@]}"; do
    [ -s "$(lockfile "$img")" ] || die "no lock file $(lockfile "$img"); run images/lock.sh"
    current "$img" || todo+=("$img")
done
if [ ${#todo[@]} -eq 0 ]; then
    for img in "${images[@]}"; do tag_of "$img"; done
    exit 0
fi

exec 9>"$CACHE/build.lock"   # one build at a time, shared with build-singleuser.sh
flock 9
: >"$LOG"
if [ "${GPULAB_VERBOSE:-0}" = 1 ]; then exec 3> >(tee -a "$LOG" >&2); else exec 3>>"$LOG"; fi
step() { echo "=== $(date +%T) $*" >&3; }
WORK=$(mktemp -d /var/tmp/gpulab-image.XXXXXX)
ROOT="$WORK/root"
cleanup() {
    for m in "$ROOT/proc" "$ROOT/dev"; do mountpoint -q "$m" 2>/dev/null && umount -l "$m"; done
    rm -rf --one-file-system "$WORK"
}
fail() { echo "build-image: failed; last lines of $LOG:" >&2; tail -n 25 "$LOG" >&2; }
trap cleanup EXIT
trap fail ERR

in_chroot() {
    env -i PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
        chroot "$ROOT" "$@"
}

# Wheels for the chroot's interpreter, by hash: offline from the cache first, the index only for
# what is missing. The host's pip config (find-links, extra indexes) still applies.
platforms=()
for minor in $(seq 5 "$GLIBC_MINOR"); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
fetch_wheels() { # LOCK
    [ "$refresh" = 1 ] && [ -z "${refreshed:-}" ] && { rm -rf "$WHEELS"; mkdir -p "$WHEELS"; refreshed=1; }
    local args=(download -q --only-binary=:all: --no-deps --require-hashes --python-version "$CHROOT_PY"
        --implementation cp --abi cp311 "${platforms[@]}" -d "$WHEELS" -r "$1")
    [ -d "$LOCAL_WHEELS" ] && args+=(--find-links "$LOCAL_WHEELS")
    "$PYTHON" -m pip "${args[@]}" --no-index --find-links "$WHEELS" >&3 2>&3 \
        || "$PYTHON" -m pip "${args[@]}" >&3 2>&3
}
install_lock() { # LOCK: every wheel it pins, hash-checked, offline
    step "pip download $(basename "$1")"
    fetch_wheels "$1"
    mkdir -p "$ROOT/tmp/wheels"
    cp -l "$WHEELS"/*.whl "$ROOT/tmp/wheels/" 2>/dev/null || cp "$WHEELS"/*.whl "$ROOT/tmp/wheels/"
    cp "$1" "$ROOT/tmp/lock.txt"
    step "pip install --require-hashes $(basename "$1")"
    in_chroot /opt/venv/bin/pip install -q --no-index --find-links /tmp/wheels --no-deps \
        --require-hashes -r /tmp/lock.txt >&3 2>&3
    rm -rf "$ROOT/tmp/wheels" "$ROOT/tmp/lock.txt"
}
slim() {
    # rfc3987-syntax + lark compile a grammar at import (doubling start time); the hub's static
    # components are served by the hub, never by a single-user server.
    in_chroot /opt/venv/bin/pip uninstall -q -y rfc3987-syntax lark >&3 2>&3 || true
    rm -rf "$ROOT/opt/venv/share/jupyterhub/static/components" "$ROOT/root/.cache" \
        "$ROOT/var/cache/apt/archives/"*.deb "$ROOT/var/lib/apt/lists/"* "$ROOT/var/log/"*.log
    find "$ROOT/opt/venv" -name __pycache__ -path '*/tests/*' -prune -exec rm -rf {} + 2>/dev/null || true
    in_chroot /bin/sh -c 'chown -R jovyan:jovyan /opt/venv'
}

# -- the base layer: rootfs + venv + base lock + gpulab's files, cached as a tarball -----------
BASE_LAYER="$CACHE/layers/base-$base_key.tar"
build_base_layer() {
    if [ "$refresh" = 1 ] || [ ! -s "$BASE_TAR" ]; then
        step "debootstrap $SUITE minbase ($INCLUDE)"
        mkdir -p "$WORK/deb"
        debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$WORK/deb" "$MIRROR" >&3 2>&3
        rm -rf "$WORK/deb/var/cache/apt/archives/"*.deb "$WORK/deb/var/lib/apt/lists/"*
        tar --numeric-owner -C "$WORK/deb" -cf "$BASE_TAR.tmp" .
        mv -f "$BASE_TAR.tmp" "$BASE_TAR"
        rm -rf --one-file-system "$WORK/deb"
    fi
    step "unpack $BASE_TAR"
    mkdir -p "$ROOT"
    tar --numeric-owner -C "$ROOT" -xf "$BASE_TAR"
    rm -rf "$ROOT/usr/share/doc/"* "$ROOT/usr/share/man/"* "$ROOT/usr/share/info/"*
    find "$ROOT/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'C.*' -exec rm -rf {} + 2>/dev/null || true
    in_chroot /bin/sh -c 'getent group jovyan >/dev/null || groupadd -g 1000 jovyan;
        getent passwd jovyan >/dev/null || useradd -m -u 1000 -g 1000 -s /bin/bash jovyan' >&3 2>&3
    in_chroot /usr/bin/python3 -m venv /opt/venv >&3 2>&3
    install_lock "$HERE/locks/base.txt"
    step "gpulab's JupyterLab extension, seat cap hook, login-shell PATH"
    ext_wheel=$("$HERE/jupyterlab-gpulab/build.sh" | tail -n 1)
    cp "$ext_wheel" "$ROOT/tmp/"
    in_chroot /opt/venv/bin/pip install -q --no-index --no-deps "/tmp/$(basename "$ext_wheel")" >&3 2>&3
    rm -f "$ROOT/tmp/$(basename "$ext_wheel")"
    site=$(in_chroot /opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    install -m 0644 "$HERE/site/gpulab_seatcap.py" "$HERE/site/gpulab-seatcap.pth" "$ROOT$site/"
    # /etc/profile.d (login-shell PATH) and JupyterLab's page config (no "news" prompt that
    # would fetch from the internet)
    cp -r --no-preserve=ownership "$HERE/rootfs/." "$ROOT/"
    slim
    in_chroot /opt/venv/bin/python -c 'import jupyterhub.singleuser, jupyterlab, numpy, pandas, matplotlib, sklearn, nbgitpuller, jupyterlab_nvdashboard, jupyterlab_gpulab, gpulab_seatcap' >&3 2>&3
    step "cache $BASE_LAYER"
    tar --numeric-owner -C "$ROOT" -cf "$BASE_LAYER.tmp" .
    mv -f "$BASE_LAYER.tmp" "$BASE_LAYER"
    find "$CACHE/layers" -name 'base-*.tar' ! -name "$(basename "$BASE_LAYER")" -delete
}

import_image() { # IMAGE TAG LOCK [ENV...]
    local img=$1 tag=$2 lock=$3; shift 3
    local changes=(
        --change 'ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
        --change 'ENV LANG=C.UTF-8' --change 'ENV HOME=/home/jovyan' --change 'ENV SHELL=/bin/bash'
        --change 'USER jovyan' --change 'WORKDIR /home/jovyan' --change 'EXPOSE 8888'
        --change 'CMD ["jupyterhub-singleuser"]'
        --change "LABEL org.jupyter.gpulab.hub-version=$hub_version"
        --change "LABEL org.jupyter.gpulab.recipe=$(recipe_of "$img")"
    )
    for e in "$@"; do changes+=(--change "ENV $e"); done
    local archs=()
    if [ "$variant" != cpu ] && [ "$img" != base ]; then
        # what the installed framework says of its build (no GPU needed): its CUDA version
        # (cuda=12.6) and architecture list, which the labels trust over the per-release tables
        read -r -a archs < <(in_chroot /opt/venv/bin/python -c '
import importlib.util as u
if u.find_spec("torch"):
    import torch; print("cuda=" + (torch.version.cuda or ""), *torch._C._cuda_getArchFlags().split())
elif u.find_spec("tensorflow"):
    from tensorflow.python.platform import build_info as b
    print(" ".join(b.build_info.get("cuda_compute_capabilities", [])))
' 2>>"$LOG" || true)
    fi
    while IFS= read -r kv; do changes+=(--change "LABEL $kv"); done \
        < <("$PYTHON" -m jupyterhub_gpulab.lab.imagelabels labels "$img" "$variant" "$lock" "${archs[@]}")
    step "docker import $tag"
    local old_id
    old_id=$(docker image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
    tar --numeric-owner -C "$ROOT" -c . | docker import "${changes[@]}" \
        -m "gpulab $img image ($variant; jupyterhub $hub_version)" - "$tag" >&3 2>&3
    [ "$(label "$tag" org.jupyter.gpulab.recipe)" = "$(recipe_of "$img")" ] || die "docker import of $tag lost its labels"
    if [ -n "$old_id" ] && [ "$old_id" != "$(docker image inspect --format '{{.Id}}' "$tag")" ]; then
        docker image rm "$old_id" >&3 2>&3 || true
    fi
}

for img in "${todo[@]}"; do
    tag=$(tag_of "$img")
    lock=$(lockfile "$img")
    rm -rf --one-file-system "$ROOT"
    if [ "$refresh" = 1 ] || [ ! -s "$BASE_LAYER" ]; then
        build_base_layer
        refresh=0   # once per run
    else
        step "unpack $BASE_LAYER"
        mkdir -p "$ROOT"
        tar --numeric-owner -C "$ROOT" -xf "$BASE_LAYER"
    fi
    envs=()
    if [ "$img" != base ]; then
        install_lock "$lock"
        slim
        mod=torch; [ "$img" = tensorflow ] && mod=tensorflow
        step "import $mod"
        in_chroot /opt/venv/bin/python -c "import $mod" >&3 2>&3
        if [ "$img" = tensorflow ] && [ "$variant" = cuda ]; then
            # TensorFlow finds pip-installed CUDA libraries only on the loader's path, and XLA
            # needs ptxas: point both at the nvidia-* wheels' folders.
            site=$(in_chroot /opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
            libs=$(cd "$ROOT$site" && find nvidia -maxdepth 2 -type d -name lib | sort | sed "s|^|$site/|" | paste -sd:)
            envs+=("LD_LIBRARY_PATH=$libs")
            [ -d "$ROOT$site/nvidia/cuda_nvcc/bin" ] && envs+=("PATH=$site/nvidia/cuda_nvcc/bin:/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        fi
    fi
    # the framework's quiet start-up (TF_CPP_MIN_LOG_LEVEL, ...): jupyterhub_gpulab/lab/imageenv.py
    while IFS= read -r kv; do envs+=("$kv"); done < <("$PYTHON" -m jupyterhub_gpulab.lab.imageenv "$img")
    import_image "$img" "$tag" "$lock" "${envs[@]}"
done
step "done"
for img in "${images[@]}"; do tag_of "$img"; done

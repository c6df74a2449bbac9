#!/usr/bin/env bash
# build-singleuser.sh [--force] [--refresh-base] [TAG] — build the single-user image without a registry.
#
# Why: development and CI machines reach PyPI and Debian's apt mirror but no container registry,
# so `docker pull`/`docker build FROM …` are impossible .
# What: a Debian bookworm minbase rootfs (debootstrap, cached as a tarball under
# $GPULAB_CACHE_DIR, default /var/cache/gpulab) + a venv at /opt/venv holding
# jupyterhub==<the host's jupyterhub version> and jupyter_server (plus jupyterlab when
# GPULAB_IMAGE_LAB=1), installed offline from wheels downloaded on the host for the chroot's
# CPython 3.11.2 / glibc 2.36; user jovyan (uid/gid 1000); slimmed; then `docker import`ed with
# ENV/USER/WORKDIR/EXPOSE/CMD/LABEL changes.
#
# UI: without lab (the default: 270 MB, fast start) /user/<name>/ serves jupyter_server's own page
# "A Jupyter Server is running." plus the full /api (the single-user log warns "Found no extension
# with a default URL"); there is no ipykernel, so no kernels. GPULAB_IMAGE_LAB=1 (404 MB) adds
# jupyterlab (and with it ipykernel) plus git and nbgitpuller (course content): /user/<name>/
# redirects to /lab.
# Default TAG: gpulab/singleuser:<hub version> (…-lab with GPULAB_IMAGE_LAB=1).
# The build is skipped when TAG already exists with the same labels (hub version, lab flag and a
# hash of this recipe); --force rebuilds the image, --refresh-base also re-runs debootstrap and
# re-downloads the wheels (otherwise reused from the cache).
# Cold: ~70 s; with the cached rootfs: ~30 s. Concurrent runs serialise on a lock.
# Quiet on success except the last line of stdout, which is the tag. Needs root and a running
# Docker engine (scripts/ensure-docker.sh). GPULAB_VERBOSE=1 shows the build log on stderr.
set -euo pipefail

die() { echo "build-singleuser: $*" >&2; exit 1; }

force=0
refresh_base=0
tag=""
while [ $# -gt 0 ]; do
    case "$1" in
        --force) force=1 ;;
        --refresh-base) force=1; refresh_base=1 ;;
        -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
        -*) die "unknown option $1 (use --force, --refresh-base, or a TAG)" ;;
        *) [ -z "$tag" ] || die "only one TAG may be given"; tag=$1 ;;
    esac
    shift
done

[[ -z "$tag" || "$tag" =~ ^[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$ ]] \
    || die "invalid image tag '$tag' (lowercase repository[:tag], e.g. gpulab/singleuser:dev)"
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot)"
command -v debootstrap >/dev/null 2>&1 || die "debootstrap missing: apt-get install -y debootstrap"
timeout 10 docker info >/dev/null 2>&1 || die "the Docker engine does not answer; run scripts/ensure-docker.sh"

PYTHON=${PYTHON:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv/bin/python}
hub_version=$("$PYTHON" -c 'import jupyterhub; print(jupyterhub.__version__)') \
    || die "cannot import jupyterhub with $PYTHON; run scripts/ensure-venv.sh first"
lab=0
[ "${GPULAB_IMAGE_LAB:-0}" = 1 ] && lab=1
if [ -z "$tag" ]; then
    tag="gpulab/singleuser:$hub_version"
    [ "$lab" = 1 ] && tag="$tag-lab"
fi

SUITE=bookworm
MIRROR=${GPULAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
INCLUDE=python3,python3-venv,ca-certificates
# The lab variant is what courses pull content into: nbgitpuller shells out to git.
[ "$lab" = 1 ] && INCLUDE=$INCLUDE,git
# The chroot's interpreter and libc (bookworm): the wheels are chosen for these, not the host's.
CHROOT_PY=3.11.2
GLIBC_MINOR=36
recipe=$( { cat "$0"; echo "$lab"; } | sha256sum | cut -c1-16)

label() { docker image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true; }
image_current() {
    [ "$(label "$tag" org.jupyter.gpulab.hub-version)" = "$hub_version" ] \
        && [ "$(label "$tag" org.jupyter.gpulab.lab)" = "$lab" ] \
        && [ "$(label "$tag" org.jupyter.gpulab.recipe)" = "$recipe" ]
}

if [ "$force" = 0 ] && image_current; then
    echo "$tag"
    exit 0
fi

CACHE=${GPULAB_CACHE_DIR:-/var/cache/gpulab}
mkdir -p "$CACHE"
BASE_TAR="$CACHE/rootfs-$SUITE-minbase-$(echo "$INCLUDE" | sha256sum | cut -c1-8).tar"
WHEELS="$CACHE/wheels/cp311-$hub_version-lab$lab"
LOG="$CACHE/build-singleuser.log"

# One build at a time: others' test setups may call this concurrently.
exec 9>"$CACHE/build.lock"
flock 9
# Someone else may have built it while we waited for the lock.
if [ "$force" = 0 ] && image_current; then
    echo "$tag"
    exit 0
fi

: >"$LOG"
if [ "${GPULAB_VERBOSE:-0}" = 1 ]; then
    exec 3> >(tee -a "$LOG" >&2)
else
    exec 3>>"$LOG"
fi
step() { echo "=== $(date +%T) $*" >&3; }

WORK=$(mktemp -d /var/tmp/gpulab-singleuser.XXXXXX)
ROOT="$WORK/root"
cleanup() {
    # Never rm -rf through a live mount.
    for m in "$ROOT/proc" "$ROOT/dev"; do
        mountpoint -q "$m" 2>/dev/null && umount -l "$m"
    done
    rm -rf --one-file-system "$WORK"
}
fail() {
    echo "build-singleuser: failed building $tag; last lines of $LOG:" >&2
    tail -n 25 "$LOG" >&2
}
trap cleanup EXIT
trap fail ERR

# 1. Base rootfs (debootstrap is the slow part, ~45 s): cached as a tarball.
if [ "$refresh_base" = 1 ] || [ ! -s "$BASE_TAR" ]; then
    step "debootstrap $SUITE minbase"
    mkdir -p "$WORK/base"
    debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$WORK/base" "$MIRROR" >&3 2>&3
    rm -rf "$WORK/base/var/cache/apt/archives/"*.deb "$WORK/base/var/lib/apt/lists/"*
    tar --numeric-owner -C "$WORK/base" -cf "$BASE_TAR.tmp" .
    mv -f "$BASE_TAR.tmp" "$BASE_TAR"
    rm -rf --one-file-system "$WORK/base"
fi
step "unpack $BASE_TAR"
mkdir -p "$ROOT"
tar --numeric-owner -C "$ROOT" -xf "$BASE_TAR"
actual_py=$(chroot "$ROOT" /usr/bin/python3 -c 'import platform; print(platform.python_version())')
[ "$actual_py" = "$CHROOT_PY" ] \
    || step "note: chroot has Python $actual_py, wheels are chosen for $CHROOT_PY (ABI cp311 either way)"

# 2. Wheels for the chroot's interpreter, downloaded on the host once, then reused from the cache
#    (--refresh-base fetches current releases again).
step "pip download wheels for cp311 / glibc 2.$GLIBC_MINOR"
platforms=()
for minor in $(seq 5 "$GLIBC_MINOR"); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
reqs=("jupyterhub==$hub_version" jupyter_server)
[ "$lab" = 1 ] && reqs+=(jupyterlab nbgitpuller)
[ "$refresh_base" = 1 ] && rm -rf "$WHEELS"
mkdir -p "$WHEELS"
pip_download() {
    "$PYTHON" -m pip download -q --only-binary=:all: --python-version "$CHROOT_PY" --implementation cp \
        --abi cp311 "${platforms[@]}" -d "$WHEELS" "$@" "${reqs[@]}" >&3 2>&3
}
# Offline from the cache first (fast, reproducible); the index only when something is missing.
pip_download --no-index --find-links "$WHEELS" || pip_download
mkdir -p "$ROOT/tmp/wheels"
cp -l "$WHEELS"/*.whl "$ROOT/tmp/wheels/" 2>/dev/null || cp "$WHEELS"/*.whl "$ROOT/tmp/wheels/"

# 3. Install offline in the chroot. env -i: the host's PIP_* / PYTHON* variables must not leak in.
step "venv + pip install in chroot"
in_chroot() {
    env -i PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
        chroot "$ROOT" "$@"
}
in_chroot /usr/bin/python3 -m venv /opt/venv >&3 2>&3
in_chroot /opt/venv/bin/pip install -q --no-index --find-links /tmp/wheels "${reqs[@]}" >&3 2>&3
in_chroot /bin/sh -c 'getent group jovyan >/dev/null || groupadd -g 1000 jovyan;
    getent passwd jovyan >/dev/null || useradd -m -u 1000 -g 1000 -s /bin/bash jovyan' >&3 2>&3

# 4. Slimming (from the note): rfc3987-syntax + lark compile a grammar at import, doubling
# single-user start time; share/jupyterhub/static/components (~62 MB) is only served by the hub.
step "slim"
in_chroot /opt/venv/bin/pip uninstall -q -y rfc3987-syntax lark >&3 2>&3 || true
rm -rf "$ROOT/opt/venv/share/jupyterhub/static/components" "$ROOT/tmp/wheels" \
    "$ROOT/var/cache/apt/archives/"*.deb "$ROOT/var/lib/apt/lists/"* \
    "$ROOT/usr/share/doc/"* "$ROOT/usr/share/man/"* "$ROOT/usr/share/info/"* \
    "$ROOT/var/log/"*.log "$ROOT/root/.cache"
find "$ROOT/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'C.*' -exec rm -rf {} + 2>/dev/null || true
in_chroot /opt/venv/bin/python -c 'import jupyterhub.singleuser, jupyter_server' >&3 2>&3

# 5. Import as an image: no Dockerfile, no registry.
step "docker import $tag"
old_id=$(docker image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
tar --numeric-owner -C "$ROOT" -c . | docker import \
    --change 'ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV HOME=/home/jovyan' \
    --change 'ENV SHELL=/bin/bash' \
    --change 'USER jovyan' \
    --change 'WORKDIR /home/jovyan' \
    --change 'EXPOSE 8888' \
    --change 'CMD ["jupyterhub-singleuser"]' \
    --change "LABEL org.jupyter.gpulab.hub-version=$hub_version" \
    --change "LABEL org.jupyter.gpulab.lab=$lab" \
    --change "LABEL org.jupyter.gpulab.recipe=$recipe" \
    -m "gpulab single-user image (jupyterhub $hub_version, lab=$lab)" \
    - "$tag" >&3 2>&3
image_current || die "docker import of $tag did not produce the expected labels"
# The replaced image is now untagged: drop it unless a container still uses it.
if [ -n "$old_id" ] && [ "$old_id" != "$(docker image inspect --format '{{.Id}}' "$tag")" ]; then
    docker image rm "$old_id" >&3 2>&3 || true
fi
step "done"
echo "$tag"

#!/usr/bin/env bash
# install-nvidia-standin.sh — stand-ins for the two NVIDIA Container Toolkit programs a GPU host
# runs, for test engines on a machine without a GPU.
#
# Why: the toolkit is the one part of the GPU path this machine lacks. Docker reaches it two ways,
# and gpulab uses both:
#   * the engine's own "nvidia" device driver (moby 20.10 daemon/nvidia_linux.go, registered when
#     `nvidia-container-runtime-hook` is on dockerd's PATH): a container with a device request gets
#     NVIDIA_VISIBLE_DEVICES=<DeviceIDs> and an OCI prestart hook `nvidia-container-runtime-hook
#     prestart` (GPUDockerSpawner's device_request mode; scripts/ensure-gpusim-docker.sh);
#   * the `nvidia` runtime as the engine's default runtime (`"default-runtime": "nvidia"` in
#     daemon.json), a runc wrapper that, at `create`, adds the same prestart hook to every container
#     whose process environment sets NVIDIA_VISIBLE_DEVICES (Swarm tasks, which cannot carry device
#     requests: the Swarm backend; scripts/ensure-swarm.sh).
# The hook attaches the devices (nvidia-container-cli). Everything around it — the engine's device
# request handling, the runtime configuration, runc running the OCI hook — is the real thing.
#
# What, under /usr/local/lib/gpulab-gpusim (rewritten every run, atomically, so edits reach
# running engines):
#   * bin/nvidia-container-runtime-hook + hook.py: for `prestart` it reads the OCI state on stdin
#     and the bundle's config.json and appends {"container_id", "hostname", "NVIDIA_VISIBLE_DEVICES",
#     "NVIDIA_DRIVER_CAPABILITIES"} as one JSON line to /var/log/gpulab-gpusim-hook.jsonl (the
#     runtime below runs hook.py with a log of its own). It attaches nothing and
#     always exits 0 (its own errors go to /var/log/gpulab-gpusim-hook.err). "hostname" is the
#     runtime's UTS name: the Swarm node's, for the engines of scripts/ensure-swarm.sh;
#   * bin/nvidia-container-runtime + runtime.py: the runc wrapper. Its own option
#     `--gpulab-hook-log PATH` (a daemon.json runtimeArgs entry) names the hook's log; every other
#     argument goes to /usr/sbin/runc unchanged.
# Root only. Idempotent. Prints nothing on success.
set -euo pipefail

LIB=/usr/local/lib/gpulab-gpusim
BIN=$LIB/bin
HOOK_LOG=/var/log/gpulab-gpusim-hook.jsonl
HOOK_ERR=/var/log/gpulab-gpusim-hook.err

die() { echo "install-nvidia-standin: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (it writes $LIB)"
[ -x /usr/bin/python3 ] || die "/usr/bin/python3 is missing; the stand-ins need it"

install_file() {  # install_file MODE DEST, content on stdin
    local tmp
    tmp=$(mktemp "$2.XXXXXX")
    cat >"$tmp"
    chmod "$1" "$tmp"
    mv -f "$tmp" "$2"
}
mkdir -p "$BIN"

install_file 0755 "$BIN/nvidia-container-runtime-hook" <<EOF
#!/bin/sh
# Stand-in for the NVIDIA Container Toolkit's nvidia-container-runtime-hook, installed by
# jupyterhub-gpulab's scripts/install-nvidia-standin.sh for test engines on a machine without a GPU.
# For "prestart" it records which devices the container was given; it attaches nothing.
# It always exits 0: a test stub must never be the reason a container fails to start.
if [ "\${1:-}" = prestart ]; then
    timeout 10 /usr/bin/python3 $LIB/hook.py $HOOK_LOG 2>>$HOOK_ERR || true
fi
exit 0
EOF
install_file 0644 "$LIB/hook.py" <<'EOF'
"""Body of the stand-in nvidia-container-runtime-hook (see install-nvidia-standin.sh).

Reads the OCI state (JSON) on stdin, then the bundle's config.json, and appends one JSON line
{"container_id", "hostname", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"} to the log
named by argv[1].
"""
import json
import os
import socket
import sys


def main():
    state = json.load(sys.stdin)
    bundle = state.get("bundle") or state.get("bundlePath") or os.getcwd()
    with open(os.path.join(bundle, "config.json")) as f:
        config = json.load(f)
    env = {}
    for item in (config.get("process") or {}).get("env") or []:
        key, sep, value = item.partition("=")
        if sep:
            env[key] = value
    record = {
        "container_id": state.get("id"),
        "hostname": socket.gethostname(),
        "NVIDIA_VISIBLE_DEVICES": env.get("NVIDIA_VISIBLE_DEVICES"),
        "NVIDIA_DRIVER_CAPABILITIES": env.get("NVIDIA_DRIVER_CAPABILITIES"),
    }
    line = (json.dumps(record) + "\n").encode()
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write on an O_APPEND file: concurrent starts do not interleave
    finally:
        os.close(fd)


if __name__ == "__main__":
    main()
EOF

install_file 0755 "$BIN/nvidia-container-runtime" <<EOF
#!/bin/sh
# Stand-in for the NVIDIA Container Toolkit's nvidia-container-runtime (a runc wrapper), installed
# by jupyterhub-gpulab's scripts/install-nvidia-standin.sh. See $LIB/runtime.py.
exec /usr/bin/python3 -S $LIB/runtime.py "\$@"
EOF
install_file 0644 "$LIB/runtime.py" <<'EOF'
"""Body of the stand-in nvidia-container-runtime (see install-nvidia-standin.sh).

As the toolkit's runtime does in its legacy mode: at ``runc create``, when the container's process
environment sets NVIDIA_VISIBLE_DEVICES, add a prestart hook (the toolkit's is
``nvidia-container-runtime-hook prestart``; this one runs the stand-in hook's body) to the bundle's
config.json; then run runc with the same arguments. ``--gpulab-hook-log PATH`` (ours, from
daemon.json's runtimeArgs) is removed and names the log the hook writes to. A failure to patch is logged and never stops the container.
"""
import json
import os
import sys

RUNC = "/usr/sbin/runc"
HOOK_PY = "/usr/local/lib/gpulab-gpusim/hook.py"
LOG = "/var/log/gpulab-gpusim-hook.jsonl"
ERR = "/var/log/gpulab-gpusim-hook.err"


def split(argv):
    log, rest, i = None, [], 0
    while i < len(argv):
        a = argv[i]
        if a == "--gpulab-hook-log" and i + 1 < len(argv):
            log, i = argv[i + 1], i + 2
            continue
        if a.startswith("--gpulab-hook-log="):
            log = a.split("=", 1)[1]
        else:
            rest.append(a)
        i += 1
    return log, rest


def bundle_of(args):
    after = args[args.index("create") + 1 :]
    for i, a in enumerate(after):
        if a in ("--bundle", "-b") and i + 1 < len(after):
            return after[i + 1]
        if a.startswith("--bundle="):
            return a.split("=", 1)[1]
    return os.getcwd()


def patch(bundle, log):
    path = os.path.join(bundle, "config.json")
    with open(path) as f:
        config = json.load(f)
    env = (config.get("process") or {}).get("env") or []
    if not any(e.startswith("NVIDIA_VISIBLE_DEVICES=") for e in env):
        return
    # the toolkit adds `nvidia-container-runtime-hook prestart`; the stand-in hook's body is
    # called directly, with the node's own log
    hook = {"path": "/usr/bin/python3", "args": ["python3", HOOK_PY, log or LOG]}
    config.setdefault("hooks", {}).setdefault("prestart", []).append(hook)
    tmp = path + ".gpulab"
    with open(tmp, "w") as f:
        json.dump(config, f)
    os.replace(tmp, path)


def main():
    log, args = split(sys.argv[1:])
    if "create" in args:
        try:
            patch(bundle_of(args), log)
        except Exception as e:  # never the reason a container fails to start
            with open(ERR, "a") as f:
                f.write(f"nvidia-container-runtime stand-in: {e!r}\n")
    os.execv(RUNC, [RUNC, *args])


main()
EOF

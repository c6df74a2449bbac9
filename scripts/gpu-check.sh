#!/usr/bin/env bash
# gpu-check.sh [SLICE_UUID] — the real-GPU check of the framework images (issue 10, item 7).
#
# Run on a host with an NVIDIA GPU, its driver and the NVIDIA Container Toolkit, as root, from
# a clone (no GPU on the development and CI machines: there it only says so and exits 2).
#  1. picks a slice from NVML, as gpulab's inventory reads it (the first MIG instance, else the
#     first GPU; or SLICE_UUID, a GPU-… or MIG-… UUID), and the PyTorch variant it can run, by
#     the gate gpulab uses at claim time (compute capability, driver) on the CUDA 13 image's
#     labels (its CUDA facts, imagelabels.facts_labels): `cuda` where the gate lets it on,
#     else `cuda12-legacy` (CUDA 12.6 wheels from sm_50: Pascal and Volta such as a Tesla P40,
#     or a driver before R580); GPU_CHECK_VARIANT overrides the choice;
#  2. builds that PyTorch image (images/build-image.sh --variant VARIANT base pytorch; several
#     GB the first time) and checks the built image's own labels against the slice with the
#     same gate: where it still refuses (a GPU older than either build, a driver too old), the
#     JSON says "ok": false with the gate's reason, since nothing could be checked;
#  3. starts a container with a Docker device request for that one UUID (`--gpus device=UUID`,
#     what GPUDockerSpawner sends) and, in it: torch.cuda.device_count() == 1, the device's
#     name and memory are the slice's (NVML's figures), a matmul on the GPU matches the CPU's,
#     and with GPULAB_SEAT_MEMORY_BYTES = 1 GiB an allocation of 2 GiB fails while 256 MiB works
#     (the seat cap hook), and without the variable the same 2 GiB allocation works;
#  4. the host-side seat check (issue 23 items 3 and 5): a process in a seat of 1 GiB (the
#     framework hook's variable set) allocates 2 GiB through CUDA directly (ctypes on
#     libcuda's cuMemAlloc: no framework, so no framework cap); the host reads NVML's
#     per-process memory once a second (gpulab's own reader), maps the process to its
#     container through /proc/<pid>/cgroup, and gpulab's seat-guard decision must order it
#     ended within the grace (GPU_CHECK_GRACE, default 5 s, plus one read); the process is then
#     ended as the service does (the shell's kill in the container) and must be gone.
#  5. only when GPU_CHECK_MIG_LAYOUT names a layout (e.g. 2x3g.40gb) and the slice is a MIG
#     instance: the layout round trip of `gpulab mig-layout` (issue 22), gpulab's
#     miglayout.round_trip: the GPU re-laid to that layout and back to the one found, each read
#     back from NVML; refused, changing nothing, while a process holds an instance. Never set
#     it on a machine whose GPU settings you may not change (the device tool's lent machines).
# Without GPU_CHECK_MIG_LAYOUT it never changes the GPU's settings (no MIG mode or instance
# changes, no resets, no clocks); with it, only the MIG instances, never MIG mode.
# The last line of stdout is one JSON object with the results; exit 0 when every check passed.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }; then
    echo '{"ran": false, "why": "no NVIDIA GPU or driver on this host (nvidia-smi -L failed)"}'
    exit 2
fi
PYTHON=$(scripts/ensure-venv.sh | tail -n 1)
scripts/ensure-docker.sh
# Step 1: which variant this GPU can run (its last line: the variant; or a JSON line and exit 1)
picked=$("$PYTHON" - "${1:-}" "${GPU_CHECK_VARIANT:-}" <<'PICK'
import json, sys

from jupyterhub_gpulab.inventory import discover
from jupyterhub_gpulab.lab.imagelabels import facts_labels
from jupyterhub_gpulab.lab.images import device_problem, requirements_from_labels

wanted, forced = sys.argv[1], sys.argv[2]
inv = discover()
slices = [s for s in inv.slices if s.kind.value in ("mig", "gpu")]
pick = next((s for s in slices if s.visible_id == wanted), None) if wanted else (
    next((s for s in slices if s.kind.value == "mig"), None) or (slices[0] if slices else None))
if pick is None:
    print(json.dumps({"ran": True, "ok": False, "checked": False,
                      "why": f"no slice {wanted or ''} in NVML's inventory: {list(inv.warnings)}"}))
    sys.exit(1)
if forced:
    print(forced)
    sys.exit(0)
cuda13 = requirements_from_labels("cuda13", facts_labels("torch", 13))
why = device_problem(cuda13, pick.describe(), pick.compute_capability, pick.driver_version)
if why:
    print(f"gpu-check: the CUDA 13 PyTorch cannot run here ({why}): cuda12-legacy", file=sys.stderr)
print("cuda12-legacy" if why else "cuda")
PICK
) || { printf '%s\n' "$picked" | tail -n 1; exit 1; }
variant=$(printf '%s\n' "$picked" | tail -n 1)
case "$variant" in cuda|cuda12-legacy) ;; *)
    echo "{\"ran\": true, \"ok\": false, \"checked\": false, \"why\": \"no PyTorch variant $variant (use cuda or cuda12-legacy)\"}"
    exit 1 ;;
esac
# Step 2: build it
echo "gpu-check: building the $variant PyTorch image (first time: several GB)" >&2
image=$(images/build-image.sh --variant "$variant" base pytorch | tail -n 1)
"$PYTHON" - "$image" "${1:-}" "$variant" <<'EOF'
import json, os, subprocess, sys

from jupyterhub_gpulab.inventory import discover
from jupyterhub_gpulab.lab.images import device_problem, requirements_from_labels

image, wanted, variant = sys.argv[1], sys.argv[2], sys.argv[3]
inv = discover()
slices = [s for s in inv.slices if s.kind.value in ("mig", "gpu")]
pick = next((s for s in slices if s.visible_id == wanted), None) if wanted else (
    next((s for s in slices if s.kind.value == "mig"), None) or (slices[0] if slices else None))
result = {"ran": True, "image": image, "variant": variant,
          "driver": inv.devices[0].driver_version if inv.devices else None}
if pick is None:
    print(json.dumps({**result, "ok": False, "checked": False,
                      "why": f"no slice {wanted or ''} in {inv.warnings}"}))
    sys.exit(1)
labels = json.loads(subprocess.run(["docker", "image", "inspect", "--format",
                                    "{{json .Config.Labels}}", image], capture_output=True,
                                   text=True, check=True).stdout)
need = requirements_from_labels(image, labels)
problem = device_problem(need, pick.describe(), pick.compute_capability, pick.driver_version)
result.update(slice=pick.visible_id, slice_kind=pick.kind.value, name=pick.device_name,
              memory_bytes=pick.memory_bytes, compute_capability=pick.compute_capability,
              needs=need.describe(), gate=problem or "serves")
if problem:  # the gate keeps the image off this slice: a claim would skip it, nothing to run
    print(json.dumps({**result, "ok": False, "checked": False,
                      "why": f"nothing was checked: the gate keeps {image} off this GPU ({problem})"}))
    sys.exit(1)
CHECK = r'''
import json, os, torch
out = {"device_count": torch.cuda.device_count()}
p = torch.cuda.get_device_properties(0)
out.update(torch_name=p.name, torch_memory=p.total_memory)
a = torch.randn(1024, 1024)
b = torch.randn(1024, 1024)
out["matmul_ok"] = bool(torch.allclose((a.cuda() @ b.cuda()).cpu(), a @ b, atol=1e-2, rtol=1e-3))
def alloc(n):
    try:
        x = torch.empty(n, dtype=torch.uint8, device="cuda"); del x; torch.cuda.empty_cache(); return True
    except torch.OutOfMemoryError:
        return False
out["small_ok"] = alloc(256 * 2**20)
out["big_ok"] = alloc(2 * 2**30)
print(json.dumps(out))
'''
DIRECT = r'''
import ctypes, time
cuda = ctypes.CDLL("libcuda.so.1")
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
rc = cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(dev), 0) or cuda.cuCtxCreate_v2(
    ctypes.byref(ctx), 0, dev) or cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(2 * 2**30))
print("alloc", rc, flush=True)
time.sleep(600)
'''


def host_check(image, pick):
    """Step 4 of the header: gpulab's host-side reader and seat-guard decision on a real GPU."""
    import os, time
    from datetime import datetime, timezone

    from jupyterhub_gpulab.fairuse.seatguard import DeviceRead, HeldSeat, HostProcess, judge
    from jupyterhub_gpulab.inventory.nvml_sampling import process_utilization
    from jupyterhub_gpulab.service.monitor import container_of_pid
    from jupyterhub_gpulab.service.seatguard import KILL, container_pid, process_uid

    grace = float(os.environ.get("GPU_CHECK_GRACE", "5"))
    out = {"grace_s": grace, "direct_alloc_rc": None, "seen_in_container": False,
           "verdict": None, "caught_after_s": None, "ended": False, "reads": 0}
    # --init: as in a server, the offending process is not its container's pid 1 (which a kill
    # from inside its namespace cannot end)
    cid = subprocess.run(["docker", "run", "-d", "--init", "--gpus", f"device={pick.visible_id}",
                          "-e", f"GPULAB_SEAT_MEMORY_BYTES={2**30}", image, "python", "-c",
                          DIRECT], capture_output=True, text=True, check=True).stdout.strip()
    try:
        for _ in range(60):  # the allocation is made before the host looks
            logs = subprocess.run(["docker", "logs", cid], capture_output=True, text=True).stdout
            if "alloc" in logs:
                out["direct_alloc_rc"] = int(logs.split("alloc", 1)[1].split()[0])
                break
            time.sleep(0.5)
        seat = HeldSeat("gpu-check/seat-0", pick.device_uuid, 2**30, cid, "gpu-check")
        reads, first_over, verdict = [], None, None
        started = time.monotonic()
        while time.monotonic() - started < grace + 30:
            report = process_utilization({pick.visible_id: 0})[pick.visible_id]
            now = datetime.now(timezone.utc)
            procs = tuple(
                HostProcess(pid, container_of_pid(pid), p.memory_used_bytes)
                for pid, p in sorted((report.processes if report else {}).items())
            )
            reads.append(DeviceRead(now, bool(report and report.memory_readable), procs))
            out["seen_in_container"] |= any(p.container == cid for p in procs)
            verdict = judge(seat, reads, now, grace_s=grace)
            if verdict.action != "ok" and first_over is None:
                first_over = time.monotonic()
            if verdict.action in ("kill", "soft"):
                break
            time.sleep(1.0)
        out.update(reads=len(reads), verdict=verdict.action if verdict else None,
                   processes=[[p.pid, (p.container or "")[:12], p.memory_bytes]
                              for p in (reads[-1].processes if reads else ())])
        if verdict is not None and verdict.action == "kill" and first_over is not None:
            out["caught_after_s"] = round(time.monotonic() - first_over, 2)
            for pid in verdict.pids:
                inner = container_pid(pid)
                if inner is not None:
                    uid = str(process_uid(pid) or 0)  # as the service does
                    subprocess.run(["docker", "exec", "-u", uid, cid, *KILL, str(inner)],
                                   capture_output=True)
            time.sleep(2)
            out["ended"] = all(container_of_pid(pid) != cid for pid in verdict.pids)
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
    return out


runs = {}
for label, env in (("capped", ["-e", f"GPULAB_SEAT_MEMORY_BYTES={2**30}"]), ("uncapped", [])):
    r = subprocess.run(["docker", "run", "--rm", "--gpus", f"device={pick.visible_id}", *env,
                        image, "python", "-c", CHECK], capture_output=True, text=True)
    if r.returncode:
        print(json.dumps({**result, "ok": False, "checked": True, "why": r.stderr[-2000:]}))
        sys.exit(1)
    runs[label] = json.loads(r.stdout.strip().splitlines()[-1])
c, u = runs["capped"], runs["uncapped"]
host = host_check(image, pick)
checks = {
    "one_device": c["device_count"] == 1,
    "name_matches": pick.device_name.split(" MIG ")[0] in c["torch_name"],
    # CUDA reports a little less than NVML's total (its own reservations): within 5 %
    "memory_matches": abs(c["torch_memory"] - pick.memory_bytes) <= 0.05 * pick.memory_bytes,
    "matmul": c["matmul_ok"],
    "seat_cap_refuses_over_cap": c["small_ok"] and not c["big_ok"],
    "uncapped_allocates": u["big_ok"] or pick.memory_bytes < 3 * 2**30,
    "direct_alloc_passes_framework_cap": host["direct_alloc_rc"] == 0,
    "host_maps_process_to_container": host["seen_in_container"],
    "host_catches_direct_alloc_within_grace": host["verdict"] == "kill"
    and host["caught_after_s"] is not None
    and host["caught_after_s"] <= host["grace_s"] + 2.0,
    "host_kill_ends_it": host["ended"],
}
# 5. opt-in only (GPU_CHECK_MIG_LAYOUT, e.g. 2x3g.40gb): re-lay the slice's GPU and back
layout = os.environ.get("GPU_CHECK_MIG_LAYOUT", "")
if layout and pick.kind.value == "mig":
    from jupyterhub_gpulab.inventory.miglayout import LayoutError, LayoutRefused, round_trip

    try:
        result["mig_layout"] = round_trip(None, pick.device_uuid, layout)
    except (LayoutError, LayoutRefused) as e:
        result["mig_layout"] = {"ok": False, "why": str(e)}
    checks["mig_layout_round_trip"] = result["mig_layout"]["ok"]
print(json.dumps({**result, "runs": runs, "host": host, "checks": checks, "checked": True,
                  "ok": all(checks.values())}))
sys.exit(0 if all(checks.values()) else 1)
EOF

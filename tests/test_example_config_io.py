"""Loading the example ``jupyterhub_config.py`` does no I/O: it runs in the hub, the gpulab service
and every ``gpulab`` command, so it must write nothing, connect nowhere and ask no driver while it
loads; what needs those happens in the process that reads the setting (hub/demo.py).

Engine-free and driver-free: a real Python process loads the real file under an audit hook
(``sys.addaudithook``: CPython's own events for every open, mkdir, socket connect and ctypes
library load), with the Docker socket and the state folder pointed at paths that do not exist."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: Runs in the child: records the I/O events of loading the file, then (``--read``) of the first
#: configurable that reads the lab's settings, as the hub's spawner or the service would.
PROBE = r"""
import json, os, sys
events = []
WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def hook(event, args):
    if event == "open":
        path, mode, flags = args
        if (isinstance(mode, str) and set(mode) & set("wax+")) or (flags or 0) & WRITE:
            events.append(["write", str(path)])
    elif event in ("os.mkdir", "os.rename", "os.remove", "os.chmod"):
        events.append([event, str(args[0])])
    elif event in ("socket.connect", "socket.getaddrinfo"):
        events.append([event, str(args[1])])
    elif event == "ctypes.dlopen":
        events.append([event, str(args[0])])
    elif event == "subprocess.Popen":
        events.append([event, str(args[0])])


from jupyterhub_gpulab.lab.config import load_config_file  # imports before the hook

sys.addaudithook(hook)
c = load_config_file(sys.argv[1])
loaded = list(events)
read = {}
if "--read" in sys.argv:
    from jupyterhub_gpulab.lab.config import GPULab

    lab = GPULab(config=c)
    read = {"inventory_source": lab.inventory_source, "profiles": len(lab.profiles)}
    read["events"] = events[len(loaded):]
    from jupyterhub_gpulab.inventory import discover

    read["devices"] = len(discover().devices)
print(json.dumps({"load": loaded, "read": read}))
"""


def probe(tmp_path: Path, *extra: str, **env: str) -> dict:
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("GPULAB_", "DOCKER_"))}
    child_env.update(
        PYTHONDONTWRITEBYTECODE="1",  # no .pyc written on the way
        DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock",  # a connection would fail, recorded
        GPULAB_STATE_DIR=str(tmp_path / "state"),
        HOME=str(tmp_path / "home"),
        **env,
    )
    r = subprocess.run(
        [sys.executable, "-c", PROBE, str(REPO / "jupyterhub_config.py"), *extra],
        cwd=tmp_path, env=child_env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_loading_the_example_config_writes_nothing_connects_nowhere_asks_no_driver(tmp_path):
    """No GPULAB_DEMO: whether this is the demo lab is NVML's to say, and NVML is not asked."""
    out = probe(tmp_path)
    assert out["load"] == []
    assert not (tmp_path / "state").exists()
    assert sorted(os.listdir(tmp_path)) == []


def test_in_sso_mode_too(tmp_path):
    out = probe(tmp_path, GPULAB_DEMO_AUTH="oidc", GPULAB_DEMO="1")
    assert out["load"] == []
    assert sorted(os.listdir(tmp_path)) == []


def test_the_first_process_that_reads_the_lab_asks_nvml_and_makes_the_state_folder(tmp_path):
    """The deferred settings resolve where a configurable reads them: NVML is loaded then, the
    lab is the declared demo exactly where NVML sees no GPU, and the state folder is made
    (0700: databases and secrets are the hub's user's alone)."""
    out = probe(tmp_path, "--read")
    assert out["load"] == []
    read = out["read"]
    assert any(e[0] == "ctypes.dlopen" and "nvidia-ml" in e[1] for e in read["events"]), read
    assert read["inventory_source"] == ("nvml" if read["devices"] else "declared")
    assert read["profiles"] == 4
    state = tmp_path / "state"
    assert state.is_dir() and state.stat().st_mode & 0o777 == 0o700

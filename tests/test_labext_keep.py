"""The JupyterLab extension's part of Keep and Move to CPU, engine-free: the status bar's line
carries this server's GPU-idle warning (the one it offers the two buttons for), and the server
extension asks the service for this very server. The modules are read from the extension's
source (``images/jupyterlab-gpulab``), without JupyterLab: summary.py is pure; handlers.py's
path builder is called with stand-ins for jupyter_server's base handler."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "images" / "jupyterlab-gpulab"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(
        f"labext_{name}", SRC / "jupyterlab_gpulab" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


summary = _load("summary")

WARNING = {
    "user": "ann",
    "server_name": "",
    "rule": "gpu-idle",
    "kind": "warning",
    "message": "Your server will be stopped at 14:17 UTC: its GPU has been idle …",
    "due_at": "2026-12-03T14:17:00+00:00",
}


def test_the_status_bar_shows_this_servers_gpu_idle_warning():
    me = {"servers": [{"name": ""}], "warnings": [WARNING], "gpu_hours": {}}
    line = summary.summarise(me, "", {})
    assert line["warning"] == {"message": WARNING["message"], "due_at": WARNING["due_at"]}
    assert line["level"] == "warn" and line["title"].startswith(WARNING["message"])


@pytest.mark.parametrize(
    "warning",
    [
        pytest.param({**WARNING, "server_name": "other"}, id="another-server"),
        pytest.param({**WARNING, "rule": "idle"}, id="another-rule"),
        pytest.param({**WARNING, "rule": "culled:gpu-idle", "kind": "stopped"}, id="a-notice"),
    ],
)
def test_no_buttons_for_another_servers_or_rules_warning(warning):
    line = summary.summarise({"servers": [], "warnings": [warning]}, "", {})
    assert line["warning"] is None and line["level"] == "ok"


def test_the_server_extension_asks_for_this_very_server(monkeypatch):
    # stand-ins for jupyter_server's APIHandler (not installed in the hub's venv)
    base = types.ModuleType("jupyter_server.base.handlers")
    base.APIHandler = type("APIHandler", (), {})
    for name, mod in {
        "jupyter_server": types.ModuleType("jupyter_server"),
        "jupyter_server.base": types.ModuleType("jupyter_server.base"),
        "jupyter_server.base.handlers": base,
    }.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setitem(sys.modules, "labext_pkg.summary", summary)
    source = (SRC / "jupyterlab_gpulab" / "handlers.py").read_text()
    module = types.ModuleType("labext_handlers")
    exec(compile(source.replace("from .summary", "from labext_pkg.summary"), "handlers.py", "exec"),
         module.__dict__)  # fmt: skip
    assert module.action_path("ann", "", "keep") == "users/ann/server/keep"
    assert (
        module.action_path("a b", "dl/1", "move-to-cpu") == "users/a%20b/servers/dl%2F1/move-to-cpu"
    )


@pytest.mark.parametrize(
    "env, every", [({}, 60), ({"GPULAB_STATUS_REFRESH_S": "5"}, 5),
                   ({"GPULAB_STATUS_REFRESH_S": "soon"}, 60), ({"GPULAB_STATUS_REFRESH_S": "0"}, 1)],
)  # fmt: skip
def test_the_status_bar_asks_as_often_as_the_server_says(env, every):
    assert summary.summarise({}, "", env)["refresh_s"] == every

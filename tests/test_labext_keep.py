"""The JupyterLab extension's part of Keep and Move to CPU, engine-free: the status bar's line
carries this server's GPU-idle warning (the one it offers the two buttons for), and the server
extension asks the service for this very server. The modules are read from the extension's
source (``images/jupyterlab-gpulab``), without JupyterLab: summary.py is pure; handlers.py's
path builder and the interaction report's reading are called with stand-ins for
jupyter_server's base handler."""

from __future__ import annotations

import importlib.util
import sys
import types
from datetime import datetime, timedelta, timezone
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


@pytest.fixture
def handlers(monkeypatch):
    """handlers.py, with stand-ins for jupyter_server's APIHandler (not in the hub's venv)."""
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
    return module


def test_the_server_extension_asks_for_this_very_server(handlers):
    assert handlers.action_path("ann", "", "keep") == "users/ann/server/keep"
    assert (
        handlers.action_path("a b", "dl/1", "move-to-cpu")
        == "users/a%20b/servers/dl%2F1/move-to-cpu"
    )
    assert handlers.action_path("ann", "", "interaction") == "users/ann/server/interaction"


NOW = datetime(2026, 12, 7, 10, 0, tzinfo=timezone.utc)


def test_the_page_s_report_becomes_the_time_of_the_last_keystroke_on_the_server_s_clock(handlers):
    # the page says how long ago (its own clock may be off); the server dates it
    assert handlers.interaction_time(b'{"idle_s": 42.5}', NOW) == NOW - timedelta(seconds=42.5)
    assert handlers.interaction_time(b'{"idle_s": 0}', NOW) == NOW


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"[1]", id="not-an-object"),
        pytest.param(b'{"idle_s": "5"}', id="text"),
        pytest.param(b'{"idle_s": true}', id="boolean"),
        pytest.param(b'{"idle_s": -1}', id="in-the-future"),
        pytest.param(b'{"idle_s": 3601}', id="over-an-hour-old"),
        pytest.param(b'{"idle_s": NaN}', id="nan"),
        pytest.param(b"{", id="not-json"),
    ],
)
def test_a_report_that_says_no_recent_interaction_is_refused(handlers, body):
    assert handlers.interaction_time(body, NOW) is None


@pytest.mark.parametrize(
    "env, every", [({}, 60), ({"GPULAB_STATUS_REFRESH_S": "5"}, 5),
                   ({"GPULAB_STATUS_REFRESH_S": "soon"}, 60), ({"GPULAB_STATUS_REFRESH_S": "0"}, 1)],
)  # fmt: skip
def test_the_status_bar_asks_as_often_as_the_server_says(env, every):
    assert summary.summarise({}, "", env)["refresh_s"] == every

"""What a test hub process uses in place of hardware and wall-clock time, installed from its
``jupyterhub_config.py`` by :func:`config_snippet` (only where ``$GPULAB_TEST_HUB_FAKES`` is set,
so the test process loading the same file for its in-process service is untouched):

- ``pynvml`` is the fake mixed lab (``fake_nvml.FakeNVML.mixed_lab()``), the same one the
  in-process service is handed, so hub and service see one lab, as on a GPU host;
- ``jupyterhub_gpulab.clock.utcnow`` reads the time the test writes to ``CLOCK_FILE`` next to
  the config (the ``at`` fixture's ``clock_file``, ``clock_support.py``), and real time while there is none.

Keep this module's imports small: it runs inside the hub.
"""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

ENV = "GPULAB_TEST_HUB_FAKES"
CLOCK_FILE = "gpulab_now"
TESTS = Path(__file__).resolve().parent


def install(config_file: str) -> None:
    from fake_nvml import FakeNVML

    from jupyterhub_gpulab import clock

    sys.modules["pynvml"] = FakeNVML.mixed_lab()
    path = Path(config_file).with_name(CLOCK_FILE)
    real = clock.utcnow

    def utcnow() -> datetime:
        try:
            return datetime.fromisoformat(path.read_text())
        except (OSError, ValueError):
            return real()

    clock.utcnow = utcnow


def config_snippet() -> str:
    """The lines a test hub's config ends with."""
    return f"""
import os
if os.environ.get({ENV!r}):
    import sys
    sys.path.insert(0, {str(TESTS)!r})
    import hub_fakes
    hub_fakes.install(__file__)
"""

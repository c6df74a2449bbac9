"""Reading dcgm-exporter's job-mapping folder as dcgm-exporter does.

:func:`dcgm_read` follows dcgm-exporter's ``hpcMapper`` (``internal/pkg/transformation/hpc.go`` at
NVIDIA/dcgm-exporter d5e5f51): regular files named ``<GPU>`` or ``<GPU>.<GPU instance id>``
(:data:`VALID`: ``^\\d+(\\.\\d+)?$``), one job per line (Go's ``bufio.Scanner``: lines split at
``\\n``, a trailing ``\\r`` dropped); every other name is skipped.
"""

from __future__ import annotations

import re
from pathlib import Path

#: the file names dcgm-exporter reads: a GPU index, or a GPU index and a GPU instance id
VALID = re.compile(r"^\d+(\.\d+)?$")


def dcgm_read(folder: Path) -> dict[str, list[str]]:
    """``{file name: [job, …]}`` of the job map in ``folder``, as dcgm-exporter reads it."""
    found = {}
    for entry in folder.iterdir():
        if entry.is_dir() or not VALID.match(entry.name):
            continue
        found[entry.name] = [line.removesuffix("\r") for line in entry.read_text().split("\n")]
        if found[entry.name] and found[entry.name][-1] == "":
            found[entry.name].pop()  # the Scanner yields no empty token after a final newline
    return found

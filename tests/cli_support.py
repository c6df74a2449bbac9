"""What the ``gpulab`` command's tests write: a ``jupyterhub_config.py`` an admin would, and the
small set of profiles (CPU, a 1g.5gb MIG slice, a T4 seat) that fits ``ledger_support.LAB``."""

from __future__ import annotations

from pathlib import Path

IMG = "quay.io/jupyter/base-notebook"
PROFILES = [
    {"slug": "cpu", "display_name": "CPU only", "image": IMG, "default": True},
    {
        "slug": "mig-small",
        "display_name": "MIG 1g.5gb",
        "image": IMG,
        "slice": {"kind": "mig", "mig_profile": "1g.5gb"},
    },
    {"slug": "seat", "display_name": "Shared T4 seat", "image": IMG, "slice": {"kind": "shared"}},
]


def write_config(directory: Path, body: str, name: str = "jupyterhub_config.py") -> Path:
    """``directory/name`` holding ``c = get_config()`` then ``body`` (config lines); its path."""
    path = directory / name
    path.write_text("c = get_config()  # noqa: F821\n" + body)
    return path

"""What every ``gpulab`` subcommand shares: the configuration file it reads, the lab and the
ledger that file describes."""

from __future__ import annotations

from pathlib import Path

from traitlets.config import Config

from ..lab.config import GPULab, Lab, load_config_file

DEFAULT_CONFIG = "jupyterhub_config.py"


def _config(path: str | None) -> Config:
    if path is None:
        return load_config_file(DEFAULT_CONFIG) if Path(DEFAULT_CONFIG).is_file() else Config()
    return load_config_file(path)


def _lab(args) -> Lab:
    return GPULab(config=_config(args.config)).load()


def _ledger(args):
    from ..ledger import Ledger

    gl = GPULab(config=_config(args.config))
    return Ledger(gl.db_url, auto_upgrade=False)

"""jupyterhub-gpulab: GPU slices for JupyterHub users, allocated fairly and never twice."""

from ._version import __version__

__all__ = ["__version__", "GPUDockerSpawner", "configure"]


def __getattr__(name: str):
    # The spawner pulls in dockerspawner and docker-py; import it only when asked for, so the
    # CLI, ledger and service stay light.
    if name == "GPUDockerSpawner":
        from .spawner import GPUDockerSpawner

        return GPUDockerSpawner
    if name == "configure":  # jupyterhub_config.py's one call (hub/wiring.py)
        from .hub.wiring import configure

        return configure
    raise AttributeError(name)

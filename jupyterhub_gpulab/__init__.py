"""jupyterhub-gpulab: GPU slices for JupyterHub users, allocated fairly and never twice."""

from ._version import __version__

__all__ = ["__version__", "GPUDockerSpawner"]


def __getattr__(name: str):
    # The spawner pulls in dockerspawner and docker-py; import it only when asked for, so the
    # CLI, ledger and service stay light.
    if name == "GPUDockerSpawner":
        from .spawner import GPUDockerSpawner

        return GPUDockerSpawner
    raise AttributeError(name)

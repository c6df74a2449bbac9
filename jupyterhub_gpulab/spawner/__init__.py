"""The GPU-aware spawner: ``GPUDockerSpawner`` and its pure helpers (names, container, form)."""

from .gpudocker import GPUDockerSpawner

__all__ = ["GPUDockerSpawner"]

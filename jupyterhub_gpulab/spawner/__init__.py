"""The spawner, run inside the JupyterHub process.

- :mod:`.core`: the backend-neutral core (:class:`~.core.SliceSpawnerCore`: profile choice,
  entitlement, budget, claim, release on every exit path, progress, state, adoption), with
  :mod:`.reserve` (budget and claim in one ledger trip) and :mod:`.adoption`;
- the Docker backend: :mod:`.gpudocker` (``GPUDockerSpawner``), :mod:`.recovery` and
  :mod:`.labguard` (container checks), :mod:`.engine` (the engine survey), :mod:`.network`;
- :mod:`.reconcile` (the continuous reconcile pass), :mod:`.runtime` (one lab per hub process);
- pure helpers: :mod:`.container` (device request, env, labels), :mod:`.names`, :mod:`.form`
  (and ``templates/gpulab_form.html``), :mod:`.formmixin`, :mod:`.hardenmixin`, :mod:`.logs`.

``GPUDockerSpawner`` is imported on first use (``jupyterhub_gpulab.spawner.GPUDockerSpawner``, the
``gpulab`` entry point), so importing the core does not load dockerspawner and docker-py.
"""

__all__ = ["GPUDockerSpawner"]


def __getattr__(name: str):
    if name == "GPUDockerSpawner":
        from .gpudocker import GPUDockerSpawner

        return GPUDockerSpawner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The spawner, run inside the JupyterHub process.

- :mod:`.core`: the backend-neutral core (:class:`~.core.SliceSpawnerCore`: profile choice,
  entitlement, budget, claim, release on every exit path, progress, state, adoption), with
  :mod:`.reserve` (budget and claim in one ledger trip) and :mod:`.adoption`;
- :mod:`.objectspec` (name, image, limits, environment of every backend's object),
  :mod:`.labobject` (an object as its labels describe it), :mod:`.recovery` and :mod:`.labguard`
  (the checks before a start or an adoption);
- the Docker backend: :mod:`.gpudocker` (``GPUDockerSpawner``), :mod:`.engine` (the engine
  survey), :mod:`.network`;
- the Docker Swarm backend: :mod:`.gpuswarm` (``GPUSwarmSpawner``), :mod:`.swarmservice` (the
  service's create, wait, address, poll), pure :mod:`~jupyterhub_gpulab.backends.swarmspec` (the service spec),
  :mod:`.swarmtasks` (task states) and :mod:`.swarmnodes` (Swarm's nodes by lab name);
- :mod:`.reconcile` (the continuous reconcile pass), :mod:`.runtime` (one lab per hub process),
  :mod:`.configcheck` (the spawner's refused settings, as the hub and check-config say them);
- pure helpers: :mod:`.container` (device request, env, labels), :mod:`.form`
  (and ``templates/gpulab_form.html``), :mod:`.formmixin`, :mod:`.hardenmixin`, :mod:`.logs`.

``GPUDockerSpawner`` is imported on first use (``jupyterhub_gpulab.spawner.GPUDockerSpawner``, the
``gpulab`` entry point; ``GPUSwarmSpawner``, ``gpulab-swarm``), so importing the core does not
load dockerspawner and docker-py.
"""

__all__ = ["GPUDockerSpawner", "GPUSwarmSpawner"]


def __getattr__(name: str):
    if name == "GPUDockerSpawner":
        from .gpudocker import GPUDockerSpawner

        return GPUDockerSpawner
    if name == "GPUSwarmSpawner":
        from .gpuswarm import GPUSwarmSpawner

        return GPUSwarmSpawner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

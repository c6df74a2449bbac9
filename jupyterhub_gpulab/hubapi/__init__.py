"""The hub's REST API as gpulab's own processes use it, below both :mod:`jupyterhub_gpulab.courses`
and :mod:`jupyterhub_gpulab.service`, which call it (rosters, pre-start, the culler, the pages).

:mod:`.client` (:class:`~.client.HubClient`: who runs which server, a user's model, stop a server,
any request; :class:`~.client.HubError`), :mod:`.servers` (the hub's server record as its REST
model describes it; pure), :mod:`.stopper` (stop a server, then close its allocations: one task
set, awaited at shutdown) and :mod:`.secret` (the service's cookie secret, which the hub reads
too: each course's pre-start token is derived from it).

Where it runs: the gpulab service; the hub's configuration reads :mod:`.secret` only. It imports nothing of gpulab but the foundations (``clock``, ``errors``).
Importing this package imports nothing.
"""

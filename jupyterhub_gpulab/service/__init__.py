"""The gpulab service process: run by JupyterHub as a managed service
(``python -m jupyterhub_gpulab.service --config jupyterhub_config.py``, HubOAuth, custom scopes
``custom:gpulab:admin`` / ``custom:gpulab:read``).

Where it runs: its own process, never the hub's. :mod:`.launcher` (the traitlets ``Application``:
command line, config file, ``--help-all``, ``--generate-config``), :mod:`.lifetime` (leaves with
its hub, waits for a busy port), :mod:`.app` (the tornado application),
:mod:`.state` (the lab, its ledger and utilisation samples, one per process), :mod:`.monitor`
(samples every slice's GPU use through NVML and ``/proc``), :mod:`.actions` (admin actions),
:mod:`.culling` and :mod:`.cullconfig` (the culler's loop and traits; its decisions are pure, in
:mod:`jupyterhub_gpulab.fairuse`), :mod:`.web` (pages, API, templates). The hub's REST API (the
client, the server record, the stopper) is :mod:`jupyterhub_gpulab.hubapi`, below this package
and the courses. The hub declares the service with
:func:`jupyterhub_gpulab.hub.hubconfig.configure_service`.
Importing this package imports nothing.
"""

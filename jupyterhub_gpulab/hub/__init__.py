"""What runs inside the JupyterHub process, apart from the spawner: :mod:`.hubconfig`
(``configure_service``, called from ``jupyterhub_config.py``: the service, its scopes and roles)
:mod:`.announce` (the culler's warnings on the hub's pages, rendered by the hub) and :mod:`.hublog`
(gpulab's module loggers write through the hub's log). The hub's REST API as gpulab's processes
call it (its server record, the client) is :mod:`jupyterhub_gpulab.hubapi`.

Where it runs: the hub, at configuration load and on every page render. Nothing heavy is imported
at import time (a hub that only reads its configuration pays for nothing); the service process
imports :mod:`.hubconfig` only for the scope names it declares. Importing this package imports
nothing.
"""

"""Fair use: GPU-hour budgets, usage accounting, and the GPU-aware culler's decisions and plans.

- :mod:`.accounting`: weighted GPU-seconds per allocation, per user / group / profile; CSV.
- :mod:`.quota`: calendar-period budgets, the spawn check, servers over budget.
- :mod:`.culler`: keep / warn / cull for one server (pure).
- :mod:`.cullplan`: what the culler knows about every running server (pure).
- :mod:`.rounds`: one culler pass over those decisions, its I/O passed in.

Where it runs: rules with no I/O of their own, used by the spawner in the hub (the budget check
before a claim) and by the service (the culler, usage pages). Their inputs (ledger rows, hub
answers, utilisation samples from :mod:`jupyterhub_gpulab.service.monitor`) are read by the
callers. Importing this package imports nothing; import the module that holds the name.
"""

"""The lab as the admin configures it: ``c.GPULab`` (:mod:`.config`), the :class:`~.profile.Profile`
record (:mod:`.profile`) and loading/entitling profiles (:mod:`.profiles`), group policies and the
per-request :class:`~.policy.PolicyContext` (:mod:`.policy`), turning a user's choice into a profile
(:mod:`.choice`), container hardening rules (:mod:`.hardening`), the teaching term (:mod:`.term`),
every name derived from a user name (:mod:`.names`)
and the ``Duration`` / ``ChoiceEnum`` traits (:mod:`.traits`).

Where it runs: in every process that reads ``jupyterhub_config.py``: the hub (the spawner), the
gpulab service and the ``gpulab`` command. Validation and rules only, no I/O of its own; loading
the configuration (:meth:`.config.GPULab.load`) reads the inventory through
:mod:`jupyterhub_gpulab.inventory`. Importing this package imports nothing.
"""

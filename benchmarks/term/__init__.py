"""The term simulation behind ``benchmarks/semester.py``, one job a module.

- :mod:`.data`: the real usage data (``../shared/data/workload/``) and every input's provenance
  (``INPUTS``: measured or assumed);
- :mod:`.demand`: the users' behaviour (a model: arrivals, sittings, leaving);
- :mod:`.labs`: the labs as an admin configures them (``c.GPULab.*`` through ``GPULab.load``);
- :mod:`.hubsim`: the simulated hub the product's code talks to (its REST answers, its stops) and
  the spawner's own reservation path;
- :mod:`.stock`: plain JupyterHub's allocation and ``jupyterhub-idle-culler``'s rule;
- :mod:`.sim`: one lab through the term; :mod:`.figures`: what it measured.
"""

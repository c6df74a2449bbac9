"""The service's web face: tornado handlers (:mod:`.base`, :mod:`.pages`, :mod:`.api`), what they
show (:mod:`.data` gathers, :mod:`.views` and :mod:`.usageview` build plain dicts, pure),
:mod:`.openapi` (the API's contract), :mod:`.filters` and ``templates/`` (Jinja, extending the
hub's ``page.html``).

Where it runs: the gpulab service process only (``python -m jupyterhub_gpulab.service``): the
routes and the Jinja environment in :mod:`.application`, built by
:mod:`jupyterhub_gpulab.service.app`. Importing this package imports nothing.
"""

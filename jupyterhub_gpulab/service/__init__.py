"""The gpulab service: admin and user pages and a JSON API, run by JupyterHub as a managed
service (HubOAuth, custom scopes ``custom:gpulab:admin`` / ``custom:gpulab:read``).

Declare it in ``jupyterhub_config.py`` with :func:`~.hubconfig.configure_service`; the
application lives in :mod:`.app`. Importing this package imports nothing heavy.
"""

from .hubconfig import ADMIN_SCOPE, READ_SCOPE, configure_service

__all__ = ["ADMIN_SCOPE", "READ_SCOPE", "configure_service"]

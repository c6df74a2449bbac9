"""Who a user is and which groups they are in: campus SSO (OIDC), LTI 1.3, the group mapping.

Runs in the hub (``jupyterhub_config.py`` imports it) and in the ``gpulab`` command
(``check-auth``, ``check-config``); :mod:`.roster` (who owns the groups) in the service too,
for the course pages. :mod:`.groupmap` is pure; :mod:`.oidc` and :mod:`.lti` are
JupyterHub authenticators; :mod:`.presets` fills in provider settings.
"""

from .groupmap import ClaimError, GroupMapping, MappedGroups

__all__ = ["ClaimError", "GroupMapping", "MappedGroups"]

"""The gpulab authenticator a configuration names (``c.JupyterHub.authenticator_class``: a
class, or the entry-point names ``gpulab-oidc`` / ``gpulab-lti13``), built from that
configuration. Read by ``check-config``, ``check-auth`` and :mod:`.groupsowner` (who owns the
hub's groups); pure: it reads the configuration only."""

from __future__ import annotations

from importlib import import_module

from traitlets.config import Config

__all__ = ["authenticator"]

_NAMES = {
    "gpulab-oidc": "jupyterhub_gpulab.auth.oidc.GPULabOAuthenticator",
    "gpulab-lti13": "jupyterhub_gpulab.auth.lti.GPULabLTI13Authenticator",
}


def _configured_class(config: Config):
    """The gpulab authenticator class named by ``c.JupyterHub.authenticator_class``, or None."""
    name = config.JupyterHub.get("authenticator_class") if "JupyterHub" in config else None
    if not isinstance(name, str):
        return name if getattr(name, "group_mapping", None) is not None else None
    name = _NAMES.get(name, name)
    if name not in _NAMES.values():
        return None
    module, _, cls = name.rpartition(".")
    return getattr(import_module(module), cls)


def authenticator(config: Config):
    """An instance of the configured gpulab authenticator (``None`` when the hub uses another);
    :class:`TraitError` for a bad setting."""
    cls = _configured_class(config)
    return None if cls is None else cls(config=config)

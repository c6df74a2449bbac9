"""The spawner's refused settings, found once, said the same way by the hub and check-config.

A gpulab spawner refuses some of its own settings when it loads them (its validators and trait
types: ``c.DockerSpawner.remove = False``, a ``pids_limit`` that is no limit, ``cap_add`` beyond
Docker's defaults, an ``extra_host_config`` that undoes the hardening, an unknown
``attach_mode``, a bad ``prefix``, ``shm_size``, ``reconcile_interval``, form template or
progress hook, the Swarm backend's ``extra_*_spec`` …: a ``TraitError`` or ``ValueError``).
JupyterHub builds a spawner for every page and API call that touches a server, so a refused
setting raised there was an HTTP 500 with a traceback on each of them. Instead:

- :func:`refused_settings` tries the settings of each of the spawner's config sections on their
  own (traitlets stops at the first bad value) and returns every refused one, with its message
  and the configuration without them. ``gpulab check-config`` prints those messages and
  exits 1.
- In a hub (:func:`~jupyterhub_gpulab.hub.hublog.hub_app_log`), the spawner is built from the
  configuration without them, logs them once at ERROR, and refuses every start with the same
  messages (:meth:`~.core.SliceSpawnerCore.start`: a ``SpawnRefused``, reason
  ``misconfigured``); stop and poll keep working, so running servers can still be stopped.
  Elsewhere (tests, scripts) building a spawner with a refused setting raises, as before.

Runs where the spawner runs (the hub process) and in ``gpulab check-config``.
"""

from __future__ import annotations

import contextvars
import copy
import threading
from dataclasses import dataclass
from types import SimpleNamespace

from traitlets import HasTraits, TraitError
from traitlets.config import Config

from ..errors import SpawnRefused
from ..hub import metrics
from ..hub.hublog import hub_app_log

#: True while :func:`refused_settings` builds trial spawners (their own check is skipped).
_probing: contextvars.ContextVar[bool] = contextvars.ContextVar("gpulab_probing", default=False)
_lock = threading.Lock()
_found: dict[tuple[type, int], tuple[Config, Config, tuple[Refused, ...]]] = {}
_reported: set[tuple[Refused, ...]] = set()


@dataclass(frozen=True)
class Refused:
    """One refused setting: ``setting`` (``"c.DockerSpawner.remove"``; ``""`` when only the
    whole configuration fails) and ``message``, the spawner's own words with the fix."""

    setting: str
    message: str


def probing() -> bool:
    """Whether the spawner being built is one of :func:`refused_settings`' trials."""
    return _probing.get()


def _build(cls: type, config: Config):
    # a stand-in user: DockerSpawner names the container when c.DockerSpawner.image is set
    token = _probing.set(True)
    try:
        return cls(config=config, user=SimpleNamespace(name="check-config"))
    finally:
        _probing.reset(token)


def refused_settings(cls: type, config: Config) -> tuple[Config, tuple[Refused, ...]]:
    """``(config without the refused settings, every refused setting)`` for spawner class
    ``cls`` under ``config`` (a traitlets ``Config``). Builds trial spawners (no engine, no
    ledger): one when nothing is refused, one per setting of ``cls``'s sections otherwise.
    Remembered per class and config object, so a hub pays once."""
    key = (cls, id(config))
    with _lock:
        hit = _found.get(key)
    if hit is not None and hit[0] is config:
        return hit[1], hit[2]
    try:
        _build(cls, config)
        good, refused = config, ()
    except (TraitError, ValueError) as first:
        good, refused = _one_by_one(cls, config, str(first))
    with _lock:
        _found[key] = (config, good, refused)
    return good, refused


def _one_by_one(cls: type, config: Config, first: str) -> tuple[Config, tuple[Refused, ...]]:
    out: list[Refused] = []
    good = copy.deepcopy(config)
    for section in cls.section_names():
        if section not in config:
            continue
        for key, value in list(config[section].items()):
            alone = Config()
            alone[section][key] = value
            try:
                _build(cls, alone)
            except (TraitError, ValueError) as e:
                out.append(Refused(f"c.{section}.{key}", str(e)))
                del good[section][key]
    if not out:  # only a combination fails: nothing to take out
        out.append(Refused("", first))
    return good, tuple(out)


class RefusedSettingsMixin(HasTraits):
    """Mixed into the spawner core (:class:`~.core.SliceSpawnerCore`): in a hub, a spawner is
    built from the configuration without its refused settings, which it logs once at ERROR;
    :meth:`_settings_refusal` is the refusal every start raises then."""

    _refused_settings: tuple[Refused, ...] = ()

    def __init__(self, *args, **kwargs):
        refused: tuple[Refused, ...] = ()
        config = kwargs.get("config")
        if config is not None and not probing() and hub_app_log() is not None:
            kwargs["config"], refused = refused_settings(type(self), config)
        super().__init__(*args, **kwargs)
        if refused:
            self._refused_settings = refused
            with _lock:
                first = refused not in _reported
                _reported.add(refused)
            if first:
                self.log.error("%s", _log_message(refused))

    def _settings_refusal(self) -> SpawnRefused | None:
        """The refusal of a start while settings are refused (``None``: none are): for the
        user, the settings' names (never their values); for the log, every message."""
        if not self._refused_settings:
            return None
        names = [r.setting for r in self._refused_settings if r.setting]
        what = ", ".join(names) if names else "the spawner's settings"
        return SpawnRefused(
            f"The GPU lab is misconfigured, so no server can start: the hub's configuration "
            f"sets {what} to {'values' if len(names) > 1 else 'a value'} gpulab refuses. The "
            "administrators must fix it ("
            "gpulab check-config says how); please try again later.",
            reason="misconfigured",
            log_message=_log_message(self._refused_settings),
        )

    def _misconfigured(self, err: SpawnRefused):
        """Log ``err`` (a ``misconfigured`` refusal) at ERROR, count it, raise it."""
        self.log.error("%s", err.log_message)
        metrics.spawn_refused("misconfigured")
        raise err from None


def _log_message(refused: tuple[Refused, ...]) -> str:
    return (
        f"gpulab refuses {len(refused)} spawner setting(s); no server can start until they are "
        "fixed (gpulab check-config lists them):\n" + "\n".join(f"  - {r.message}" for r in refused)
    )

"""``gpulab check-config``: every error of a configuration at once (the spawner's refused settings,
the service's and courses' settings, the ledger URL, sign-on, the inventory, images), then its
warnings and, with gpulab's spawner, what the engine says."""

from __future__ import annotations

import difflib
import os
import sys
from pathlib import Path
from types import SimpleNamespace

from traitlets import TraitError
from traitlets.config import Config

from ..auth.check import auth_errors, auth_warnings
from ..errors import ConfigError
from ..lab.config import GPULab, Lab
from .common import DEFAULT_CONFIG, _config


def _unknown_settings(config: Config) -> list[str]:
    """``c.<Class>.<name>`` lines of gpulab's own classes that set no setting: traitlets ignores
    them (the hub logs one line at start), so a typo such as ``c.GPULab.policies`` would leave
    a lab without its group policies while check-config said OK. Each is named with the closest
    real setting."""
    from ..courses.config import GPULabCourses
    from ..service.app import GPULabService
    from ..spawner import GPUDockerSpawner, GPUSwarmSpawner

    out = []
    for cls in (GPULab, GPULabService, GPULabCourses, GPUDockerSpawner, GPUSwarmSpawner):
        name = cls.__name__
        if name not in config:
            continue
        known = set(cls.class_trait_names())
        for key in sorted(k for k in config[name] if k not in known):
            near = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
            hint = f"; did you mean c.{name}.{near[0]}?" if near else ""
            out.append(f"c.{name}.{key} is not a setting of {name}: it does nothing{hint}")
    return out


def _service_errors(config: Config) -> list[str]:
    """Problems in ``c.GPULabService`` (the culler's durations, unknown_utilization …)."""

    from ..service.app import GPULabService

    try:
        GPULabService(config=config)
    except TraitError as e:
        return [f"c.GPULabService: {e}"]
    return _course_errors(config)


def _course_errors(config: Config) -> list[str]:
    """Problems in ``c.GPULabCourses.courses`` (each course's record, checked against the
    profiles' slugs)."""
    from ..courses.config import GPULabCourses
    from ..courses.model import CourseError
    from ..courses.reserve import fit_problems
    from ..lab.profiles import load_profiles

    slugs = {p.get("slug") for p in GPULab(config=config).profiles if isinstance(p, dict)}
    try:
        declared = GPULabCourses(config=config).declared(slugs)
    except CourseError as e:
        return [f"c.GPULabCourses.{m}" for m in e.errors]
    except TraitError as e:
        return [f"c.GPULabCourses: {e}"]
    try:
        profiles = {p.slug: p for p in load_profiles(GPULab(config=config).profiles)}
    except ValueError:
        return []  # the profiles' own errors are listed by the lab's check
    return [
        f"c.GPULabCourses.courses: {m}"
        for c in declared
        for m in fit_problems(c, profiles.get(c.profile))
    ]


def _uses_gpulab_spawner(config: Config) -> bool:
    cls = config.JupyterHub.get("spawner_class") if "JupyterHub" in config else None
    if isinstance(cls, str):
        return cls == "gpulab" or cls.endswith("GPUDockerSpawner")
    return getattr(cls, "__name__", "") == "GPUDockerSpawner" or any(
        b.__name__ == "GPUDockerSpawner" for b in getattr(cls, "__mro__", ())
    )


def _spawner_setting(config: Config, name: str, default):
    for section in ("GPUDockerSpawner", "DockerSpawner"):
        if section in config and name in config[section]:
            return config[section][name]
    return default


def _image_report(config: Config, lab: Lab) -> tuple[list[str], list[str]]:
    """``(errors, warnings)``: GPU profiles whose image no (or not every) slice can run, their
    labels read through the lab's backend (:func:`.backends.backend_for`)."""
    from ..backends import EngineError, backend_for
    from ..backends.dockerengine import ENGINE_ERRORS
    from ..lab.images import check_profiles

    backend = backend_for(config)

    def labels_of(image: str) -> dict:
        labels = backend.image_labels(image)
        if labels is None:
            raise LookupError(image)
        return labels

    try:
        return check_profiles(lab.profiles, lab.inventory.slices, labels_of)
    except (EngineError, *ENGINE_ERRORS) as e:
        return [], [f"could not look at the Docker engine ({e}): images not checked"]
    finally:
        backend.close()


def _engine_report(config: Config, gl: GPULab, lab: Lab) -> list[str]:
    """Lines about the Docker engine the spawner uses: other labs' containers holding GPUs of
    this inventory, and other labs using this lab's container prefix."""
    from ..backends import EngineError, backend_for
    from ..backends.dockerengine import ENGINE_ERRORS
    from ..ledger import Ledger, SchemaOutOfDate, peek_identity
    from ..spawner.engine import EngineSurvey

    identity = peek_identity(gl.db_url)
    ledger = None
    try:
        if identity is not None:
            ledger = Ledger(gl.db_url)
        backend = backend_for(config)
        try:
            survey = EngineSurvey().look(backend, identity, lab.inventory, ledger)
        finally:
            backend.close()
    except (EngineError, SchemaOutOfDate, *ENGINE_ERRORS) as e:
        return [f"warning: could not look at the Docker engine ({e}): other labs not checked"]
    finally:
        if ledger is not None:
            ledger.close()
    me = identity.describe() if identity else "this lab (no ledger yet)"
    lines = [
        f"warning: {f.describe()}, in the inventory of {me} too: two ledgers hand out the same "
        "GPU. Take it out of one lab's inventory (c.GPULab.inventory, or drain it there), or "
        "stop that container."
        for f in survey.foreign
    ]
    prefix = _spawner_setting(config, "prefix", "jupyter")
    clash = sorted(n for n in survey.other_labs if n.startswith(prefix + "-"))
    if clash:
        other = survey.other_labs[clash[0]]
        lines.append(
            f"warning: {other.describe() if other else 'another lab'} names its containers "
            f"{prefix}-… on this Docker engine too ({clash[0]}): a user with a server in both "
            "labs is refused in the second. Set c.GPUDockerSpawner.prefix to a name of this "
            "lab's own."
        )
    if not lines:
        lines.append(f"Docker engine: no other lab's container holds a GPU of {me}")
    return lines


def _uses_swarm_spawner(config: Config) -> bool:
    cls = config.JupyterHub.get("spawner_class") if "JupyterHub" in config else None
    if isinstance(cls, str):
        return cls == "gpulab-swarm" or cls.endswith("GPUSwarmSpawner")
    return any(b.__name__ == "GPUSwarmSpawner" for b in getattr(cls, "__mro__", ()))


def _spawner(config: Config):
    """``(the gpulab spawner built from config, [every problem])``: GPUSwarmSpawner when the
    config names it, else GPUDockerSpawner, built without the refused settings (``None`` when
    it cannot be built even so); every refused setting of the spawner's sections is listed, as
    the hub refuses them (:mod:`.spawner.configcheck`)."""
    from ..spawner import GPUDockerSpawner, GPUSwarmSpawner
    from ..spawner.configcheck import refused_settings

    spawner_class = GPUSwarmSpawner if _uses_swarm_spawner(config) else GPUDockerSpawner
    good, refused = refused_settings(spawner_class, config)
    errors = [r.message for r in refused]
    try:
        # a stand-in user: DockerSpawner names the container when c.DockerSpawner.image is set
        return spawner_class(config=good, user=SimpleNamespace(name="check-config")), errors
    except (TraitError, ValueError) as e:
        return None, errors if any(r.setting for r in refused) else [str(e)]


def _db_url_errors(url: str) -> list[str]:
    """Problems with ``c.GPULab.db_url`` that would stop the hub and the service at start: a URL
    SQLAlchemy cannot read, a database driver that is not installed, a SQLite file in a folder
    that does not exist. Opens no connection."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    from ..ledger.db import sqlite_file

    try:
        parsed = make_url(url)
    except ArgumentError:
        return [
            f"c.GPULab.db_url {url!r} is not a database URL; use e.g. "
            "'sqlite:////srv/jupyterhub/gpulab.sqlite' or "
            "'postgresql+psycopg://user:password@host/gpulab'"
        ]
    safe = parsed.render_as_string(hide_password=True)
    try:
        parsed.get_dialect().import_dbapi()
    except NoSuchModuleError:
        return [f"c.GPULab.db_url {safe!r}: SQLAlchemy knows no database {parsed.drivername!r}"]
    except ImportError as e:
        fix = (
            "pip install 'jupyterhub-gpulab[postgres]'"
            if parsed.get_backend_name() == "postgresql"
            else f"install the Python driver for {parsed.drivername}"
        )
        return [f"c.GPULab.db_url {safe!r}: its driver is not installed ({e.name}); {fix}"]
    database = sqlite_file(parsed)
    if database is not None:
        folder = Path(database).resolve().parent
        if not folder.is_dir():
            return [f"c.GPULab.db_url {safe!r}: the folder {folder} does not exist; create it"]
    return []


def host_resources() -> tuple[int, int]:
    """``(CPUs, memory in bytes)`` of this machine: the Docker host, for a single-host lab."""
    return os.cpu_count() or 1, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _limit_warnings(lab: Lab, spawner) -> list[str]:
    """Profiles whose CPU or memory limit (their own, else the spawner's) exceeds this host."""
    from ..lab.hardening import limit_warnings

    cpus, memory = host_resources()
    base_cpu = spawner.cpu_limit if spawner is not None else None
    base_mem = spawner.mem_limit if spawner is not None else None
    limits = [
        (
            f"profile {p.slug!r}",
            p.cpu_limit if p.cpu_limit is not None else base_cpu,
            p.mem_limit if p.mem_limit is not None else base_mem,
        )
        for p in lab.profiles
    ]
    return limit_warnings(limits, host_cpus=cpus, host_memory=memory)


def _print_errors(args, errors: list[str]) -> int:
    """check-config's answer to a configuration with ``errors``: each on stderr; exit 1."""
    print(f"{args.config or DEFAULT_CONFIG}: {len(errors)} error(s):", file=sys.stderr)
    for m in errors:
        print(f"  - {m}", file=sys.stderr)
    return 1


def cmd_check_config(args) -> int:
    config = _config(args.config)
    spawner, errors = _spawner(config)
    try:
        GPULab(config=config)
    except TraitError as e:  # the rest reads c.GPULab: say what the hub says, and stop here
        return _print_errors(args, [*errors, f"c.GPULab: {e}"])
    errors += _service_errors(config)
    errors += _db_url_errors(GPULab(config=config).db_url)
    errors += auth_errors(config)
    lab = None
    try:
        gl = GPULab(config=config)
        lab = gl.load()
    except ConfigError as e:
        errors = e.errors + errors
    image_warnings: list[str] = []
    if lab is not None:
        from .checkschedule import schedule_errors

        errors += schedule_errors(config, gl, lab)
    if lab is not None and _uses_gpulab_spawner(config):
        image_errors, image_warnings = _image_report(config, lab)
        errors += image_errors
    if errors:
        return _print_errors(args, errors)
    warnings = [
        *_unknown_settings(config),
        *lab.warnings,
        *_limit_warnings(lab, spawner),
        *auth_warnings(config, lab),
    ]
    for w in warnings + image_warnings:
        print(f"warning: {w}")
    kinds: dict[str, int] = {}
    for s in lab.inventory.slices:
        kinds[s.kind.value] = kinds.get(s.kind.value, 0) + 1
    words = {"gpu": "whole GPU", "mig": "MIG instance", "shared": "shared seat"}
    summary = ", ".join(f"{n} {words.get(k, k)}" for k, n in sorted(kinds.items()))
    gpus = (
        "every node's GPUs from its node agent (`gpulab nodes` lists them)"
        if lab.inventory.source == "agents"
        else f"{len(lab.inventory.devices)} GPU(s) from {lab.inventory.source}, "
        f"{len(lab.inventory.slices)} slice(s) ({summary or 'none'})"
    )
    print(f"OK: {gpus}, {len(lab.profiles)} profile(s), {len(lab.policies)} group policy(ies)")
    if _uses_gpulab_spawner(config):
        for line in _engine_report(config, gl, lab):
            print(line)
    return 0

"""What the package needs is what it declares: every module ``jupyterhub_gpulab`` imports (at
the top, deferred inside a function, or for type checking) is the standard library's, its own, or
comes from a distribution ``pyproject.toml`` names, and no floor there admits a release with a
published advisory we know of. Reads the source and the installed distributions' metadata; no
network (``scripts/audit-deps.sh`` asks the vulnerability database)."""

from __future__ import annotations

import ast
import importlib.metadata as md
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

tomllib = pytest.importorskip("tomllib")

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "jupyterhub_gpulab"


def imported_modules() -> dict[str, set[str]]:
    """``{top-level module: {file that imports it}}`` for every absolute import of the package."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(REPO)))
    return found


def declared() -> tuple[dict[str, Requirement], dict[str, Requirement]]:
    """``(dependencies, extras but test)`` of pyproject.toml, by canonical distribution name."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = {canonicalize_name(r.name): r for r in map(Requirement, project["dependencies"])}
    extras = {
        canonicalize_name(r.name): r
        for extra, reqs in project["optional-dependencies"].items()
        if extra != "test"
        for r in map(Requirement, reqs)
    }
    return core, extras


#: modules of an optional extra, imported only where that extra's feature is configured
OPTIONAL = {"ltiauthenticator": "lti"}


def test_every_imported_module_is_declared_or_the_standard_librarys():
    core, extras = declared()
    by_module = md.packages_distributions()
    missing = []
    for module, files in sorted(imported_modules().items()):
        if module in sys.stdlib_module_names or module == "jupyterhub_gpulab":
            continue
        dists = {canonicalize_name(d) for d in by_module.get(module, [])}
        assert dists, f"{module} (imported by {sorted(files)}) is not installed at all"
        allowed = core.keys() | (extras.keys() if module in OPTIONAL else set())
        if not dists & allowed:
            missing.append(f"{module} ({'/'.join(sorted(dists))}, imported by {sorted(files)[0]})")
    assert not missing, "imported but not declared in pyproject.toml: " + "; ".join(missing)


#: distribution → (releases with a published advisory, releases that fix it) (issue 21.10)
ADVISORIES = {
    "oauthenticator": (["16.3.1", "17.3.0"], ["17.4.0"]),  # CVE-2026-33175
    "jupyterhub-ltiauthenticator": (["1.6.0", "1.6.2"], ["1.6.3"]),  # CVE-2026-34052
    # a spawner-options denial of service, fixed in 5.5.3 and 6.1.0
    "jupyterhub": (["5.4.6", "5.5.2", "6.0.0", "6.0.1"], ["5.5.3", "6.1.0", "6.1.1"]),
}


@pytest.mark.parametrize("dist", sorted(ADVISORIES))
def test_no_floor_admits_a_release_with_a_known_advisory(dist):
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    every = [*project["dependencies"], *sum(project["optional-dependencies"].values(), [])]
    mine = [r for r in map(Requirement, every) if canonicalize_name(r.name) == dist]
    assert mine, f"{dist} is not declared"
    affected, fixed = ADVISORIES[dist]
    for r in mine:
        assert not [v for v in affected if r.specifier.contains(v)], f"{r} admits {affected}"
        assert all(r.specifier.contains(v) for v in fixed), f"{r} refuses a fixed one of {fixed}"

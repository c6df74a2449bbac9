"""The test suite's own house rule: what two test modules share lives in a support module
(``tests/*_support.py``, ``hubtools.py``, ``fake_nvml.py``, …) or a conftest.py fixture, never in
one test module imported by another. Importing a test module runs its module-level code (its
``pytestmark``, its fixtures, its constants) a second time under another module's marks, and a
change to "its" helper breaks tests in a file nobody was editing.

Read with ``ast`` (nothing imported): top-level and deferred imports (inside functions) count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def named_test_modules(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The test modules (``test_*``) an import statement names: ``import test_a``, ``import
    tests.test_a``, ``from test_a import x``, ``from tests.test_a import x``, ``from .test_a
    import x``, ``from . import test_a``, ``from tests import test_a``."""
    if isinstance(node, ast.Import) or node.module is None or node.module == "tests":
        names = [alias.name for alias in node.names]
    else:
        names = [node.module]
    found = []
    for name in names:
        parts = name.split(".")
        if parts[0] == "tests":
            parts = parts[1:]
        if parts and parts[0].startswith("test_"):
            found.append(parts[0])
    return found


def imports_of_test_modules(source: str) -> list[tuple[int, str]]:
    """``(line, test module)`` for every import of a test module in ``source``."""
    return [
        (node.lineno, name)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for name in named_test_modules(node)
    ]


@pytest.mark.parametrize(
    "line",
    [
        pytest.param("from test_cli import LAB", id="from-module"),
        pytest.param("import test_service_browser", id="import"),
        pytest.param("from tests.test_cli import LAB", id="from-package"),
        pytest.param("import tests.test_cli as c", id="import-package"),
        pytest.param("from .test_cli import LAB", id="relative"),
        pytest.param("from . import test_cli", id="relative-module"),
        pytest.param("from tests import test_cli", id="package-module"),
        pytest.param("def f():\n    from test_cli import write_config\n", id="deferred"),
    ],
)
def test_every_way_of_importing_a_test_module_is_found(line):
    assert [name for _, name in imports_of_test_modules(line)] in (
        ["test_cli"],
        ["test_service_browser"],
    )


@pytest.mark.parametrize(
    "line",
    [
        pytest.param("from service_support import login", id="support"),
        pytest.param("import testinfra", id="test-prefix-without-underscore"),
        pytest.param("from jupyterhub_gpulab.lab import test_config", id="package-module"),
    ],
)
def test_support_modules_and_other_packages_are_not_test_modules(line):
    assert imports_of_test_modules(line) == []


def test_no_module_of_the_suite_imports_a_test_module():
    found = [
        f"tests/{path.name}:{line}: imports {name}"
        for path in sorted(TESTS.glob("*.py"))
        for line, name in imports_of_test_modules(path.read_text(encoding="utf-8"))
    ]
    assert not found, (
        "move what is shared into a tests/*_support.py module (or a conftest.py fixture) and "
        "import it from there:\n" + "\n".join(found)
    )

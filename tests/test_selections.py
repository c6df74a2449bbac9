"""What a test selection needs (issue 21 item 8): ``scripts/test.sh`` asks ``pytest
--gpulab-needs <selection>`` (tests/conftest.py) and sets up only the outside parts it answers, so
a wrong answer either sets up nothing a selected test needs (it then fails on a missing engine or
proxy) or makes ``scripts/test.sh -m unit`` start dockerd, PostgreSQL and the Swarm for tests
that need none of them. Each case runs pytest's own collection in a subprocess, as test.sh does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def needs(*selection: str) -> str:
    """``--gpulab-needs``'s answer for ``selection`` (pytest arguments), as test.sh reads it."""
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--gpulab-needs",
         *selection],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    answers = [line for line in r.stdout.splitlines() if line.startswith("gpulab-needs=")]
    assert answers, f"no answer (rc {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    return answers[-1].removeprefix("gpulab-needs=")


@pytest.mark.parametrize(
    "selection, answer",
    [
        # tests that start a hub through service_support carry no marker of their own: the
        # helper they import makes them 'hub' (the proxy is set up, no engine)
        pytest.param(["tests/test_service_nodes.py"], "hub", id="hub-starting module"),
        # -m unit leaves out that module's hub tests: nothing to set up
        pytest.param(
            ["-m", "unit", "tests/test_service_nodes.py", "tests/test_units.py"],
            "none",
            id="-m unit",
        ),  # fmt: skip
        # two hubs on one PostgreSQL ledger and one engine; -m "not docker" drops them all
        pytest.param(["tests/test_hubs_e2e.py"], "docker,postgres", id="docker and postgres"),
        pytest.param(["-m", "not docker", "tests/test_hubs_e2e.py"], "none", id="-m not docker"),
    ],
)
def test_a_selection_asks_for_exactly_the_parts_its_tests_need(selection, answer):
    assert needs(*selection) == answer


def collected(*selection: str) -> set[str]:
    """The test ids pytest collects for ``selection``, as ``-m`` leaves them."""
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
         *selection],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return {line for line in r.stdout.splitlines() if "::" in line}


def test_the_fast_selection_leaves_out_the_minutes_long_ones():
    """``pytest -m unit`` is what the README promises runs in minutes: the term's small
    simulation (5-9 minutes of CPU) and the stress tests are ``slow``, not ``unit``; ``-m slow``
    runs them."""
    files = ["tests/test_benchmarks.py", "tests/test_ledger_stress.py", "tests/test_units.py"]
    unit, slow = collected("-m", "unit", *files), collected("-m", "slow", *files)
    term = "tests/test_benchmarks.py::test_semester_benchmark_runs_a_small_term"
    assert term in slow and term not in unit
    assert any("test_two_processes_never_double_allocate" in t for t in slow)
    assert not any("test_two_processes_never_double_allocate" in t for t in unit)
    # the fast ones stay in it
    assert (
        "tests/test_benchmarks.py::test_ledger_benchmark_interleaves_ours_and_the_naive_search"
        in unit
    )
    assert any(t.startswith("tests/test_units.py::") for t in unit)

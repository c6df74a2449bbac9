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

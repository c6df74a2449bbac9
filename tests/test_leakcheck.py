"""The suite's leak check (``conftest.py``, ``leakcheck.py``): a run fails when a container,
volume or Swarm service it named survives it, counts only what that run named (a parallel run's
objects are not its own), and makes no engine call when no Docker test ran. Each case runs an
inner pytest session over a small test file, with its own run token."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from leakcheck import unique

TESTS = Path(__file__).resolve().parent

CONFTEST = f"""
import importlib.util, sys
sys.path.insert(0, {str(TESTS)!r})
spec = importlib.util.spec_from_file_location("gpulab_conftest", {str(TESTS / "conftest.py")!r})
real = importlib.util.module_from_spec(spec)
spec.loader.exec_module(real)
pytest_runtest_setup = real.pytest_runtest_setup
pytest_sessionfinish = real.pytest_sessionfinish
"""

INNER = """
import subprocess
import pytest
from leakcheck import unique

@pytest.mark.docker
def test_forgets_a_volume():
    subprocess.run(["docker", "volume", "create", unique("gpulableak")], check=True,
                   capture_output=True)

@pytest.mark.docker
def test_cleans_up_after_itself():
    name = unique("gpulabtidy")
    subprocess.run(["docker", "volume", "create", name], check=True, capture_output=True)
    subprocess.run(["docker", "volume", "rm", name], check=True, capture_output=True)

def test_needs_no_engine():
    pass
"""


def inner_run(tmp_path: Path, *args: str, path: str | None = None):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_inner.py").write_text(INNER)
    run = "r" + secrets.token_hex(3)
    env = {**os.environ, "GPULAB_TEST_RUN": run}
    if path is not None:
        env["PATH"] = path
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return run, r


def volumes_of(run: str) -> list[str]:
    out = subprocess.run(["docker", "volume", "ls", "-q"], capture_output=True, text=True).stdout
    return [v for v in out.split() if run in v]


@pytest.mark.docker
def test_a_run_that_leaves_a_volume_fails_naming_it_and_nothing_of_a_parallel_run(tmp_path):
    from e2e_support import require_docker

    require_docker()
    parallel = unique("gpulabother")  # this (outer) session's: another run to the inner one
    subprocess.run(["docker", "volume", "create", parallel], check=True, capture_output=True)
    run = None
    try:
        run, r = inner_run(tmp_path)
        out = r.stdout + r.stderr
        assert r.returncode == 1, out  # every test passed; the leak fails the run
        assert "3 passed" in out
        [left] = volumes_of(run)
        assert left.startswith("gpulableak") and f"volume {left}" in out
        assert f"leak check: 1 object(s) of run {run}" in out
        assert parallel not in out and "gpulabtidy" not in out
    finally:
        subprocess.run(["docker", "volume", "rm", parallel], capture_output=True)
        for v in volumes_of(run) if run else ():
            subprocess.run(["docker", "volume", "rm", v], capture_output=True)


def test_a_run_without_docker_tests_asks_no_engine(tmp_path):
    # a docker on PATH that only records that it was called
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    called = tmp_path / "docker-called"
    fake = bin_dir / "docker"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {called}\nexit 1\n')
    fake.chmod(0o755)
    _, r = inner_run(tmp_path, "-m", "not docker", path=f"{bin_dir}:{os.environ['PATH']}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed" in r.stdout and not called.exists()

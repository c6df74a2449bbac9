"""A real Prometheus (Debian's ``prometheus`` package, installed by scripts/ensure-packages.sh) for
tests: ``Prometheus(workdir, jobs).start()`` scrapes each job every second; ``query(promql)``
asks its HTTP API."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import requests
from hubtools import free_port

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "prometheus" / "gpulab-alerts.yml"


def require(binary: str) -> str:
    """The path of ``binary`` (``prometheus``, ``promtool``); skip without it, fail in CI."""
    path = shutil.which(binary)
    if path is None:
        why = f"{binary} is not installed (scripts/ensure-packages.sh installs Debian's prometheus)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return path


class Prometheus:
    """``jobs``: ``[(job name, "host:port", metrics path, bearer token)]``."""

    def __init__(self, workdir: Path, jobs: list[tuple[str, str, str, str]]):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.jobs = jobs
        self.proc: subprocess.Popen | None = None

    def config(self) -> str:
        lines = [
            "global:",
            "  scrape_interval: 1s",
            "  evaluation_interval: 1s",
            "rule_files:",
            f"  - {RULES}",
            "scrape_configs:",
        ]
        for name, target, path, token in self.jobs:
            lines += [
                f"  - job_name: {name}",
                f"    metrics_path: {path}",
                "    authorization:",
                f"      credentials: {token}",
                "    static_configs:",
                f"      - targets: ['{target}']",
            ]
        return "\n".join(lines) + "\n"

    def start(self, timeout: float = 60) -> Prometheus:
        binary = require("prometheus")
        cfg = self.workdir / "prometheus.yml"
        cfg.write_text(self.config())
        self.log = open(self.workdir / "prometheus.log", "ab")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if requests.get(self.url + "/-/ready", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            assert self.proc.poll() is None, (self.workdir / "prometheus.log").read_text()
            time.sleep(0.3)
        raise TimeoutError("prometheus did not get ready")

    def query(self, promql: str) -> list[dict]:
        """The instant vector (or scalar as a one-element list) ``promql`` gives now."""
        r = requests.get(self.url + "/api/v1/query", params={"query": promql}, timeout=10)
        body = r.json()
        assert body["status"] == "success", (promql, body)
        data = body["data"]
        return data["result"] if data["resultType"] == "vector" else [{"value": data["result"]}]

    def value(self, promql: str) -> float | None:
        """The one value of ``promql`` now (``None`` when it has none); several is an error."""
        result = self.query(promql)
        assert len(result) <= 1, (promql, result)
        return float(result[0]["value"][1]) if result else None

    def wait_for(self, promql: str, expected: float, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        got = None
        while time.monotonic() < deadline:
            got = self.value(promql)
            if got == expected:
                return
            time.sleep(0.5)
        raise AssertionError(f"{promql} = {got}, expected {expected} within {timeout} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None
        if getattr(self, "log", None):
            self.log.close()

"""Every benchmark in ``benchmarks/`` runs in its small mode (``--small``: seconds to a minute or
two, figures that mean nothing) and ends with one JSON object holding the keys the README and the
issues quote, so a benchmark broken by a change fails here instead of at the next measurement.
Each test is marked with what its benchmark needs (conftest.py's markers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_small(name: str, timeout: float, tmpdir: Path | None = None) -> dict:
    """Run ``benchmarks/<name>.py --small`` (its temporary files under ``tmpdir`` when given);
    its last line, parsed. Fails with the output's tail when it exits non-zero or its last line
    is not one JSON object."""
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), "--small"],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1", **({"TMPDIR": str(tmpdir)} if tmpdir else {})),
    )
    tail = (r.stdout + r.stderr)[-3000:]
    assert r.returncode == 0, f"benchmarks/{name}.py --small exited {r.returncode}:\n{tail}"
    last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    try:
        result = json.loads(last)
    except json.JSONDecodeError:
        pytest.fail(f"benchmarks/{name}.py's last line is not JSON: {last!r}\n{tail}")
    assert isinstance(result, dict), last
    return result


def has_keys(result: dict, *keys: str) -> None:
    missing = [k for k in keys if k not in result]
    assert not missing, f"missing {missing} in {sorted(result)}"


def test_ledger_benchmark_interleaves_ours_and_the_naive_search():
    r = run_small("ledger", 300)
    has_keys(r, "p50_ms_100", "p99_ms_300", "p99_ms_300_full", "naive_p99_ms_300",
             "naive_p99_ms_300_full", "scaling_300_over_100", "naive_scaling_300_over_100",
             "ours_slower_cases", "loadavg_1m", "alone_p50_ms_300", "alone_p99_ms_100",
             "alone_scaling_300_over_100", "naive_alone_scaling_300_over_100")  # fmt: skip
    assert r["double_allocations"] == 0
    assert r["rounds"] == 40 and r["alone_rounds"] == 40
    # both sides timed every round, and the order alternates ABBA (issue 21 item 9)
    assert r["rounds_timed"] == {"ours": 40, "naive": 40}
    assert r["first_side_by_round"] == ["ours", "naive", "naive", "ours"] * 2
    # every rule of the claim was live while it was timed
    assert r["rules"] == ["bookings", "waitlist", "holds", "image-needs", "limits"]


@pytest.mark.parametrize(
    "args, says",
    [
        (["--small", "--alone", "0"], "--small sets --rounds, --alone and --sizes itself"),
        (["--sizes", "100,100"], "at least two different sizes"),
        (["--sizes", "10,100"], "at least 24 slices"),
        (["--sizes", "100,x"], "slice counts separated by commas"),
        (["--rounds", "0"], "--rounds must be at least 1"),
    ],
)
def test_ledger_benchmark_refuses_what_it_cannot_honour(args, says):
    # a usage error naming the fix, before any ledger is made: not a run that silently
    # measures something else (--small used to override --alone 0)
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "ledger.py"), *args],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 2 and says in r.stderr, r.stderr


@pytest.mark.slow  # ~5-9 minutes of CPU: `pytest -m unit` leaves it out
def test_semester_benchmark_runs_a_small_term():
    r = run_small("semester", 1800)  # thirteen labs, a simulated week each
    headline = ("class_served_within_1min_pct", "homework_intents_unserved_pct",
                "research_wait_p50_min", "research_wait_p90_min", "idle_held_pct",
                "culled_at_keyboard_pct", "budget_refusals", "preemptions")  # fmt: skip
    has_keys(r, *headline, "students_per_gpu_ratio", "by_lab", "inputs", "settings")
    for other in ("static", "plain_jupyterhub"):  # the same figures, same run
        has_keys(r[other], *headline)
    assert r["double_allocations"] == 0
    assert r["lab"]["term_weeks"] == 1
    # every input says where it comes from
    assert r["inputs"] and all(v.startswith(("measured", "assumed")) for v in r["inputs"].values())
    # the culler ran with the service's own defaults, not a window of the simulation's own
    from jupyterhub_gpulab.service.app import GPULabService

    service = GPULabService()
    assert r["settings"] == pytest.approx({k: getattr(service, k) for k in r["settings"]})
    # the stock idle culler never warns and gpulab's culler did: the labs really differ
    assert r["by_lab"]["plain"]["warnings"] == 0 < r["by_lab"]["gpulab"]["warnings"]
    # each lever of issue 22 item 3b, off (the gpulab lab) and on, from the same run
    for lever in ("fairshare", "research_max_session"):
        assert set(r["levers"][lever]) == {"off", "on"}
        assert r["levers"][lever]["off"] == {
            k: r["by_lab"]["gpulab"][k] for k in r["levers"][lever]["off"]
        }
        has_keys(r["levers"][lever]["on"], "research_wait_p50_min", "research_wait_p90_min")
    check_term_levers(r)


def check_term_levers(r: dict) -> None:
    """Issue 22 items 2 and 3: each new lab ran, with no double allocation, and each lever did
    what it is there for (a Keep that never keeps, a move that never frees a slice, a schedule
    that never re-lays fails here); the labs without a lever never used it."""
    labs = r["by_lab"]
    for lever, lab in (("keep", "keep"), ("move_to_cpu", "cpu"), ("mig_research", "mig-research"),
                       ("layout_schedule", "layout"), ("gpu_idle_spare", "spare"),
                       ("interaction_signal", "signal"), ("all", "all")):  # fmt: skip
        assert labs[lab]["double_allocations"] == 0, lab
        assert set(r["levers"][lever]) == {"off", "on"}
        assert r["levers"][lever]["on"] == {k: labs[lab][k] for k in r["levers"][lever]["on"]}
    off = labs["gpulab"]
    assert off["keeps"] == off["moved_to_cpu"] == off["relayouts"] == off["research_on_mig"] == 0
    assert labs["keep"]["keeps"] > 0 and labs["keep"]["moved_to_cpu"] == 0
    # a moved server restarts on the CPU profile, and the GPU-hours it no longer holds show
    assert labs["cpu"]["moved_to_cpu"] == labs["cpu"]["cpu_starts"] > 0
    assert labs["cpu"]["gpu_hours_held"] < off["gpu_hours_held"]
    assert labs["cpu"]["keeps"] == 0
    for lab in ("mig-research", "layout", "all"):  # the schedule re-laid a GPU both ways
        assert labs[lab]["relayouts"] >= 2, lab
    assert labs["all"]["keeps"] > 0 and labs["all"]["moved_to_cpu"] > 0
    # the demand-aware GPU-idle rule spares users at the keyboard: fewer of them are stopped
    assert labs["spare"]["culled_at_keyboard"] < off["culled_at_keyboard"]
    # with JupyterLab's interaction report a tab left open is no longer "at the keyboard": the
    # spare holds fewer idle slices for users who left
    assert labs["signal"]["idle_held_pct"] < labs["spare"]["idle_held_pct"]


@pytest.mark.hub
def test_service_benchmark_measures_the_page_the_api_and_the_metrics():
    r = run_small("service", 600)
    has_keys(r, "admin_page_ms_p95", "api_ms_p95", "metrics_ms_p95", "metrics_http_ms_p95",
             "loadavg_1m", "targets", "meets_targets")  # fmt: skip
    assert r["open_allocations"] == 60 and r["metrics_slices"] == 200


@pytest.mark.docker
def test_spawn_benchmark_reports_refusals_against_the_bare_hubs_floor():
    r = run_small("spawn", 900)
    has_keys(r, "overhead_ratio", "storm_ratio", "refusal_p95_s", "refusal_p95_s_hub_floor",
             "refusal_p95_over_floor", "overhead_ratio_ci90")  # fmt: skip
    low, high = r["overhead_ratio_ci90"]
    assert low <= r["overhead_ratio"] <= high
    assert r["refusal_p95_over_floor"] == pytest.approx(
        r["refusal_p95_s"] / r["refusal_p95_s_hub_floor"], rel=0.05
    )
    assert r["refusals"] == r["burst_size"] - r["burst_free_slices"]
    assert r["double_allocations"] == 0 and r["open_allocations_after"] == 0
    # --steps (on in the small mode): the bare hub's refusals split into the same parts as ours
    parts = {"before_start", "start", "after_start", "total"}
    assert parts <= r["refusal_steps_ms"].keys() and parts <= r["refusal_steps_ms_hub_floor"].keys()


@pytest.mark.hub
def test_scale_benchmark_storms_both_hubs_and_leaves_the_ledger_clean(tmp_path):
    r = run_small("scale", 300, tmpdir=tmp_path)
    has_keys(r, "storm_wall_s_ours", "storm_wall_s_plain", "storm_ratio", "storm_1000_ratio",
             "hub_peak_rss_mib_ours", "hub_peak_rss_mib_plain", "service_peak_rss_mib",
             "loadavg_1m")  # fmt: skip
    assert r["order"] == ["ours", "plain"] and r["storm_1000_ratio"] is None  # 20 users
    # every user held a slice at the peak, none twice, and the stops released them all
    assert r["open_at_peak"] == r["users"] == 20
    assert r["double_allocations"] == 0 and r["open_allocations_after"] == 0
    # its work folder (the hubs' logs and ledgers: ~40 MB at 1,000 users) is gone after a run
    assert list(tmp_path.glob("gpulab-bench-scale-*")) == []


@pytest.mark.docker
def test_prestart_benchmark_gives_both_sides_the_same_content():
    r = run_small("prestart", 900)
    has_keys(r, "prestart_wall_s_ours", "prestart_wall_s_plain", "prestart_ratio")
    # like with like: both sides' servers pulled the course repository at start
    assert r["ready_pct"] == 100 and r["content_present_pct"] == 100
    assert r["ready_pct_plain"] == 100 and r["content_present_pct_plain"] == 100
    assert r["double_allocations"] == 0


@pytest.mark.docker
@pytest.mark.swarm
def test_swarm_benchmark_runs_a_storm_on_each_side():
    r = run_small("swarm", 900)
    has_keys(r, "storm_wall_s_ours", "storm_wall_s_plain", "storm_ratio", "nodes_with_servers")
    assert r["double_allocations"] == 0 and r["misplaced"] == 0
    assert len(r["walls_ours"]) == 1 and len(r["walls_plain"]) == 1


def test_seatguard_benchmark_sets_the_guard_beside_the_sample_it_follows():
    r = run_small("seatguard", 300)
    has_keys(r, "guard_ms_p50", "guard_ms_p95", "sample_ms_p50", "sample_ms_p95",
             "guard_over_sample_p50", "loadavg_1m", "targets", "meets_targets")  # fmt: skip
    assert (r["held_seats"], r["processes"], r["rounds"]) == (100, 200, 10)
    assert r["over_cap_seats"] == 10  # a tenth of the seats over their cap, warned

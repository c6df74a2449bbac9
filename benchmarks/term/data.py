"""The real usage data the term runs on, and where every input comes from.

The files live in ``../shared/data/workload/`` (their README cites each source and licence).
:data:`INPUTS` states for each input of the simulation whether it is **measured** (which file,
which columns, or which publication) or **assumed** (and why); ``semester.py`` prints it into
its JSON (``inputs``) so a figure is never read without its provenance.
"""

from __future__ import annotations

import csv
from datetime import datetime
from pathlib import Path

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "workload"

DAILY = "datahub-sp2023-daily-active-users.csv"
LENGTHS = "datahub-sp2023-session-length-hours-mod24.csv"
UTIL = "acme-gpu-util-cdf.csv"

#: Each input of the simulation: ``"measured: …"`` or ``"assumed: …"`` (module docstring).
INPUTS = {
    "busy_days": f"measured: {DAILY} (date, daily_active_users): UC Berkeley DataHub, spring "
    "2023, 98 days from its first Monday; homework sittings on term day d scale with that day's "
    "users over the mean",
    "sitting_length": f"measured: {LENGTHS} (length_hours_mod24, sessions), the trusted 0-5 h "
    "bins; keyboard time is that length less an assumed 60-min idle tail (DataHub's culler), "
    "floor 10 min",
    "gpu_cell_runs": "measured (published): NotebookOS, Carver et al., ASPLOS 2026, "
    "arXiv:2503.20591: GPU cells run a median 6 min, p90 32 min (log-normal, sigma 1.31)",
    "think_time": "assumed: exponential, mean 40 min between GPU cells, set so that runs fill "
    "about 26 % of a sitting, NotebookOS's measured share",
    "utilisation_check": f"measured: {UTIL} (source, gpu_util_pct, cdf_pct): batch clusters' "
    "share of samples below 5 %, printed beside the static lab's idle share (a check only)",
    "population": "assumed: 200 students in 4 courses of 50, 20 researchers (a departmental "
    "4-GPU lab, as issue 22 describes)",
    "homework_rate": "assumed: 1.5 sittings a student a week, starting 10:00-24:00 weighted to "
    "20:00-23:00 (DataHub has no hourly data)",
    "lab_sections": "assumed: each course meets twice a week for 2 h (10:00 or 14:00); 12 of a "
    "section's 25 use a GPU, arriving in its first 10 min and staying to its end",
    "leaving": "assumed: 30 % stop their server, 45 % close the tab with it running, 25 % leave "
    "the tab open (log-normal, median 3 h); 15 % leave a run going (median 45 min)",
    "researchers": "assumed: 1 session a week each (Poisson), weekdays 08:00-18:00, 2 h at the "
    "keyboard (log-normal, sigma 0.5), GPU busy about half of it; 30 % leave a run going "
    "(median 3 h)",
    "patience": "assumed: without a waitlist a refused student retries after 15 min twice, a "
    "researcher every 15 min for 4 h; queued, a student waits 30 min, a researcher 4 h; an "
    "offered user starts within a minute",
    "warning_seen": "assumed: a user at the keyboard sees a cull warning with probability 0.2 "
    "(--warning-seen) and then runs something: the product shows it on the hub's home page and "
    "the gpulab page, not in JupyterLab where they work (issue 22 item 2)",
    "hub_activity": "assumed (JupyterHub's documented mechanism): an open tab or a running "
    "kernel is activity; the hub's last_activity catches up every 5 min "
    "(JupyterHub.last_activity_interval = 300 s)",
    "utilisation_samples": "assumed: one sample a minute, 60 % while a cell runs and 0 % "
    "otherwise (the service samples every 10 s; only the side of the 5 % threshold matters)",
    "image_labels": "assumed: the profiles' image is docker-stacks' PyTorch CUDA 12 build "
    "(org.jupyter.gpulab.cuda=12, min driver 525.60.13, min compute capability 5.0) on H100s "
    "(9.0, driver 570.86.15)",
    "lab_config": "assumed: the example lab's c.GPULab (labs.py): students 1g.10gb, 4 GPU-hours "
    "a week, one slice; researchers a whole H100, priority 10 where priority is on",
    "levers": "assumed: the fairshare lab's c.GPULab.fairshare_half_life is 7 days (Slurm's "
    "default PriorityDecayHalfLife, slurm.conf(5); --half-life-days), the session lab's "
    "research profile max_age 4 h (--research-max-hours); each is the gpulab lab plus that one "
    "setting",
    "spare": "assumed: the spare and all labs run the culler with "
    "c.GPULabService.gpu_idle_spare_active 5 min (--spare-minutes: the hub's 5-min activity "
    "refresh) and gpu_idle_spare_longest 1 h (--spare-longest-minutes, the product's default); "
    "an open tab counts as activity, as in hub_activity",
    "interaction_signal": "assumed: in the signal and all labs every server runs the lab image, "
    "so its JupyterLab extension reports its user's last keystroke, click or scroll (not an open "
    "tab, not a running kernel) to the service each minute they are at the keyboard; a server's "
    "interaction time is its user's keyboard time (leaving, sitting_length), not tab-open time; "
    "culled_at_keyboard_pct keeps its definition",
    "keep_and_cpu": "assumed: in the keep, cpu and all labs the GPU-idle warning is where the "
    "user works (JupyterLab's status bar), so a user at the keyboard sees it and acts with "
    "probability 0.8 (--lever-seen): Keep (the service's keep_server, their group's "
    "keeps_per_day, the product's default 2), or Move to CPU (move_to_cpu), after which they "
    "go on without a GPU for the rest of the sitting; in all, Keep first and Move to CPU once "
    "the day's keeps are spent. A user who does not act does as in the gpulab lab",
    "layout_schedule": "assumed: the schedule covers the first --layout-gpus MIG GPUs (1), class "
    "time is the booked sections (follow_bookings, from their 60-min lead), drain lead 30 min; "
    "a researcher refused a whole GPU takes the research-mig profile (3g.40gb or 7g.80gb) at "
    "once when one is free, else queues for the whole GPU. Re-laying is instant here (NVML's "
    "calls take seconds)",
}
#: probability that a user at the keyboard sees a GPU-idle warning shown in JupyterLab and acts
#: on it (Keep or Move to CPU); ``--lever-seen`` changes it
LEVER_SEEN = {"p": 0.8}


def data_file(name: str) -> Path:
    for base in (DATA, Path("/work/shared/data/workload")):
        if (base / name).exists():
            return base / name
    raise SystemExit(f"workload data {name} not found under {DATA}")


def day_weights(days: int) -> list[float]:
    """DataHub's daily active users from its first Monday, over their mean (``busy_days``)."""
    with open(data_file(DAILY)) as f:
        rows = list(csv.DictReader(f))
    users = [int(r["daily_active_users"]) for r in rows]
    first_monday = next(
        i for i, r in enumerate(rows) if datetime.fromisoformat(r["date"]).weekday() == 0
    )
    span = users[first_monday : first_monday + days]
    if len(span) < days:
        raise SystemExit(f"DataHub data covers {len(span)} days from its first Monday, not {days}")
    mean = sum(span) / len(span)
    return [u / mean for u in span]


def session_lengths() -> tuple[list[int], list[int]]:
    """DataHub's session-length histogram, hours 0-5 (``sitting_length``)."""
    with open(data_file(LENGTHS)) as f:
        rows = list(csv.DictReader(f))
    bins = [(int(r["length_hours_mod24"]), int(r["sessions"])) for r in rows]
    kept = [(h, n) for h, n in bins if h <= 5]
    return [h for h, _ in kept], [n for _, n in kept]


def below_threshold_shares(threshold: float = 5.0) -> dict[str, float]:
    """Share (percent) of utilisation samples below ``threshold`` % per published cluster
    (``utilisation_check``)."""
    out: dict[str, float] = {}
    with open(data_file(UTIL)) as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        if float(r["gpu_util_pct"]) < threshold:
            name = r["source"].split(" (")[0]
            out[name] = max(out.get(name, 0.0), float(r["cdf_pct"]))
    return {k: round(v, 1) for k, v in out.items()}

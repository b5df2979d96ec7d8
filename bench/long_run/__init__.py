"""long-run: a week-long job's memory, run folder and replay (issue 64), as bench/run.py's table.

A synthetic job of 8 ranks written by the ranks' own writer (engine/rank/reporter.py, through
engine/rank/event_files.py: its head, segments, digests), a step every 0.6 s of its own clock
(1,000,000 steps: a week), by 4 writer processes as fast as they go, while a monitor follows it as the
engine's run thread does (job.py); then what a user does with it (views.py): ``mgpu-tui open`` in a real
terminal, ``runs``, ``compare --runs``. At 1,000, 10,000 and 1,000,000 steps, each in fresh processes.
Goals (the issue's): the monitor's and the app's peak memory within 50 MB of the 1,000-step run's, the
run folder at most 100 MB a rank, ``open`` showing the run within 2 s; none growing with the length.

    python bench/run.py long-run                      (every length: ~15 min on 2 busy cores)
    python bench/long_run/job.py FOLDER STEPS         (one job, its monitor's figures as JSON)
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
LENGTHS = (1_000, 10_000, 1_000_000)


def _figures(script: str, *args: str, timeout: float) -> dict:
    done = subprocess.run(
        [sys.executable, str(HERE / script), *args], capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise RuntimeError(f"{script} {' '.join(args)}: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_long_run(lengths: tuple[int, ...] = LENGTHS) -> tuple[str, list[tuple[str, str]]]:
    rows = []
    for steps in lengths:
        with tempfile.TemporaryDirectory(prefix="mgpu-long-run-") as tmp:
            job = _figures("job.py", tmp, str(steps), timeout=7200)
            seen = _figures("views.py", job["folder"], str(steps), timeout=600)
        name = f"{steps:,} steps x 8 ranks"
        rows += [
            (f"{name}: written (8 ranks, 4 processes)", f"{job['write_s']:.0f} s"),
            (f"{name}: the monitor's peak RSS", f"{job['monitor_peak_mb']:.0f} MB"),
            (f"{name}: the monitor's CPU a step of the job", f"{job['monitor_cpu_us_a_step']:.1f} us"),
            (f"{name}: the run folder", f"{seen['folder_mb']:.1f} MB"),
            (f"{name}: the events of its largest rank", f"{seen['rank_mb']:.1f} MB"),
            (f"{name}: open: the app's first frame", f"{seen['first_frame_s']:.2f} s"),
            (f"{name}: open: the run shown (every rank's last step)", f"{seen['shown_s']:.2f} s"),
            (f"{name}: open: the app's peak RSS", f"{seen['app_peak_mb']:.0f} MB"),
            (f"{name}: its figures read back (FollowedRun, in-process)", f"{seen['replay_s']:.2f} s"),
            (f"{name}: runs", f"{seen['runs_s']:.2f} s"),
            (f"{name}: compare --runs (it and a copy)", f"{seen['compare_s']:.2f} s"),
        ]  # fmt: skip
    title = (
        "long-run: a job of 8 ranks at each length (goals: memory within 50 MB of 1,000 steps', "
        "<= 100 MB a rank on disk, open <= 2 s)"
    )
    return title, rows

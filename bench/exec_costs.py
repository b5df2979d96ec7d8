"""What `mgpu-tui exec` costs a command (bench/run.py's ``exec-start`` and ``exec-first-step``).

- ``exec-start``: ``python -c pass`` with the environment exec gives every process of the command
  (its sitecustomize first on PYTHONPATH, the run's variables) against bare, in interleaved pairs;
  the median of the pairs' differences. Goal: <= 5 ms: a process that never imports torch (a
  shell's python, a tool) pays a lookup an import, nothing more.
- ``exec-first-step``: seconds from ``mgpu-tui exec`` starting to the end of an unchanged
  one-process script's first step (the script prints when), with the watch and with
  ``--no-instrument``, in interleaved pairs. Goal: the watch adds <= 0.3 s (loading it once torch
  is imported, and finding the model the optimizer steps, at the first step).

The hooks' cost a step is the bootstrap's (bench/run.py ``bootstrap``): exec's ranks run the same.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from first_step import clean_env, first_step_times

from mgpu_tui.engine.launch.command import SITEWATCH_DIR, WATCH_PATHS
from mgpu_tui.engine.protocol.environment import RUN_DIR_ENV, RUN_ID_ENV, WATCH_PATHS_ENV

CLI = str(Path(sys.executable).with_name("mgpu-tui"))


def _seconds(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def bench_exec_start(pairs: int) -> tuple[str, list[list[str]]]:
    bare = clean_env()
    with tempfile.TemporaryDirectory() as run_dir:
        watched = {
            **bare,
            "PYTHONPATH": SITEWATCH_DIR,
            RUN_DIR_ENV: run_dir,
            RUN_ID_ENV: "bench",
            WATCH_PATHS_ENV: WATCH_PATHS,
        }
        argv = [sys.executable, "-c", "pass"]
        for _ in range(5):  # the page cache warm for both
            _seconds(argv, bare), _seconds(argv, watched)
        times: dict[str, list[float]] = {"bare": [], "under exec": []}
        for _ in range(pairs):
            times["bare"].append(_seconds(argv, bare))
            times["under exec"].append(_seconds(argv, watched))
    diffs = [w - b for b, w in zip(times["bare"], times["under exec"])]
    rows = [[how, str(pairs), f"{statistics.median(t) * 1e3:.1f}"] for how, t in times.items()]
    rows.append(["difference (median of pairs)", str(pairs), f"{statistics.median(diffs) * 1e3:+.1f}"])
    return "python -c pass, bare and with exec's environment (goal: <= 5 ms later)", rows


FIRST_STEP_SCRIPT = """
import time, torch
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    model(torch.randn(16, 64)).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    if step == 0:
        print(f"first step ended {time.time():.6f}", flush=True)
"""


def bench_exec_first_step(pairs: int) -> tuple[str, list[list[str]]]:
    def line(*ours: str):
        return lambda script, runs: [
            CLI,
            "exec",
            "--run-dir",
            str(runs),
            "--quiet",
            *ours,
            "--",
            sys.executable,
            str(script),
        ]

    lines = {"watched": line(), "--no-instrument": line("--no-instrument")}
    times = first_step_times(FIRST_STEP_SCRIPT, lines, "logs/command/stdout.log", pairs)
    diffs = [w - b for w, b in zip(times["watched"], times["--no-instrument"])]
    rows = [[how, str(pairs), f"{statistics.median(t):.2f}"] for how, t in times.items()]
    rows.append(["difference (median of pairs)", str(pairs), f"{statistics.median(diffs):+.2f}"])
    return (
        "a one-process script's first step under mgpu-tui exec, from launch (goal: <= 0.3 s later)",
        rows,
    )

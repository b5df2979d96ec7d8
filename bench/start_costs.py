"""What watching costs a command at its start.

- ``first-step`` (run --script) and ``exec-first-step``: seconds from a command's start to the end
  of a script's first step, as the script itself printed it ("first step ended <time>"), each
  launch line in alternated pairs (first_step_times).
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
from collections.abc import Callable
from pathlib import Path

from common import CLI, clean_env, table

from mgpu_tui.engine.launch.command import SITEWATCH_DIR, WATCH_PATHS
from mgpu_tui.engine.protocol.environment import RUN_DIR_ENV, RUN_ID_ENV, WATCH_PATHS_ENV

# A launch line, given the script and the run folder.
Line = Callable[[Path, Path], list[str]]


def first_step_times(
    script_text: str, lines: dict[str, Line], log: str, pairs: int
) -> dict[str, list[float]]:
    """For each launch line, ``pairs`` seconds from its start to the end of the script's first step,
    read from the log its run folder keeps (``log``: a glob under the run folder)."""
    times: dict[str, list[float]] = {how: [] for how in lines}
    with tempfile.TemporaryDirectory() as tmp:
        script, runs = Path(tmp, "job.py"), Path(tmp, "runs")
        script.write_text(script_text)
        for _ in range(pairs):
            for how, line in lines.items():
                started = time.time()
                subprocess.run(line(script, runs), cwd=tmp, capture_output=True, env=clean_env(), check=True)
                run = max(runs.iterdir(), key=lambda p: p.stat().st_mtime)
                printed = next(run.glob(log)).read_text()
                times[how].append(float(printed.split("first step ended ")[1].split()[0]) - started)
                subprocess.run(["rm", "-rf", str(run)], check=True)
    return times


# Five steps of a model, the first one's end printed (first_step_times reads it).
FIVE_STEPS = """\
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    model(torch.randn(16, 64)).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    if step == 0:
        print(f"first step ended {time.time():.6f}", flush=True)
"""

# run --script's: two ranks, DDP over gloo.
RUN_SCRIPT = (
    """
import os, sys, time, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(64, 8))
"""
    + FIVE_STEPS
    + "dist.destroy_process_group()\n"
)


def bench_first_step(pairs: int) -> str:
    """Seconds from the command's start to the end of the script's first step, as the script's own
    rank 0 printed it: with the bootstrap and bare, alternated."""

    def line(*ours: str):
        return lambda script, runs: [
            CLI,
            "run",
            "--script",
            str(script),
            "--nproc",
            "2",
            "--run-dir",
            str(runs),
            "--quiet",
            *ours,
        ]

    lines = {"bootstrap": line(), "--no-instrument": line("--no-instrument")}
    times = first_step_times(RUN_SCRIPT, lines, "logs/*/attempt_0/0/stdout.log", pairs)
    base = statistics.median(times["--no-instrument"])
    rows = [
        [how, pairs, f"{statistics.median(t):.2f}", f"{statistics.median(t) - base:+.2f}"]
        for how, t in times.items()
    ]
    return "an unchanged script's first step, from launch (goal: the bootstrap adds <= 0.3 s)\n" + table(
        ["", "runs", "median s", "vs bare"], rows
    )


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


# exec's: one process, no process group.
EXEC_SCRIPT = (
    """
import time, torch
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
"""
    + FIVE_STEPS
)


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
    times = first_step_times(EXEC_SCRIPT, lines, "logs/command/stdout.log", pairs)
    diffs = [w - b for w, b in zip(times["watched"], times["--no-instrument"])]
    rows = [[how, str(pairs), f"{statistics.median(t):.2f}"] for how, t in times.items()]
    rows.append(["difference (median of pairs)", str(pairs), f"{statistics.median(diffs):+.2f}"])
    return (
        "a one-process script's first step under mgpu-tui exec, from launch (goal: <= 0.3 s later)",
        rows,
    )

"""help, check and compare: mgpu-tui's own commands end to end, as a user runs them (bench/run.py says
the goals)."""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from common import CLI, table, timed


def bench_help(repeats: int) -> str:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([CLI, "--help"], stdout=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    row = ["mgpu-tui --help", repeats, f"{statistics.median(times):.3f}", f"{max(times):.3f}"]
    return "CLI start-up (goal < 0.2 s)\n" + table(["command", "n", "median s", "worst s"], [row])


def bench_check(repeats: int) -> str:
    """``--check --level 1`` and the default level 2, end to end, as a user runs them."""
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for level, goal in (("1", 3.0), ("2", 20.0)):
            times, counts = [], []
            for _ in range(repeats):
                seconds, done = timed([CLI, "--check", "--level", level, "--json", "-", "--run-dir", work])
                if done.returncode != 0:
                    raise SystemExit(
                        f"--check --level {level} exited {done.returncode}: {done.stderr[-500:]}"
                    )
                times.append(seconds)
                counts.append(len(json.loads(done.stdout)["checks"]))
            rows.append(
                [
                    f"--check --level {level}",
                    f"{statistics.median(times):.2f} s",
                    f"{min(times):.2f}-{max(times):.2f} s",
                    str(counts[0]),
                    f"<= {goal:g} s",
                ]
            )
    return f"mgpu-tui --check, {repeats} runs each (median)\n" + table(
        ["command", "wall", "range", "checks", "goal"], rows
    )


def bench_compare(repeats: int, steps: int) -> str:
    """What compare adds to the runs it makes: its wall time minus the sum of the runs' own durations."""

    rows = []
    with tempfile.TemporaryDirectory() as work:
        for i in range(repeats):
            argv = [
                CLI,
                "compare",
                "ddp",
                "fsdp",
                "pipeline",
                "--nproc",
                "2",
                "--steps",
                str(steps),
                "--device",
                "cpu",
                "--json",
                "--run-dir",
                work,
            ]
            seconds, done = timed(argv)
            if done.returncode != 0:
                raise SystemExit(f"compare exited {done.returncode}: {done.stderr[-500:]}")
            report = json.loads(done.stdout.strip().splitlines()[-1])
            runs = sum(r["duration_s"] for r in report["rows"])
            # The same rows again, read from the finished runs' records (compare --runs): no rank runs.
            folders = [r["run_dir"] for r in report["rows"]]
            again, redone = timed([CLI, "compare", "--runs", *folders, "--out", f"{work}/again-{i}.json"])
            if redone.returncode != 0:
                raise SystemExit(f"compare --runs exited {redone.returncode}: {redone.stderr[-500:]}")
            rows.append(
                [
                    str(i + 1),
                    f"{seconds:.2f} s",
                    f"{runs:.2f} s",
                    f"{seconds - runs:.2f} s",
                    f"{100 * (seconds - runs) / runs:.1f}%",
                    f"{again:.2f} s",
                ]
            )
    headers = ["#", "compare wall", "sum of runs", "added", "added %", "--runs of them"]
    return (
        f"compare ddp fsdp pipeline --nproc 2 --steps {steps} (CPU): wall vs the runs' own time; "
        "goal <= 2%; the same compared again from their records (compare --runs): goal < 2 s\n"
        + table(headers, rows)
    )


FAILURES = (
    # (what, the demo's flags after --, mgpu-tui's own flags, goal: launch to exit in s)
    ("a rank raises at step 5", ("--fail-at-step", "5", "--fail-rank", "1"), (), 15.0),
    (
        "a rank hangs at step 5 (--stall-timeout 5)",
        ("--fail-at-step", "5", "--fail-rank", "1", "--fail-kind", "hang"),
        ("--stall-timeout", "5"),
        30.0,
    ),
)


def bench_failures(repeats: int) -> str:
    """How soon a failing run ends, as ``run ddp --nproc 2`` on the CPU: from launch to the command's
    exit, and from the failing rank's last step to that exit (every rank gone). The suite's tests
    of the same failures assert what happens, not how soon (they run beside other tests' load)."""
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for what, demo, ours, goal in FAILURES:
            walls, afters = [], []
            for i in range(repeats):
                runs = f"{work}/{len(rows)}-{i}"
                argv = [CLI, "run", "ddp", "--nproc", "2", "--steps", "1000", "--device", "cpu"]
                seconds, done = timed([*argv, *ours, "--run-dir", runs, "--", *demo])
                ended = time.time()
                if done.returncode != 1:
                    raise SystemExit(f"{what}: exited {done.returncode}: {done.stderr[-500:]}")
                events = next(Path(runs).glob("*/events/rank1.jsonl")).read_text().splitlines()
                last = max(e["t"] for e in map(json.loads, events) if e["kind"] == "step")
                walls.append(seconds)
                afters.append(ended - last)
            rows.append(
                [
                    what,
                    f"{statistics.median(walls):.1f} s",
                    f"{max(walls):.1f} s",
                    f"{statistics.median(afters):.1f} s",
                    f"<= {goal:g} s",
                ]
            )
    headers = ["failure", "launch to exit", "worst", "last step to exit", "goal"]
    return f"a failing run ddp --nproc 2 on the CPU, {repeats} runs each (median)\n" + table(headers, rows)

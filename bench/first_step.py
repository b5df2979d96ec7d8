"""Seconds from a command's start to the end of a script's first step, as the script itself
printed it ("first step ended <time>"): the way bench/run.py's ``first-step`` and
bench/exec_costs.py's ``exec-first-step`` both measure, each launch line in alternated pairs."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# A launch line, given the script and the run folder.
Line = Callable[[Path, Path], list[str]]


def clean_env() -> dict[str, str]:
    """This environment without a run's or a launcher's variables: each launch makes its own."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("MGPU_", "PET_", "TORCHELASTIC_"))}


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

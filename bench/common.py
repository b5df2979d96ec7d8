"""What the benches share: alternated pairs of processes (the way they compare two ways of running
the same Python code, bare and watched, so that a machine's drift falls on both alike), the
environment each launch starts from, the CLI and the app's command line, a timed command, and the
table each prints."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from mgpu_tui.console import table as console_table


def figure(code: str, *args: str, env: dict) -> str:
    """What ``python -c code args`` printed (a figure, or a repr of several)."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout


def alternated(code: str, hows: tuple[str, ...], pairs: int, env: dict) -> dict[str, list[float]]:
    """``pairs`` rounds of ``code`` run once with each of ``hows`` as its argument, in turn: each
    way's printed figures."""
    loops: dict[str, list[float]] = {how: [] for how in hows}
    for _ in range(pairs):
        for how in hows:
            loops[how].append(float(figure(code, how, env=env)))
    return loops


def clean_env() -> dict[str, str]:
    """This environment without a run's or a launcher's variables: each launch makes its own."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("MGPU_", "PET_", "TORCHELASTIC_"))}


CLI = str(Path(sys.executable).with_name("mgpu-tui"))


# The app in a terminal: COLUMNS and LINES, where set, would win over the terminal's size.
APP = f"env -u COLUMNS -u LINES {CLI}"


def table(headers, rows) -> str:
    """The first column (what was measured) reads left to right; the figures line up on the right."""
    return console_table(headers, [[str(c) for c in r] for r in rows], right=range(1, len(headers)))


def timed(argv: list[str], env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    """Seconds ``argv`` took, end to end, and what it did."""
    started = time.perf_counter()
    done = subprocess.run(argv, env=env or clean_env(), capture_output=True, text=True)
    return time.perf_counter() - started, done

"""Alternated pairs of processes: the way the benches compare two ways of running the same Python
code (bare and watched), so that a machine's drift falls on both alike."""

from __future__ import annotations

import subprocess
import sys


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

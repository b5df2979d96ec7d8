"""The engine's requests to the ranks of a stalled run: their Python stacks and their flight records,
asked by a file each rank's reporter thread polls (never a signal), and their answers awaited a
few seconds at most."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

from mgpu_tui.engine.protocol.folder import write_atomic
from mgpu_tui.engine.protocol.rundir import FR_REQUEST, STACKS_REQUEST, RunDir

STACKS_WAIT_S = 3.0  # how long ranks get to write their stacks after the request


def request_stacks(answers: Iterable[Path], run_dir: Path) -> None:
    """Ask every rank for its stacks (a file each rank's reporter thread polls: no signal, so the
    script's own SIGUSR2 handler, or its reset of SIGUSR2, is never touched), then wait (a few
    seconds at most) for the stalled ranks' ``answers`` (their stacks files)."""
    asked = _request(run_dir, STACKS_REQUEST)
    deadline = time.monotonic() + STACKS_WAIT_S

    def answered(path: Path) -> bool:
        try:
            return asked is not None and path.stat().st_mtime >= asked
        except OSError:
            return False

    paths = tuple(answers)
    while time.monotonic() < deadline and not all(answered(path) for path in paths):
        time.sleep(0.1)


def _request(run_dir: Path, name: str) -> float | None:
    """Write the request ``requests/<name>`` (the ranks' reporter threads answer it); the time of
    the request, to tell the answers from older ones. None when it cannot be asked: the ranks own
    the folder, and one may have put a FIFO, a link or a folder where the request goes (written as
    protocol/folder.py writes: never through a link, never blocking)."""
    request = RunDir(run_dir).request_path(name)
    try:
        if not (request.parent.is_dir() and not request.parent.is_symlink()):
            request.parent.mkdir()
        write_atomic(request, str(time.time()), root=run_dir)
        return os.stat(request, follow_symlinks=False).st_mtime  # the clock the answers' files keep
    except OSError:
        return None


def request_flight_records(run_dir: Path) -> float | None:
    """Ask every rank for its flight recorder's trace (its reporter's thread answers into fr/)."""
    return _request(run_dir, FR_REQUEST)

"""NCCL's own account of a CUDA run, kept in its run directory and read back for its summary.

A run on NCCL writes its ranks' NCCL_DEBUG=INFO lines to ``nccl-<host>.<pid>.log`` in the run
directory (launch/command.py sets NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE unless the
user set NCCL_DEBUG). When the run ends, they are read (machine/nccl_log.py) into what the
summary says of them: the transports NCCL chose, its version, and its warnings and errors.
"""

from __future__ import annotations

from dataclasses import dataclass

from mgpu_tui.engine.machine.nccl_log import read_nccl_log
from mgpu_tui.engine.protocol.folder import read_capped
from mgpu_tui.engine.protocol.rundir import RunDir

MAX_FILE_BYTES = 1 << 20  # start-up lines are a few hundred a rank: the head of a file says it all
MAX_FILES = 1024
MAX_TOTAL_BYTES = 16 << 20  # of all the files together: the ranks write them, and may write much


@dataclass(frozen=True)
class NcclFigures:
    """A run's NCCL reading, as its summary keeps it (``nccl``)."""

    summary: str  # the reading in one line
    versions: tuple[str, ...] = ()
    transports: tuple[str, ...] = ()
    ring_channels: int | None = None
    warnings: tuple[str, ...] = ()  # the first 20
    errors: tuple[str, ...] = ()  # the first 20
    files: int = 0  # the NCCL logs read


def nccl_figures(run_dir: RunDir) -> NcclFigures | None:
    """The run's NCCL reading for its summary; None when NCCL wrote nothing here (the CPU, gloo)."""
    paths = run_dir.nccl_logs()[:MAX_FILES]
    lines: list[str] = []
    left = MAX_TOTAL_BYTES
    for path in paths:
        if left <= 0:
            break
        try:
            text = read_capped(path, min(MAX_FILE_BYTES, left), root=run_dir.path)
        except OSError:
            continue
        left -= len(text)
        lines += text.splitlines()
    if not lines:
        return None
    reading = read_nccl_log(lines)
    if not reading.nccl_lines:
        return None
    return NcclFigures(
        summary=reading.summary(),
        versions=tuple(reading.versions),
        transports=tuple(reading.transports),
        ring_channels=reading.ring_channels,
        warnings=tuple(w.message for w in reading.warnings)[:20],
        errors=tuple(reading.errors[:20]),
        files=len(paths),
    )

"""The frameworks' own launch lines under mgpu-tui (make test-frameworks): each job's own RESULT
lines are the truth."""

import subprocess
import sys
from pathlib import Path

from conftest import CLI

SCRIPTS = Path(__file__).resolve().parent / "scripts"
BIN = Path(sys.executable).parent  # accelerate, deepspeed: the launchers of this environment


def run_exec(
    tmp_path: Path, *command: str, ours=(), env=None, timeout: float = 240
) -> subprocess.CompletedProcess:
    """``mgpu-tui exec --json OURS -- COMMAND`` in tmp_path (its runs in tmp_path/runs)."""
    return subprocess.run(
        [*CLI, "exec", "--run-dir", str(tmp_path / "runs"), "--json", *ours, "--", *command],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
        env=env,
    )

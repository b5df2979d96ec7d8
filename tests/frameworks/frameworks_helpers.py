"""The frameworks' own launch lines under mgpu-tui (make test-frameworks): each job's own RESULT
lines are the truth."""

import functools
import sys
from pathlib import Path

import conftest

SCRIPTS = Path(__file__).resolve().parent / "scripts"
BIN = Path(sys.executable).parent  # accelerate, deepspeed: the launchers of this environment


# The frameworks' jobs take longer to start (their imports, DeepSpeed's op build).
run_exec = functools.partial(conftest.run_exec, timeout=240)

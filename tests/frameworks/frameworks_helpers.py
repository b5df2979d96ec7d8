"""The frameworks' own launch lines under mgpu-tui (make test-frameworks): each job's own RESULT
lines are the truth."""

import functools
import socket
import sys
from pathlib import Path

import conftest

SCRIPTS = Path(__file__).resolve().parent / "scripts"
BIN = Path(sys.executable).parent  # accelerate, deepspeed: the launchers of this environment


# The frameworks' jobs take longer to start (their imports, DeepSpeed's op build).
run_exec = functools.partial(conftest.run_exec, timeout=240)


def free_port() -> str:
    """A port free now, for a launcher whose default (29500: accelerate's, DeepSpeed's) another
    test's job, run beside this one, may hold."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])

"""The frameworks' own launch lines under mgpu-tui (make test-frameworks): each job's own RESULT
lines are the truth."""

import functools
import os
import socket
import sys
from pathlib import Path

import pytest

import conftest

SCRIPTS = Path(__file__).resolve().parent / "scripts"
BIN = Path(sys.executable).parent  # accelerate, deepspeed: the launchers of this environment


# The frameworks' jobs take longer to start (their imports, DeepSpeed's op build).
run_exec = functools.partial(conftest.run_exec, timeout=600)  # a hang guard; the tests set their own


def free_port() -> str:
    """A port free now, for a launcher whose default (29500: accelerate's, DeepSpeed's) another
    test's job, run beside this one, may hold."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


@pytest.fixture(scope="session")
def deepspeed_cpu(tmp_path_factory) -> dict[str, str]:
    """DeepSpeed on the CPU, its communication op built once for the whole session (ninja, a few
    minutes on 2 cores): every DeepSpeed job of every worker shares one extensions folder, and
    torch's build lock makes a second builder wait for the first."""
    folder = conftest.once_per_session(tmp_path_factory, "deepspeed-extensions", lambda folder: folder)
    return {**os.environ, "DS_ACCELERATOR": "cpu", "TORCH_EXTENSIONS_DIR": str(folder)}

"""scripts/gpu_check.py (make gpu-check) where there is no GPU: one sentence and exit 3, nothing run.

Where there is one, it is the GPU validation itself (docs/gpu-validation.md); it needs a GPU,
so here only its refusals are tested.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

SCRIPT = REPO / "scripts" / "gpu_check.py"


def gpu_check(tmp_path: Path, *args: str, path: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": path}
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "out"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def one_sentence(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].endswith(".") and "Traceback" not in text
    return lines[0]


@pytest.mark.parametrize("args", [(), ("--gpu-or-exit",)])
def test_no_driver_is_one_sentence_and_exit_3(tmp_path, args):
    done = gpu_check(tmp_path, *args, path="/usr/bin:/bin")  # no nvidia-smi on it
    assert done.returncode == 3 and done.stdout == ""
    assert "no NVIDIA GPU here" in one_sentence(done.stderr)
    assert not (tmp_path / "out").exists()  # nothing ran, nothing written


def test_a_driver_that_finds_no_gpu_is_one_sentence_and_exit_3(tmp_path):
    # What nvidia-smi prints (exit 6) on a machine with the driver and no GPU left to it.
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    fake.chmod(0o755)
    done = gpu_check(tmp_path, path=f"{fake.parent}:/usr/bin:/bin")
    assert done.returncode == 3
    assert "No devices were found" in one_sentence(done.stderr)

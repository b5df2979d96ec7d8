"""Helpers shared by the tests: run the real CLI, and prove no process of a run survives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from mgpu_tui.engine.run.summary import RunSummary

CLI = [str(Path(sys.executable).with_name("mgpu-tui"))]

# make test runs two workers on two cores: one OpenMP thread per process, as torchrun gives
# each rank, so that idle OpenMP threads do not spin against the other worker's ranks.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The app's log goes under XDG_STATE_HOME: here, not in the user's home.
os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="mgpu-tui-state-"))


def run_cli(*args: str, timeout: float = 120, env=None, **kwargs) -> subprocess.CompletedProcess:
    """Run mgpu-tui; ``env`` (default: this process's) goes without torchrun's PET_* variables."""
    env = {k: v for k, v in (os.environ if env is None else env).items() if not k.startswith("PET_")}
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, env=env, **kwargs
    )


def summary_from(output: str) -> RunSummary:
    """The run's summary from a command's output: its last line is the ``--json`` document."""
    return RunSummary.from_json(json.loads(output.strip().splitlines()[-1]))


def read_summary(path: Path) -> RunSummary:
    return RunSummary.from_json(json.loads(path.read_text()))


def only_run_dir(root: Path) -> Path:
    runs = [p for p in root.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def live_processes_of(run_dir: Path) -> list[psutil.Process]:
    """Processes still alive that belong to the run: tagged with its run id, or a rank's pid."""
    run_id = json.loads((run_dir / "spec.json").read_text())["run_id"]
    pids = set()
    for events in (run_dir / "events").glob("rank*.jsonl"):
        for line in events.read_text().splitlines():
            record = json.loads(line)
            if record["kind"] == "hello":
                pids.add(record["pid"])
    alive = []
    for proc in psutil.process_iter():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.pid in pids or proc.environ().get("MGPU_RUN_ID") == run_id:
                alive.append(proc)
        except psutil.Error:
            continue
    return alive


@pytest.fixture
def runs_root(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    root.mkdir()
    return root

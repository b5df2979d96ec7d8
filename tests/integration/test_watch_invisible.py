"""Issue 54: the watch never changes what a job does. Each shape in which the old FLOP count (a
replay of the forward on fake and meta tensors, once per input shape) changed the job, run bare and
under ``mgpu-tui exec`` (tests/scripts/watch_invisible.py): everything the job observes is the same
bit for bit (its losses as hex floats, torch's CPU generator, Python's ``random`` and NumPy's states,
its parameters and buffers, its forward calls, the file it saves, its stdout and stderr, its exit
code), and the watch was there (it counted the job's steps and their FLOPs), so that a job the watch
never hooked cannot pass."""

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CLI, REPO, live_processes_of, only_run_dir, summary_from

SCRIPT = REPO / "tests" / "scripts" / "watch_invisible.py"
SHAPES = [
    "kept_output",
    "python_random",
    "host_noise",
    "batchnorm",
    "grad_hook",
    "host_all_reduce",
    "after_training",
]


def observed(folder: Path, done: subprocess.CompletedProcess) -> dict:
    """What the job saw: its own stdout and stderr (redirected by its own shell), its file, its code."""
    names = [name for name in ("out.txt", "err.txt", "model.pt") if (folder / name).exists()]
    files = {name: (folder / name).read_bytes() for name in names}
    return {"code": done.returncode, **files}


def bare_and_watched(tmp_path: Path, shape: str) -> tuple[dict, dict, subprocess.CompletedProcess, Path]:
    """The job run both ways at once (each is seconds of starting torch), each in a folder of its own."""
    job = f"{shlex.quote(sys.executable)} {shlex.quote(str(SCRIPT))} --shape {shape} > out.txt 2> err.txt"
    runs = tmp_path / "runs"
    lines = {
        "bare": ["sh", "-c", job],
        "watched": [*CLI, "exec", "--run-dir", str(runs), "--json", "--", "sh", "-c", job],
    }
    started = {}
    for how, argv in lines.items():
        (tmp_path / how).mkdir()
        started[how] = subprocess.Popen(
            argv, cwd=tmp_path / how, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    ended = {}
    for how, proc in started.items():
        out, err = proc.communicate(timeout=300)
        ended[how] = subprocess.CompletedProcess(lines[how], proc.returncode, out, err)
    bare = observed(tmp_path / "bare", ended["bare"])
    watched = observed(tmp_path / "watched", ended["watched"])
    return bare, watched, ended["watched"], only_run_dir(runs)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_job_observes_nothing_of_the_watch_and_the_watch_counted_its_steps(tmp_path, shape):
    bare, watched, done, run_dir = bare_and_watched(tmp_path, shape)
    assert bare["code"] == 0, bare["err.txt"].decode()[-3000:]
    assert watched.keys() == bare.keys()
    for what in bare:
        assert watched[what] == bare[what], (what, watched[what], bare[what])
    summary = summary_from(done.stdout)
    assert summary.steps == 8, done.stderr[-3000:]
    assert summary.compute is not None and summary.compute.tflops, (summary.compute, done.stderr[-3000:])
    assert live_processes_of(run_dir) == []

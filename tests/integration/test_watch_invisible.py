"""Issue 54: the watch never changes what a job does. Each shape in which the old FLOP count (a
replay of the forward on fake and meta tensors, once per input shape) changed the job, run bare and
under ``mgpu-tui exec`` (tests/scripts/watch_invisible.py): everything the job observes is the same
bit for bit (its losses as hex floats, torch's CPU generator, Python's ``random`` and NumPy's states,
its parameters and buffers, its forward calls, the file it saves, its stdout and stderr, its exit
code), and the watch was there (it counted the job's steps and their FLOPs), so that a job the watch
never hooked cannot pass."""

import pytest

from conftest import live_processes_of, summary_from
from watched_steps import bare_and_watched

SHAPES = [
    "kept_output",
    "python_random",
    "host_noise",
    "batchnorm",
    "grad_hook",
    "host_all_reduce",
    "after_training",
]


@pytest.mark.timeout(300)  # a hang guard: two jobs at once, on a loaded machine up to 90 s
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

"""However a job comes to import torch, the watch is in it: an availability check first
(``importlib.util.find_spec("torch")``, which transformers, accelerate, datasets and evaluate make
at their own import, before the script's ``import torch``), ``importlib.import_module``, and
``importlib.util.LazyLoader``; under ``exec`` (the sitecustomize) and under the drop-in (the
bootstrap). The watch's import hook once went away on the first look-up, so a job whose first
contact with torch was an availability check was never watched: 0 steps, world size 0. Each run
here is held to the script's own account (its RESULT lines). ``import transformers`` first, the
real thing, is in tests/frameworks."""

import sys

import pytest

from conftest import CLI, REPO, results_of, run_exec, run_in, summary_from

SCRIPT = str(REPO / "tests" / "scripts" / "import_shapes.py")
SHAPES = ["find_spec", "import_module", "lazy"]


def watched(done):
    summary = summary_from(done.stdout)
    assert summary.status == "ok", done.stderr[-3000:]
    truth = results_of(done.stdout + done.stderr)
    assert sorted(r.rank for r in summary.ranks) == sorted(truth), done.stderr[-3000:]
    for rank in summary.ranks:
        assert rank.last_step == truth[rank.rank]["steps"] == 5
        assert rank.loss == pytest.approx(truth[rank.rank]["loss"], abs=1e-6)
    return summary


@pytest.mark.parametrize("shape", SHAPES)
def test_exec_watches_a_job_however_it_imports_torch(tmp_path, shape):
    done, _ = run_exec(tmp_path, sys.executable, SCRIPT, "--shape", shape)
    summary = watched(done)
    assert summary.world_size == 1


@pytest.mark.parametrize("shape", SHAPES)
def test_the_drop_in_watches_a_job_however_it_imports_torch(tmp_path, shape):
    # Two DDP ranks, but for LazyLoader: torch under LazyLoader cannot start DDP even bare (its C++
    # types register twice and the process aborts), so that shape is one process, as users run it.
    nproc = "1" if shape == "lazy" else "2"
    argv = [*CLI, "torchrun", "--run-dir", str(tmp_path / "runs"), "--json",
            "--nproc-per-node", nproc, SCRIPT, "--shape", shape]  # fmt: skip
    done, _ = run_in(tmp_path, argv)
    summary = watched(done)
    assert summary.world_size == int(nproc)

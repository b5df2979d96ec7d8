"""PyTorch Lightning, as its docs show it (tests/frameworks/scripts/lightning_ddp.py), under
mgpu-tui: the job trains exactly as it does bare, and every rank's steps, samples/s and loss are
its own log's. Lightning's DDP strategy calls ``DistributedDataParallel(module=...)``, which the
watch's wrapper once broke with "got multiple values for argument 'module'"."""

import subprocess
import sys
from pathlib import Path

from conftest import CLI, live_processes_of, only_run_dir, results_of, summary_from

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def test_lightning_ddp_under_the_torchrun_drop_in_trains_as_bare_and_shows_each_rank(tmp_path):
    script = str(SCRIPTS / "lightning_ddp.py")
    bare = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", script],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert bare.returncode == 0, bare.stderr[-3000:]
    truth = results_of(bare.stdout + bare.stderr)
    assert sorted(truth) == [0, 1]
    runs = tmp_path / "runs"
    watched = subprocess.run(
        [*CLI, "torchrun", "--nproc-per-node", "2", "--run-dir", str(runs), "--json", script],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    summary = summary_from(watched.stdout)
    assert summary.status == "ok", watched.stderr[-3000:]
    assert results_of(watched.stderr + watched.stdout) == truth  # the same training, to the last digit
    assert summary.world_size == 2 and summary.backend == "gloo" and summary.steps == 12
    assert summary.batch_size == 2 * truth[0]["batch"]
    for rank in summary.ranks:
        mine = truth[rank.rank]
        assert rank.last_step == mine["steps"] == 12
        assert rank.samples_per_s > 0 and abs(rank.loss - mine["loss"]) < 1e-6
        assert rank.compute.tflops > 0  # training_step runs inside DDP's forward: counted as it runs
    assert summary.compute.tflops == sum(r.compute.tflops for r in summary.ranks)
    assert "mgpu-tui: some figures of this rank will be missing" not in watched.stderr
    assert live_processes_of(only_run_dir(runs)) == []


def test_lightning_with_gradient_accumulation_counts_its_forward_and_backward_once(tmp_path):
    """Issue 41: Lightning runs the forward and the backward inside ``optimizer.step(closure)`` (and
    outside it, for the micro-batches that only accumulate): each moment is told to one part, so the
    parts of a step add up to its time."""
    script = str(SCRIPTS / "lightning_ddp.py")
    runs = tmp_path / "runs"
    watched = subprocess.run(
        [*CLI, "torchrun", "--nproc-per-node", "2", "--run-dir", str(runs), "--json", script,
         "--accumulate", "2", "--epochs", "4"],
        capture_output=True, text=True, timeout=180, cwd=tmp_path,
    )  # fmt: skip
    summary = summary_from(watched.stdout)
    assert summary.status == "ok", watched.stderr[-3000:]
    assert summary.steps == 12  # 96 samples / 8 a batch / 2 ranks = 6 batches an epoch: 3 steps of 2
    assert [a.rank for a in summary.anatomy] == [0, 1]
    for rank in summary.anatomy:
        assert abs(rank.parts_s / rank.step_s - 1) <= 0.10, rank
        assert rank.forward_s > 0 and rank.backward_s > 0 and rank.optimizer_s > 0 and rank.data_s > 0, rank
        # The closure's forward and backward are theirs, not the optimizer's as well: what is left of
        # the optimizer's call is its update of a few hundred parameters and Lightning's hooks.
        assert rank.optimizer_s < rank.forward_s + rank.backward_s, rank
    assert "mgpu-tui: some figures of this rank will be missing" not in watched.stderr
    assert live_processes_of(only_run_dir(runs)) == []

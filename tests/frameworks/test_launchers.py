"""The frameworks' own launchers under `mgpu-tui exec`, unchanged, 2 CPU ranks each: Lightning's
(the script runs itself again for rank 1), accelerate launch (torch elastic inside accelerate's own
process), and DeepSpeed's (one process a rank, RANK and WORLD_SIZE in the environment, its shared-memory
op built with ninja first). Every rank, world size, steps, batch and loss against the job's own log."""

import os
import sys

import pytest

from conftest import live_processes_of, only_run_dir, results_of, summary_from
from frameworks_helpers import BIN, SCRIPTS, free_port, run_exec

CPU_ACCELERATE = {**os.environ, "ACCELERATE_USE_CPU": "1"}


def finished(done, tmp_path):
    summary = summary_from(done.stdout)
    assert summary.status == "ok", done.stderr[-4000:]
    assert live_processes_of(only_run_dir(tmp_path / "runs")) == []
    return summary, results_of(done.stderr)


def test_lightnings_own_launcher_two_ranks(tmp_path):
    done, _ = run_exec(tmp_path, sys.executable, str(SCRIPTS / "lightning_ddp.py"))
    summary, truth = finished(done, tmp_path)
    assert sorted(truth) == [0, 1] and summary.mode == "exec"
    assert summary.world_size == 2 and summary.steps == 12 and summary.batch_size == 16
    for rank in summary.ranks:
        assert rank.last_step == truth[rank.rank]["steps"] == 12 and rank.samples_per_s > 0
        assert abs(rank.loss - truth[rank.rank]["loss"]) < 1e-6


@pytest.mark.timeout(300)  # Lightning starts the ranks' processes twice, each importing it
def test_lightning_ddp_spawn_then_test_is_one_job_of_two_ranks(tmp_path):
    """strategy="ddp_spawn" starts the ranks' processes again for trainer.test: each says hello
    again once its first process said done, the same rank's later phase (4 malformed lines before)."""
    args = ["--strategy", "ddp_spawn", "--test"]
    done, _ = run_exec(tmp_path, sys.executable, str(SCRIPTS / "lightning_ddp.py"), *args)
    summary, _ = finished(done, tmp_path)
    assert summary.malformed_events == 0 and summary.world_size == 2 and not summary.trainers
    assert [r.last_step for r in summary.ranks] == [12, 12] and summary.batch_size == 16
    assert summary.finished_training and not summary.phases
    hellos = [
        line for rank in (0, 1) for line in (only_run_dir(tmp_path / "runs") / "events" / f"rank{rank}.jsonl")
        .read_text().splitlines() if '"kind":"hello"' in line
    ]  # fmt: skip
    assert len(hellos) == 4  # fit's and test's processes, two ranks each


def test_lightning_on_one_device_counts_the_batches_its_dataloader_gave(tmp_path):
    """One device, no DDP: Lightning calls the module's training_step, never its forward, so no
    model's forward sees the batch; the DataLoader's training batches are the samples."""
    done, _ = run_exec(
        tmp_path, sys.executable, str(SCRIPTS / "lightning_ddp.py"), "--devices", "1", "--strategy", "auto"
    )
    summary, truth = finished(done, tmp_path)
    (rank,) = summary.ranks
    assert summary.world_size == 1 and rank.last_step == truth[0]["steps"] == 24
    assert summary.batch_size == 8 and summary.batch_size_source == "the batches its DataLoader gave"
    assert rank.samples_per_s > 0 and abs(rank.loss - truth[0]["loss"]) < 1e-6


def test_accelerate_launch_a_loop_with_gradient_accumulation(tmp_path):
    script = str(SCRIPTS / "accelerate_loop.py")
    launch = [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2",
              "--main_process_port", free_port(), script]  # fmt: skip
    done, _ = run_exec(tmp_path, *launch, env=CPU_ACCELERATE)
    summary, truth = finished(done, tmp_path)
    assert sorted(truth) == [0, 1] and summary.world_size == 2 and summary.steps == 6
    mine = truth[0]
    assert (
        summary.batch_size == mine["batch"] * mine["accumulation"] * 2
    )  # micro-batch x accumulation x ranks
    for rank in summary.ranks:
        assert rank.last_step == 6 and abs(rank.loss - truth[rank.rank]["loss"]) < 1e-5


def test_accelerate_launch_a_hugging_face_trainer(tmp_path):
    script = str(SCRIPTS / "hf_trainer.py")
    launch = [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2",
              "--main_process_port", free_port(), script]  # fmt: skip
    done, _ = run_exec(tmp_path, *launch, env=CPU_ACCELERATE)
    summary, truth = finished(done, tmp_path)
    mine = truth[0]
    assert summary.world_size == 2 and summary.steps == mine["steps"] == 6
    assert summary.batch_size == mine["batch"] * mine["accumulation"] * 2
    assert all(r.samples_per_s > 0 and r.tokens_per_s > 0 for r in summary.ranks)
    # The Trainer logs the mean over the ranks of each rank's step loss: the ranks' own, averaged.
    mean = sum(r.loss for r in summary.ranks) / 2
    assert mean == pytest.approx(mine["losses"][-1], abs=1e-4)


@pytest.mark.timeout(400)
def test_the_deepspeed_launcher_every_rank_and_no_stall_while_its_op_builds(tmp_path):
    """DeepSpeed builds its shared-memory op with ninja when it starts (tens of seconds, on the CPU),
    its launcher starting one process a rank with RANK and WORLD_SIZE and no torchrun: every rank is
    seen, and with a 5 s stall timeout that stops the run, nothing is called stalled. (A rank waiting
    on its own busy compiler is never a stall: tests/frameworks/test_never_breaks_the_job.py.)"""
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions")}
    launch = [str(BIN / "deepspeed"), "--num_gpus", "2", "--master_port", free_port(),
              str(SCRIPTS / "deepspeed_train.py")]  # fmt: skip
    stop_on_stall = ("--stall-timeout", "5", "--on-stall", "stop")
    done, _ = run_exec(tmp_path, *launch, ours=stop_on_stall, env=env, timeout=400)
    summary, truth = finished(done, tmp_path)
    assert sorted(truth) == [0, 1] and summary.world_size == 2 and summary.stall is None
    assert summary.steps == 8 and summary.batch_size == 8
    for rank in summary.ranks:
        assert rank.last_step == 8 and abs(rank.loss - truth[rank.rank]["loss"]) < 1e-6

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


def test_lightning_on_one_device_its_training_step_is_the_forward(tmp_path):
    """One device, no DDP: Lightning calls the module's training_step, never its forward, inside
    ``optimizer.step(closure)``; the training_step is the step's forward (its batch the samples, its
    time the forward's: it once went to the optimizer, and the forward read 0)."""
    done, _ = run_exec(
        tmp_path, sys.executable, str(SCRIPTS / "lightning_ddp.py"), "--devices", "1", "--strategy", "auto"
    )
    summary, truth = finished(done, tmp_path)
    (rank,) = summary.ranks
    assert summary.world_size == 1 and rank.last_step == truth[0]["steps"] == 24
    assert summary.batch_size == 8 and summary.batch_size_source == "the batches entering training_step"
    assert rank.samples_per_s > 0 and abs(rank.loss - truth[0]["loss"]) < 1e-6
    # Its training step is the forward: its FLOPs are counted there (the summary had no compute key).
    assert summary.compute.tflops > 0, summary.compute
    (parts,) = summary.anatomy
    assert parts.forward_s > 0 and parts.backward_s > 0 and parts.optimizer_s > 0, parts
    assert parts.optimizer_s < parts.forward_s + parts.backward_s, parts  # the closure's are not its


@pytest.mark.timeout(300)
def test_lightning_ddp_spawn_then_test_is_one_job_of_two_ranks(tmp_path):
    """ddp_spawn spawns the ranks for fit, and again for ``trainer.test``: the test's processes are
    the same ranks' later phase (they join a group again, and step nothing), never malformed lines
    or a second job; the steps, batch and losses are fit's."""
    done, run_dir = run_exec(
        tmp_path, sys.executable, str(SCRIPTS / "lightning_ddp.py"), "--strategy", "ddp_spawn", "--test"
    )
    summary, truth = finished(done, tmp_path)
    assert sorted(truth) == [0, 1] and summary.world_size == 2
    assert summary.steps == 12 and summary.batch_size == 16 and summary.malformed_events == 0
    assert not summary.trainers and not summary.phases and summary.finished_training
    hellos = [
        line for rank in (0, 1) for line in (run_dir / "events" / f"rank{rank}.jsonl")
        .read_text().splitlines() if '"kind":"hello"' in line
    ]  # fmt: skip
    assert len(hellos) == 4  # fit's and test's processes, two ranks each
    for rank in summary.ranks:
        assert rank.last_step == truth[rank.rank]["steps"] == 12
        assert abs(rank.loss - truth[rank.rank]["loss"]) < 1e-6
    for parts in summary.anatomy:
        assert parts.forward_s > 0 and parts.backward_s > 0 and parts.optimizer_s > 0, parts


def test_a_lightning_rank_that_fails_is_named_with_its_exception(tmp_path):
    done, _ = run_exec(
        tmp_path, sys.executable, str(SCRIPTS / "lightning_ddp.py"), env={**os.environ, "FAIL_RANK": "1"}
    )
    summary = summary_from(done.stdout)
    assert summary.status == "failed" and done.returncode == 1, done.stderr[-4000:]
    assert summary.root_cause.rank == 1, summary.root_cause
    assert summary.root_cause.message.startswith("IndexError: "), summary.root_cause
    assert live_processes_of(only_run_dir(tmp_path / "runs")) == []


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


@pytest.mark.timeout(900)  # a hang guard: the op's build takes minutes on a loaded machine
def test_the_deepspeed_launcher_every_rank_and_no_stall_while_its_op_builds(tmp_path):
    """DeepSpeed builds its shared-memory op with ninja when it starts (tens of seconds, on the CPU),
    its launcher starting one process a rank with RANK and WORLD_SIZE and no torchrun: every rank is
    seen, and with a 5 s stall timeout that stops the run, nothing is called stalled. (A rank waiting
    on its own busy compiler is never a stall: tests/frameworks/test_never_breaks_the_job.py.)"""
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions")}
    launch = [str(BIN / "deepspeed"), "--num_gpus", "2", "--master_port", free_port(),
              str(SCRIPTS / "deepspeed_train.py")]  # fmt: skip
    stop_on_stall = ("--stall-timeout", "5", "--on-stall", "stop")
    done, _ = run_exec(tmp_path, *launch, ours=stop_on_stall, env=env, timeout=900)
    summary, truth = finished(done, tmp_path)
    assert sorted(truth) == [0, 1] and summary.world_size == 2 and summary.stall is None
    assert summary.steps == 8 and summary.batch_size == 8
    for rank in summary.ranks:
        assert rank.last_step == 8 and abs(rank.loss - truth[rank.rank]["loss"]) < 1e-6

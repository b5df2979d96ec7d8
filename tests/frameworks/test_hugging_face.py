"""The Hugging Face family in the shapes of its own published examples, unchanged in what they
do (tests/frameworks/scripts: written from the documented APIs, data made here, models made from
configs, nothing fetched): transformers' run_clm (a Trainer fine-tuning a causal LM, datasets and
evaluate imported before torch) under the drop-in, under ``accelerate launch`` and, with ZeRO-2,
under the ``deepspeed`` launcher; accelerate's nlp_example (its own loop, evaluate imported first)
under ``accelerate launch --multi_gpu`` on the CPU. Each against the job's own log: its steps, its
loss over the window it logs it, the global batch; the forward, backward and optimizer each seen;
and a rank that fails named with its own exception.

Before the watch's import hook outlived an availability check (``find_spec("torch")``, which
datasets, evaluate and transformers make at their import), none of these jobs was seen at all."""

import os
import subprocess
import sys

import pytest

from conftest import CLI, once_per_session, results_of, run_in, summary_from
from frameworks_helpers import BIN, SCRIPTS, deepspeed_cpu, free_port, run_exec
from mgpu_tui.engine.protocol.events import Step, parse_line
from mgpu_tui.engine.protocol.rundir import RunDir

# A hang guard, not a speed goal: each job takes about a minute on 2 idle cores (its imports, the
# datasets' maps), and several times that on a loaded machine.
pytestmark = pytest.mark.timeout(600)
CLM = str(SCRIPTS / "hf_run_clm.py")
NLP = str(SCRIPTS / "accelerate_nlp.py")
CPU_ACCELERATE = {**os.environ, "ACCELERATE_USE_CPU": "1"}
BATCH, ACCUMULATION, STEPS, LOGGING = 4, 2, 6, 2


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The examples' data, made once: a text file, sentence pairs, a tokenizer."""

    def make(folder):
        subprocess.run(
            [sys.executable, str(SCRIPTS / "hf_local_data.py"), str(folder)], check=True, timeout=120
        )
        return folder

    return once_per_session(tmp_path_factory, "hf-data", make)


def clm_args(data, out, *extra):
    return [
        "--train_file", str(data / "train.txt"), "--tokenizer_name", str(data / "tokenizer"),
        "--output_dir", str(out), "--per_device_train_batch_size", str(BATCH),
        "--gradient_accumulation_steps", str(ACCUMULATION), "--max_steps", str(STEPS),
        "--logging_steps", str(LOGGING), "--learning_rate", "1e-3", "--report_to", "none",
        "--save_strategy", "no", "--use_cpu", "--disable_tqdm", "true",
        "--dataloader_num_workers", "0", *extra,
    ]  # fmt: skip


def step_losses(run_dir) -> dict[int, dict[int, float]]:
    """Each rank's loss at each step, as mgpu-tui read it (its event files, its typed reader)."""
    losses: dict[int, dict[int, float]] = {}
    for rank, path in RunDir(run_dir).event_files().items():
        for line in path.read_bytes().splitlines():
            event = parse_line(line)
            if isinstance(event, Step) and event.loss is not None:
                losses.setdefault(rank, {})[event.step] = event.loss
    return losses


def every_part_seen(summary):
    assert len(summary.anatomy) == summary.world_size
    for rank in summary.anatomy:
        assert rank.forward_s > 0 and rank.backward_s > 0 and rank.optimizer_s > 0, rank


def a_trainer_followed(done, run_dir, source):
    """A run_clm job: mgpu-tui's figures against the Trainer's own log."""
    summary = summary_from(done.stdout)
    assert summary.status == "ok", done.stderr[-4000:]
    truth = results_of(done.stdout + done.stderr)
    assert sorted(truth) == [0, 1] and summary.world_size == 2
    assert summary.steps == truth[0]["steps"] == STEPS
    assert summary.batch_size == BATCH * ACCUMULATION * 2 and summary.batch_size_source == source
    # The Trainer logs, every logging_steps, the mean over the ranks and over those steps of each
    # rank's step loss (the sum of its micro-batches' losses, each divided by the accumulation).
    losses = step_losses(run_dir)
    for entry in truth[0]["log"]:
        window = range(entry["step"] - LOGGING + 1, entry["step"] + 1)
        ours = sum(losses[r][s] for r in (0, 1) for s in window) / (2 * LOGGING)
        assert ours == pytest.approx(entry["loss"], abs=1e-5), (entry, losses)
    every_part_seen(summary)
    assert all(r.samples_per_s > 0 and r.tokens_per_s > 0 for r in summary.ranks)
    return summary


IMPORT_SHAPES = str(SCRIPTS.parent.parent / "scripts" / "import_shapes.py")


@pytest.mark.parametrize("launcher", ["exec", "torchrun"])
def test_a_job_that_imports_transformers_first_is_watched(tmp_path, launcher):
    """``import transformers`` before ``import torch`` (tests/integration/test_import_shapes.py has the
    other shapes): transformers asks for torch's spec at its import, which once took the watch's
    import hook away."""
    if launcher == "exec":
        done, _ = run_exec(tmp_path, sys.executable, IMPORT_SHAPES, "--shape", "transformers")
    else:
        argv = [*CLI, "torchrun", "--run-dir", str(tmp_path / "runs"), "--json", "--nproc-per-node", "2",
                IMPORT_SHAPES, "--shape", "transformers"]  # fmt: skip
        done, _ = run_in(tmp_path, argv, timeout=600)
    summary = summary_from(done.stdout)
    assert summary.status == "ok", done.stderr[-3000:]
    truth = results_of(done.stdout + done.stderr)
    assert summary.world_size == len(truth) == (1 if launcher == "exec" else 2)
    for rank in summary.ranks:
        assert rank.last_step == truth[rank.rank]["steps"] == 5
        assert rank.loss == pytest.approx(truth[rank.rank]["loss"], abs=1e-6)


def test_run_clm_under_the_torchrun_drop_in(tmp_path, data):
    argv = [*CLI, "torchrun", "--run-dir", str(tmp_path / "runs"), "--json", "--nproc-per-node", "2",
            CLM, *clm_args(data, tmp_path / "out")]  # fmt: skip
    done, run_dir = run_in(tmp_path, argv, timeout=600)
    a_trainer_followed(done, run_dir, "the batches entering DistributedDataParallel")


def test_run_clm_under_accelerate_launch(tmp_path, data):
    launch = [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2",
              "--main_process_port", free_port(), CLM, *clm_args(data, tmp_path / "out")]  # fmt: skip
    done, run_dir = run_exec(tmp_path, *launch, env=CPU_ACCELERATE)
    a_trainer_followed(done, run_dir, "the batches entering DistributedDataParallel")


def test_a_trainer_rank_that_fails_is_named_with_its_exception(tmp_path, data):
    argv = [*CLI, "torchrun", "--run-dir", str(tmp_path / "runs"), "--json", "--nproc-per-node", "2",
            CLM, *clm_args(data, tmp_path / "out")]  # fmt: skip
    done, _ = run_in(tmp_path, argv, env={**os.environ, "FAIL_RANK": "1"}, timeout=600)
    a_rank_failed(done, 1, "IndexError")


def a_rank_failed(done, rank, exception):
    summary = summary_from(done.stdout)
    assert summary.status == "failed" and done.returncode == 1, done.stderr[-4000:]
    cause = summary.root_cause
    assert cause is not None and cause.rank == rank, cause
    assert cause.message.startswith(f"{exception}: "), cause.message


def test_accelerates_nlp_example_under_accelerate_launch(tmp_path, data):
    launch = [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2",
              "--main_process_port", free_port(), NLP, "--data", str(data)]  # fmt: skip
    done, run_dir = run_exec(tmp_path, *launch, env=CPU_ACCELERATE)
    summary = summary_from(done.stdout)
    assert summary.status == "ok", done.stderr[-4000:]
    truth = results_of(done.stdout + done.stderr)
    assert sorted(truth) == [0, 1] and summary.world_size == 2
    mine = truth[0]
    assert summary.steps == mine["steps"]
    # The example steps at every micro-batch whose index divides by the accumulation: its first
    # step after one micro-batch, then after every two. The global batch is the steady steps'.
    assert summary.batch_size == mine["batch"] * mine["accumulation"] * 2
    losses = step_losses(run_dir)
    for rank in (0, 1):
        theirs = truth[rank]["losses"]
        assert [losses[rank][s] for s in range(1, len(theirs) + 1)] == pytest.approx(theirs, abs=1e-6)
    every_part_seen(summary)


def test_a_rank_of_accelerates_loop_that_fails_is_named_with_its_exception(tmp_path, data):
    launch = [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2",
              "--main_process_port", free_port(), NLP, "--data", str(data)]  # fmt: skip
    done, _ = run_exec(tmp_path, *launch, env={**CPU_ACCELERATE, "FAIL_RANK": "1"})
    a_rank_failed(done, 1, "IndexError")


__all__ = ["deepspeed_cpu"]  # a fixture, used by name


@pytest.fixture(scope="module")
def deepspeed_env(tmp_path_factory, deepspeed_cpu):
    """DeepSpeed on the CPU (its op built once a session) and a ZeRO-2 config whose sizes are the
    Trainer's ("auto")."""
    config = tmp_path_factory.mktemp("deepspeed") / "zero2.json"
    config.write_text(
        '{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",'
        ' "train_batch_size": "auto", "gradient_clipping": "auto", "zero_optimization": {"stage": 2}}'
    )
    return deepspeed_cpu, config


def deepspeed_launch(tmp_path, data, config):
    return [str(BIN / "deepspeed"), "--num_gpus", "2", "--master_port", free_port(), CLM,
            *clm_args(data, tmp_path / "out", "--deepspeed", str(config))]  # fmt: skip


@pytest.mark.timeout(900)
def test_run_clm_with_zero2_under_the_deepspeed_launcher(tmp_path, data, deepspeed_env):
    """ZeRO's optimizer steps flat partitions of the parameters: the model is DeepSpeed's engine's,
    hooked as it is made (the batch once came from the DataLoader, one batch read ahead, and the
    forward's time was the host's)."""
    env, config = deepspeed_env
    done, run_dir = run_exec(tmp_path, *deepspeed_launch(tmp_path, data, config), env=env, timeout=900)
    summary = a_trainer_followed(done, run_dir, "the batches entering DeepSpeed's engine")
    assert summary.compute is not None and summary.compute.tflops, summary.compute


@pytest.mark.timeout(900)
def test_a_deepspeed_rank_that_fails_is_named_with_its_exception(tmp_path, data, deepspeed_env):
    env, config = deepspeed_env
    launch = deepspeed_launch(tmp_path, data, config)
    done, _ = run_exec(tmp_path, *launch, env={**env, "FAIL_RANK": "1"}, timeout=900)
    a_rank_failed(done, 1, "IndexError")

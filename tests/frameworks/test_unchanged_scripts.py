"""Unchanged training scripts in the shapes users have (tests/scripts/, written here, each knowing
nothing of mgpu-tui), launched by `mgpu-tui run --script` and by the torchrun drop-in: every rank's
steps, samples or tokens, loss, memory and process telemetry; a hang in data loading named with its
rank, collective and function; a long evaluation left alone; a slow rank named alone; a training
that finished and then aborted at exit told as finished; torch.compile's graphs left whole."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import CLI, REPO, live_processes_of, only_run_dir, run_in, summary_from

SCRIPTS = REPO / "tests" / "scripts"

# script, its own arguments, the steps it takes, its global batch as counted (None: not counted)
JOBS = {
    "gpt": ("gpt_train.py", ["--max-iters", "10", "--eval-interval", "5", "--eval-iters", "2"], 10, 16),
    "trainer": ("ddp_trainer.py", ["2", "1", "--batch_size", "32"], 16, 64),
    "fsdp2": ("fsdp2_train.py", ["--steps", "6"], 6, 8),
    "amp": ("amp_train.py", ["--iters", "8", "--inf-at", "3"], 8, 32),
    "gan": ("gan_train.py", ["--iters", "6"], 6, 16),
    "eval": ("eval_only.py", ["--batches", "20"], 0, None),
}


def command(launcher: str, runs: Path, script: str, args: list[str], *ours: str) -> list[str]:
    """The same job through `run --script` or the torchrun drop-in, 2 ranks, a JSON summary."""
    path = str(SCRIPTS / script)
    if launcher == "run":
        return [
            *CLI,
            "run",
            "--script",
            path,
            "--nproc",
            "2",
            "--run-dir",
            str(runs),
            "--json",
            *ours,
            "--",
            *args,
        ]
    return [*CLI, "torchrun", "--nproc-per-node", "2", "--run-dir", str(runs), "--json", *ours, path, *args]


def launch(tmp_path: Path, launcher: str, job: str, *ours: str, extra=(), env=None, timeout=120):
    script, args, _, _ = JOBS[job]
    argv = command(launcher, tmp_path / "runs", script, [*args, *extra], *ours)
    return run_in(tmp_path, argv, env, timeout)


def finished(summary) -> bool:
    """The run ended ok, or (gloo's teardown race, rare) its training finished and a rank then
    aborted at exit, which mgpu-tui says in those words."""
    if summary.status == "ok":
        return True
    cause = summary.root_cause
    return summary.finished_training and cause.verdict and "finished its training" in cause.message


@pytest.mark.parametrize("job", list(JOBS))
def test_an_unchanged_script_shows_every_ranks_steps_throughput_loss_and_memory(tmp_path, job):
    """The same job through `run --script` and through the torchrun drop-in, side by side."""
    script, args, steps, batch = JOBS[job]
    for launcher in ("run", "torchrun"):  # each its own folder: the Trainer resumes from a snapshot it finds
        (tmp_path / launcher).mkdir()
    launches = {
        launcher: subprocess.Popen(
            command(launcher, tmp_path / launcher / "runs", script, args),
            cwd=tmp_path / launcher,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for launcher in ("run", "torchrun")
    }
    for launcher, proc in launches.items():
        out, err = proc.communicate(timeout=180)
        run_dir = only_run_dir(tmp_path / launcher / "runs")
        summary = summary_from(out)
        assert finished(summary), (launcher, err)
        assert summary.program.endswith(script) and summary.world_size == 2
        assert summary.steps == steps and summary.steps_requested is None  # the script said no total
        assert summary.backend == "gloo" and summary.device == "cpu"  # what it used, not a guess
        assert (summary.batch_size, summary.finished_training) == (batch, True)
        assert [r.rank for r in summary.ranks] == [0, 1] and all(r.pid for r in summary.ranks)
        assert {r.rank for r in summary.telemetry.ranks} == {0, 1}  # each rank's process, sampled
        for rank in summary.ranks:
            assert rank.last_step == steps and rank.device == "cpu" and rank.backend == "gloo"
            assert rank.peak_mem_bytes > 50 << 20  # the rank's peak RSS: torch alone is more
            if steps:
                assert rank.samples_per_s > 0 and rank.loss is not None and rank.loss == rank.loss
            else:  # no optimizer: followed by its collectives
                assert rank.samples_per_s is None and rank.loss is None and rank.collectives >= 20
        if job == "gpt":
            assert all(r.tokens_per_s > 0 for r in summary.ranks) and summary.tokens_per_s > 0
        if job == "fsdp2":  # each rank counts what it computes: the whole model on its own 4 x 15 tokens
            weights = 3 * (2 * 64 * 256) + 64 * 128  # each block's MLP, the head
            assert flops_of(run_dir) == {0: [6 * weights * 4 * 15] * steps, 1: [6 * weights * 4 * 15] * steps}
            assert summary.compute.tflops > 0
        if job == "amp":  # the loss as the script printed it: unscaled, from the overflow's skipped step on
            printed = next((run_dir / "logs").glob("*/attempt_0/0/stdout.log")).read_text()
            last = printed.strip().splitlines()[-1]  # "iter 7 loss 0.123456 scale 512"
            assert abs(float(last.split()[3]) - summary.ranks[0].loss) < 1e-5, last
        if launcher == "torchrun":
            assert "a free port for the rendezvous" in err
        assert "mgpu-tui: some figures of this rank will be missing" not in err
        assert live_processes_of(run_dir) == []


def flops_of(run_dir: Path) -> dict[int, list]:
    """Each rank's steps' FLOPs, as its events say them."""
    found = {}
    for rank in (0, 1):
        lines = (run_dir / "events" / f"rank{rank}.jsonl").read_text().splitlines()
        found[rank] = [e.get("flops") for e in map(json.loads, lines) if e["kind"] == "step"]
    return found


def last_step_time(run_dir: Path, rank: int) -> float:
    lines = (run_dir / "events" / f"rank{rank}.jsonl").read_text().splitlines()
    return max(json.loads(line)["t"] for line in lines if json.loads(line)["kind"] == "step")


def test_a_rank_stuck_in_its_data_loading_is_named_in_time_and_the_run_goes_on(tmp_path):
    """The GPT script's rank 1 blocks in get_batch: within --stall-timeout + 5 s the verdict names the
    rank, the collective it never entered and the function it is in; by default a script's run is not
    stopped for it (report), and Ctrl-C then ends it. torch's fr_trace reads the ranks' dumps."""
    timeout = 3
    runs = tmp_path / "runs"
    args = ["--max-iters", "200", "--eval-interval", "1000", "--hang-rank", "1", "--hang-at", "6"]
    proc = subprocess.Popen(
        command("torchrun", runs, "gpt_train.py", args, "--stall-timeout", str(timeout)),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 90
    said = ""
    while time.monotonic() < deadline and "the run goes on" not in said:
        said += proc.stderr.readline()
    time.sleep(1)  # it goes on: not stopped by its stall
    assert proc.poll() is None, said
    proc.send_signal(signal.SIGINT)  # passed to torchrun, which passes it to its ranks
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err  # torchrun's own exit after a Ctrl-C (its SignalException), as bare
    run_dir = only_run_dir(runs)
    stall = summary_from(out).stall
    assert stall is not None and stall.culprit == 1, said
    assert stall.verdict.startswith("rank 1 never entered all_reduce(float32[")
    assert (
        "rank 0 has waited in it for" in stall.verdict
        and "rank 1 is in get_batch at gpt_train.py:" in stall.verdict
    )
    assert stall.found_at - last_step_time(run_dir, 1) <= timeout + 5
    assert "stalled for" in said and "(the run goes on: --on-stall report)" in said
    assert live_processes_of(run_dir) == []
    # torch's own analyser: gloo's dumps as torch wrote them, and the copy it can read.
    assert (run_dir / "fr" / "torch" / "rank0").is_file()
    read = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.flight_recorder.fr_trace",
            str(run_dir / "fr" / "torch-readable"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    report = read.stdout + read.stderr  # fr_trace logs its findings
    assert read.returncode == 0 and "Traceback" not in report, report
    assert "Not all ranks joining collective" in report and "missing ranks: {1}" in report


def test_a_long_evaluation_is_not_a_stall(tmp_path):
    """Three stall timeouts of evaluation (forward passes, no step) with --on-stall stop: the ranks'
    stacks move, so nothing is stopped (a 60 s evaluation under the default 30 s timeout is the same
    case, measured by hand: docs/your-script.md)."""
    done, _ = launch(
        tmp_path,
        "run",
        "gpt",
        "--stall-timeout",
        "3",
        "--on-stall",
        "stop",
        extra=["--eval-seconds", "9", "--eval-interval", "10"],  # one evaluation, after the last step
    )
    summary = summary_from(done.stdout)
    assert finished(summary) and summary.stall is None, done.stderr
    assert summary.steps == 10


def test_a_rank_50_ms_late_every_step_is_the_only_straggler(tmp_path):
    args = ["--max-iters", "40", "--eval-interval", "1000", "--grad-accum", "2", "--slow-rank", "1"]
    done, _ = launch(tmp_path, "torchrun", "gpt", extra=[*args, "--slow-ms", "50"])
    summary = summary_from(done.stdout)
    assert finished(summary), done.stderr
    (straggler,) = summary.stragglers
    assert straggler.rank == 1 and 0.035 < straggler.late_s < 0.1, straggler
    assert straggler.steps >= 0.8 * straggler.of_steps


def test_a_training_that_finished_and_aborted_at_exit_says_it_finished(tmp_path):
    done, run_dir = launch(tmp_path, "run", "gpt", extra=["--abort-at-exit", "0"])
    summary = summary_from(done.stdout)
    assert done.returncode == 1 and summary.status == "failed" and summary.finished_training
    cause = summary.root_cause
    assert cause.rank == 0 and cause.signal == "SIGABRT" and cause.verdict
    assert cause.message.startswith("rank 0 finished its training (10 steps), then died at exit (SIGABRT)")
    assert "the training had finished" in cause.hint and "already ends its process group" in cause.hint
    assert "end it with" not in cause.hint  # it does end it: no advice to
    text = subprocess.run([*CLI, "runs", "--run-dir", str(run_dir.parent)], capture_output=True, text=True)
    assert "finished its training" in text.stdout, text.stdout


@pytest.mark.parametrize("order", ["compile, then DDP", "DDP, then compile"])
def test_torch_compile_graphs_hold_nothing_of_mgpu_tui(tmp_path, order):
    """aot_eager (Dynamo's graph capture, without a C++ compiler's minutes): no graph break is
    mgpu-tui's; where torch.compile wraps the hooked DDP module the hook moves onto the wrapper."""
    env = {**os.environ, "TORCH_LOGS": "graph_breaks"}
    if order == "compile, then DDP":
        extra = ["--compile", "--compile-backend", "aot_eager"]
        done, run_dir = launch(tmp_path, "torchrun", "gpt", env=env, extra=extra)
    else:
        script = tmp_path / "compiled_ddp.py"
        script.write_text(COMPILED_DDP)
        runs = tmp_path / "runs"
        done = subprocess.run(
            [*CLI, "run", "--script", str(script), "--nproc", "2", "--run-dir", str(runs), "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        run_dir = only_run_dir(runs)
    summary = summary_from(done.stdout)
    assert finished(summary), done.stderr
    assert summary.steps > 0 and summary.batch_size == 16
    logs = "".join(p.read_text() for p in run_dir.glob("logs/*/attempt_0/*/stderr.log"))
    breaks = [line for line in logs.splitlines() if "Graph break" in line or "compiler.disable" in line]
    assert not any("mgpu_tui" in line or "ScriptWatch" in line or "engine/rank" in line for line in breaks)
    if order == "compile, then DDP":
        assert breaks == []  # and the usual recipe has none at all


COMPILED_DDP = """
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
layers = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
model = torch.compile(DDP(layers), backend="aot_eager")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(5):
    loss = model(torch.randn(8, 16)).pow(2).mean()
    loss.backward(); opt.step(); opt.zero_grad()
dist.destroy_process_group()
"""


def test_the_torchrun_drop_in_reads_torchruns_own_flags_and_environment(tmp_path):
    """PET_* as torchrun reads it; --no-instrument runs it bare; torchrun's errors are one sentence."""
    env = {**os.environ, "PET_NPROC_PER_NODE": "2"}
    runs = tmp_path / "runs"
    done = subprocess.run(
        [
            *CLI,
            "torchrun",
            "--run-dir",
            str(runs),
            "--json",
            "--no-instrument",
            "--log-dir",
            "x",
            str(SCRIPTS / "eval_only.py"),
            "--batches",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    summary = summary_from(done.stdout)
    assert summary.status == "ok" and summary.world_size == 2, done.stderr
    assert all(r.pid is None for r in summary.ranks)  # bare: no bootstrap said hello
    assert "--log-dir: every rank's output is kept in the run folder instead" in done.stderr
    # What torchrun's parser refuses (tests/unit/test_torchrun_args.py has each) is one sentence, exit 2.
    for line, said in (
        (["--bogus", "x.py"], "torchrun does not know --bogus"),
        (["--local-ranks-filter", "7,a", "x.py"], "--local-ranks-filter: give rank numbers"),  # its own name
        (["--no-python", "-m", "pkg"], "--no-python and -m (--module) cannot go together"),
        (["--nnodes", "1000000000000", "x.py"], "--nnodes must be at most 4,096"),
    ):
        refused = subprocess.run([*CLI, "torchrun", *line], capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2 and said in refused.stderr, (line, refused.stderr)
        assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
    # --no-python finds its program on PATH, as torchrun does (a file of that name is not needed).
    bare = subprocess.run(
        [*CLI, "torchrun", "--nproc-per-node", "1", "--no-python", "--run-dir", str(runs), "--json", "true"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bare.returncode == 0 and summary_from(bare.stdout).status == "ok", bare.stderr

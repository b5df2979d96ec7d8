"""The watch never breaks the job it watches (tests/scripts/keyword_calls.py: every torch API
mgpu-tui wraps, called by keyword as Lightning and Fabric call them, the whole model checkpointed;
the result is bare torchrun's to the last digit), and a rank waiting on its own busy children (an op
being built, as DeepSpeed does) is never a stall. Here, in make test-frameworks, beside Lightning's
own DDP strategy, which the keyword bug crashed. And a script that owns its signals and
descriptors runs as it would bare."""

import os
import subprocess
import sys

from conftest import CLI, REPO, live_processes_of, only_run_dir, results_of, summary_from

SCRIPTS = REPO / "tests" / "scripts"


def test_every_wrapped_api_called_with_keywords_computes_what_bare_torchrun_does(tmp_path):
    """DDP(module=...) from a subclass, FSDP(module=...), fully_shard(module=...), GradScaler's and
    backward's keywords, a group made by init_device_mesh, and a batch the root hook fails on: the
    script computes under the watch exactly what it computes under plain torchrun (Lightning's
    DDP strategy crashed on the first of these), and mgpu-tui says once what it could not read."""
    script = str(SCRIPTS / "keyword_calls.py")
    runs = tmp_path / "runs"
    lines = {  # at once: each is a few seconds of starting processes
        "bare": [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", script],
        "watched": [*CLI, "torchrun", "--nproc-per-node", "2", "--run-dir", str(runs), "--json", script],
    }
    started = {
        how: subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
        for how, argv in lines.items()
    }
    ended = {how: (proc, *proc.communicate(timeout=120)) for how, proc in started.items()}
    bare = subprocess.CompletedProcess(lines["bare"], ended["bare"][0].returncode, *ended["bare"][1:])
    watched = subprocess.CompletedProcess(
        lines["watched"], ended["watched"][0].returncode, *ended["watched"][1:]
    )
    assert bare.returncode == 0, bare.stderr
    summary = summary_from(watched.stdout)
    assert summary.status == "ok", watched.stderr
    truth = results_of(bare.stdout)
    assert sorted(truth) == [0, 1] and results_of(watched.stderr + watched.stdout) == truth
    assert summary.world_size == 2 and summary.backend == "gloo"  # the mesh's group, its backend for the CPU
    for rank in summary.ranks:
        assert rank.last_step == 6 and abs(rank.loss - truth[rank.rank]["losses"][-1]) < 1e-5
        assert truth[rank.rank]["checkpoint"] == {"clean": True, "same": True}  # torch.save(ddp_model)
    # The hook that could not read the batch said so once a rank, and nothing more.
    said = "mgpu-tui: some figures of this rank will be missing: before forward failed"
    assert watched.stderr.count(said) == 2, watched.stderr
    assert "Traceback" not in watched.stderr
    assert live_processes_of(only_run_dir(runs)) == []


BUILDS_FIRST = """
import subprocess, sys, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
# As DeepSpeed builds a C++ op, each rank waits on a compiler of its own (here: 9 s of arithmetic).
BUSY = "import time\\nend = time.time() + 9\\nwhile time.time() < end: sum(range(10000))"
subprocess.run([sys.executable, "-c", BUSY], check=True)
model = DDP(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
dist.destroy_process_group()
"""


def test_ranks_waiting_on_their_own_busy_children_are_not_stalled(tmp_path):
    """Both ranks silent for three times the stall timeout, each in subprocess.run while its child
    works (an op being built): with --on-stall stop, a stall would end the run. Their children's
    CPU is their movement. The timeout is 3 s, three of the beat thread's looks: with 2 s, two
    looks at a slow import on a loaded machine (DDP's first import of torch._dynamo) that saw the
    same stack made a stall in 1 of 3 CI runs, before the children had anything to do with it."""
    script = tmp_path / "builds_first.py"
    script.write_text(BUILDS_FIRST)
    runs = tmp_path / "runs"
    done = subprocess.run(
        [*CLI, "torchrun", "--nproc-per-node", "2", "--run-dir", str(runs), "--json", "--stall-timeout", "3",
         "--on-stall", "stop", str(script)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    summary = summary_from(done.stdout)
    assert summary.status == "ok" and summary.stall is None and summary.steps == 3, done.stderr
    assert live_processes_of(only_run_dir(runs)) == []


def test_a_script_that_owns_its_signals_and_descriptors_runs_as_it_would_bare(tmp_path):
    """Rank 0's SIGUSR2 handler leaves at once (a preemption handler), rank 1 resets SIGUSR2 to its
    default (the process ends); both close every inherited descriptor and open their own metrics
    file; both pause past the stall timeout, so the stall watch asks for their stacks. Under
    mgpu-tui, as bare: all 20 steps, no early leaving, the metrics files the script's own lines
    only; and mgpu-tui still has their stacks (asked by a file, answered by its thread) and every
    step (its events file opened again, never the script's file written)."""
    env = {**os.environ, "METRICS_DIR": str(tmp_path)}
    runs_root = tmp_path / "runs"
    script = str(REPO / "tests" / "scripts" / "own_signals.py")
    done = subprocess.run(
        [*CLI, "torchrun", "--nproc-per-node", "2", "--run-dir", str(runs_root), "--json",
         "--stall-timeout", "2", "--on-stall", "report", script, "--pause", "7", "--close-descriptors"],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    summary = summary_from(done.stdout)
    assert summary.status == "ok", done.stderr
    results = results_of(done.stderr + done.stdout)
    for rank in (0, 1):
        assert results[rank] == {
            "rank": rank,
            "steps": 20,
            "left_early": False,
            "metrics_lines": 20,
            "own": True,
        }
    assert summary.stall is not None  # both silent past the timeout: a stall, reported, not acted on
    stacks = (only_run_dir(runs_root) / "stacks" / "rank0.txt").read_text()
    assert "own_signals.py" in stacks and "in <module>" in stacks
    assert [r.last_step for r in summary.ranks] == [20, 20]

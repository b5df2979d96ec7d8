"""Your own training script under mgpu-tui: unchanged scripts, the reporter, real failures, two nodes."""

import json
import socket
import subprocess
import textwrap

import pytest

from conftest import CLI, live_processes_of, only_run_dir, run_cli, summary_from

PLAIN = """
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total)
    print(f"rank {rank} of {dist.get_world_size()}: sum {total.item()}", flush=True)
    dist.destroy_process_group()
"""
WITH_REPORTER = """
    import torch, torch.distributed as dist
    from mgpu_tui import Reporter
    dist.init_process_group("gloo")
    reporter = Reporter()
    w = torch.randn(256, 256, requires_grad=True)
    optimizer = torch.optim.SGD([w], lr=1e-3)
    for step in range(1, 31):
        loss = (torch.randn(32, 256) @ w).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        reporter.step(step, samples=32, loss=loss)  # a tensor that requires grad: detached, no warning
    dist.destroy_process_group()
"""
GPU_ONLY = """
    import os, torch, torch.distributed as dist
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
"""


def write(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def test_a_module_that_knows_nothing_of_mgpu_tui_runs_with_every_rank_logged(tmp_path, runs_root):
    """`--module`, as `python -m` runs it (scripts through --script: tests/frameworks)."""
    write(tmp_path, "plain_job.py", PLAIN)
    target = "plain_job"
    result = run_cli(
        "run", "--module", target, "--nproc", "2", "--run-dir", str(runs_root), "--json", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    summary = summary_from(result.stdout)
    assert summary.status == "ok" and summary.world_size == 2 and summary.program == target
    run_dir = only_run_dir(runs_root)
    outputs = sorted(p.read_text() for p in run_dir.glob("logs/*/attempt_0/*/stdout.log"))
    assert outputs == ["rank 0 of 2: sum 3.0\n", "rank 1 of 2: sum 3.0\n"]
    assert live_processes_of(run_dir) == []


def test_the_reporters_two_lines_speak_for_the_rank_through_the_bootstrap(tmp_path, runs_root):
    """A script with the reporter's two lines, under the bootstrap: one hello, its own 30 steps (not
    the bootstrap's count beside them), its samples; a loss tensor taken without torch's warning."""
    script = write(tmp_path, "job.py", WITH_REPORTER)
    result = run_cli("run", "--script", str(script), "--nproc", "2", "--run-dir", str(runs_root), "--json")
    assert result.returncode == 0, result.stderr
    summary = summary_from(result.stdout)
    assert summary.steps == 30 and summary.samples_per_s > 0 and summary.final_loss is not None
    assert summary.malformed_events == 0 and all(r.pid for r in summary.ranks)
    run_dir = only_run_dir(runs_root)
    events = [json.loads(line) for line in (run_dir / "events" / "rank0.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in events].count("hello") == 1
    assert [e["step"] for e in events if e["kind"] == "step"] == list(range(1, 31))
    assert all(e["samples"] == 32 for e in events if e["kind"] == "step")
    stderr = "".join(p.read_text() for p in run_dir.glob("logs/*/attempt_0/*/stderr.log"))
    assert "requires_grad" not in stderr


def test_a_gpu_only_script_fails_with_its_real_cause(tmp_path, runs_root):
    script = write(tmp_path, "gpu_job.py", GPU_ONLY)
    # (its peer is stopped, not left waiting in the rendezvous: run_cli's 120 s would fail that; how
    # soon on an idle machine is `bench/run.py failures`' figure)
    result = run_cli("run", "--script", str(script), "--nproc", "2", "--run-dir", str(runs_root), "--json")
    assert result.returncode == 1
    cause = summary_from(result.stdout).root_cause
    assert cause.rank in (0, 1) and "cuda" in (cause.message + cause.traceback).lower()
    assert "Traceback" in cause.traceback  # the script's own, from its stderr
    # What it means, and what to change in the script: a flag of mgpu-tui would change nothing in it.
    assert "CPU build" in cause.hint and "--device" not in cause.hint
    assert "torch.cuda.is_available()" in cause.hint
    assert live_processes_of(only_run_dir(runs_root)) == []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_on_this_machine_form_one_job(tmp_path):
    port, runs = free_port(), tmp_path / "shared-runs"
    nodes = [
        subprocess.Popen(
            [
                *CLI,
                "run",
                "ddp",
                "--nnodes",
                "2",
                "--node-rank",
                str(rank),
                "--nproc",
                "1",
                "--rdzv-endpoint",
                f"127.0.0.1:{port}",
                "--rdzv-id",
                "job7",
                "--steps",
                "20",
                "--device",
                "cpu",
                "--run-dir",
                str(runs),
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [node.communicate(timeout=120) for node in nodes]
    for node, (out, err) in zip(nodes, outputs):
        assert node.returncode == 0, err
        summary = summary_from(out)
        assert summary.status == "ok" and summary.world_size == 2 and summary.steps == 20
    run_dir = runs / "job7-ddp"  # one shared folder: each node's files carry its node rank
    summaries = {p.name for p in run_dir.glob("summary-node*.json")}
    assert summaries == {"summary-node0.json", "summary-node1.json"}
    # A rank's events, and beside them its folder (its digests: docs/long-runs.md), one each.
    assert {p.name for p in run_dir.glob("events/*")} == {"rank0.jsonl", "rank1.jsonl", "rank0", "rank1"}


@pytest.mark.parametrize(
    "args, words",
    [
        (["--script", "/nonexistent.py"], "no such script: /nonexistent.py"),
        (["ddp", "--script", "x.py"], "exactly one of them"),
        ([], "exactly one of them"),
        (
            ["ddp", "--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:1"],
            "--node-rank must be between 0 and 1",
        ),
        (["ddp", "--nnodes", "2"], "several nodes need --rdzv-endpoint"),
        (["ddp", "--nnodes", "2", "--rdzv-endpoint", "nohost"], "--rdzv-endpoint must be HOST:PORT"),
        (["single", "--nnodes", "2", "--rdzv-endpoint", "h:1"], "runs as one process"),
        (["--module", "not a module"], "is not a Python module name"),
        (["--module", "json", "--amp"], "--amp are for the modes"),
        (["ddp", "--nnodes", "zero"], "--nnodes: must be a whole number"),
    ],
)
def test_bad_script_and_node_arguments_are_one_sentence(args, words, runs_root):
    result = run_cli("run", *args, "--run-dir", str(runs_root))
    assert result.returncode == 2, result.stderr
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1


CHATTY = """
    import os, sys
    rank = os.environ["RANK"]
    print(f"hello from {rank}", flush=True)
    print(f"\\x1b]2;pwned\\x07warning on {rank}", file=sys.stderr, flush=True)
    if rank == "1":
        print("not enough GPUs for this job", flush=True)
"""


def test_a_scripts_output_shows_on_the_console_by_rank_as_torchrun_tees_it(tmp_path):
    """Every rank's prints, prefixed once by rank (stdout to stdout, stderr to stderr, escapes made
    visible); --ranks-filter picks ranks; --quiet shows none; with --json, stdout keeps only the
    summary line. A run that reported no step ends with what each rank printed last."""
    write(tmp_path, "chatty.py", CHATTY)
    variants = {"every rank": [], "rank 1, json": ["--ranks-filter", "1", "--json"], "quiet": ["--quiet"]}
    command = [*CLI, "run", "--script", "chatty.py", "--nproc", "2", "--run-dir", "runs"]
    launches = {
        name: subprocess.Popen(
            [*command, *extra], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for name, extra in variants.items()
    }
    results = {name: (proc.communicate(timeout=120), proc.returncode) for name, proc in launches.items()}

    (out, err), code = results["every rank"]
    assert code == 0
    assert "[rank 0] hello from 0\n" in out and "[rank 1] not enough GPUs for this job\n" in out
    assert "[rank 1] ^[]2;pwned^Gwarning on 1" in err and "\x1b" not in out + err
    assert "no rank reported a step; what each printed last:" in err
    assert "rank 1 printed last:\n  hello from 1\n  not enough GPUs for this job" in err

    (out, err), code = results["rank 1, json"]
    assert code == 0 and out.splitlines()[-1].startswith("{") and len(out.splitlines()) == 1
    assert "[rank 1] hello from 1" in err and "[rank 0]" not in err

    (out, err), code = results["quiet"]
    assert code == 0 and "hello from" not in out + err.split("no rank reported a step")[0]

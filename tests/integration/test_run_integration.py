"""Real runs through the engine and the CLI: 2-rank gloo DDP on the CPU, and the baseline."""

import json
import subprocess
import sys

import pytest

from conftest import live_processes_of, once_per_session, only_run_dir, read_summary, run_cli, summary_from


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    def run(root):
        result = run_cli(
            "run", "ddp", "--nproc", "2", "--steps", "30", "--device", "cpu", "--run-dir", str(root), "--json"
        )
        return result, only_run_dir(root)

    return once_per_session(tmp_path_factory, "ddp-run", run)


def test_ddp_run_ends_with_an_ok_json_summary(ddp_run):
    result, run_dir = ddp_run
    assert result.returncode == 0, result.stderr
    summary = summary_from(result.stdout)
    assert summary.mode == "ddp" and summary.status == "ok" and summary.exit_code == 0
    assert summary.world_size == 2 and summary.steps == 30
    assert summary.samples_per_s > 0 and summary.step_time_s_median > 0
    assert 0 < summary.final_loss < 3
    assert len(summary.peak_mem_bytes) == 2 and all(m > 10**6 for m in summary.peak_mem_bytes)
    assert summary.root_cause is None and summary.stall is None and summary.verify is None
    assert summary.stragglers == ()  # two ranks on two cores, neither waited for
    assert summary.run_dir == str(run_dir)
    # The summary on stdout is the one saved in the run directory, and reads back whole.
    assert read_summary(run_dir / "summary.json") == summary
    assert summary.to_json() == json.loads(result.stdout.strip().splitlines()[-1])


def test_ddp_run_directory_is_complete(ddp_run):
    _, run_dir = ddp_run
    spec = json.loads((run_dir / "spec.json").read_text())
    assert spec["spec"]["mode"] == "ddp" and spec["spec"]["world_size"] == 2
    assert "torch.distributed.run" in spec["argv"]
    for rank in (0, 1):
        kinds = [json.loads(line)["kind"] for line in (run_dir / "events" / f"rank{rank}.jsonl").open()]
        assert kinds[0] == "hello" and kinds[-1] == "done" and kinds.count("step") == 30
    logs = sorted(run_dir.glob("logs/*/attempt_0/*/stdout.log"))
    assert len(logs) == 2
    for rank, log in enumerate(logs):
        assert f"[rank {rank}] step 30" in log.read_text()
    # The engine's own account of the run, for a user to read afterwards.
    engine_log = (run_dir / "mgpu-tui.log").read_text()
    assert "started ddp, 2 rank(s) on cpu (gloo)" in engine_log
    assert "the launcher exited with 0" in engine_log and engine_log.rstrip().endswith(" ok")


def test_ddp_final_loss_is_the_mean_of_the_ranks_losses(ddp_run):
    _, run_dir = ddp_run
    last = {}
    for rank in (0, 1):
        for line in (run_dir / "events" / f"rank{rank}.jsonl").open():
            record = json.loads(line)
            if record["kind"] == "step":
                last[rank] = record["loss"]
    summary = read_summary(run_dir / "summary.json")
    assert summary.final_loss == pytest.approx((last[0] + last[1]) / 2, rel=1e-12)


def test_nothing_of_the_run_is_left_running(ddp_run):
    _, run_dir = ddp_run
    assert live_processes_of(run_dir) == []


def test_demo_runs_alone_without_the_engine(tmp_path):
    """Under bare torchrun, without MGPU_RUN_DIR, the demo trains and prints from rank 0 only."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "mgpu_tui.demos.ddp",
            "--steps",
            "20",
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "[rank 0] step 20" in result.stdout and "[rank 1]" not in result.stdout
    assert not (tmp_path / "events").exists()

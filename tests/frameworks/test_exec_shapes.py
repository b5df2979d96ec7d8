"""Shapes of launch line that `mgpu-tui exec` follows (tests/integration/test_exec.py has the
tutorial's mp.spawn example, a spawned rank's failure, one-process jobs and the sitecustomize): a
spawned rank that raises, or is stuck in its data loading, ranks forked by start_processes, a
command in which no process becomes a rank. Here, in make test-frameworks, for make test's ten
minutes."""

import signal
import subprocess
import sys
import textwrap
import time

from conftest import CLI, REPO, live_processes_of, only_run_dir, results_of, run_exec, summary_from

SCRIPTS = REPO / "tests" / "scripts"
SPAWN = str(SCRIPTS / "spawn_ddp.py")


def test_a_spawned_rank_stuck_in_its_data_loading_is_named_with_its_collective(tmp_path):
    runs = tmp_path / "runs"
    args = ["--hang-rank", "1", "--hang-at", "6", "--steps", "100000"]
    proc = subprocess.Popen(
        [*CLI, "exec", "--run-dir", str(runs), "--json", "--stall-timeout", "3", "--",
         sys.executable, SPAWN, *args],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    said, deadline = "", time.monotonic() + 90
    while time.monotonic() < deadline and "the run goes on" not in said:
        said += proc.stderr.readline()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, said
    stall = summary_from(out).stall
    assert stall is not None and stall.culprit == 1, said
    assert stall.verdict.startswith("rank 1 never entered all_reduce(")
    assert "rank 1 is in get_batch at spawn_ddp.py:" in stall.verdict
    assert live_processes_of(only_run_dir(runs)) == []


def test_ranks_forked_by_start_processes_are_two_ranks_each_with_its_own_figures(tmp_path):
    done, run_dir = run_exec(tmp_path, sys.executable, SPAWN, "--start-method", "fork", "--steps", "12")
    summary = summary_from(done.stdout)
    assert summary.status == "ok", done.stderr
    truth = results_of(done.stderr)
    assert summary.world_size == 2 and [r.rank for r in summary.ranks] == [0, 1]
    assert len({r.pid for r in summary.ranks}) == 2  # two processes, not one file written twice
    for rank in summary.ranks:
        assert rank.last_step == 12 and abs(rank.loss - truth[rank.rank]["loss"]) < 1e-6
    assert live_processes_of(run_dir) == []


def test_a_command_whose_processes_never_become_ranks_says_what_it_saw(tmp_path):
    program = textwrap.dedent(
        """
        import multiprocessing as mp, time, torch
        def work(_):
            x, end = torch.randn(64, 64), time.monotonic() + 3  # long enough to be seen by a scan
            while time.monotonic() < end:
                x = torch.tanh(x @ x)
        if __name__ == "__main__":
            with mp.get_context("fork").Pool(2) as pool:
                pool.map(work, range(2))
        """
    )
    done, run_dir = run_exec(tmp_path, sys.executable, "-c", program)
    summary = summary_from(done.stdout)
    assert summary.status == "ok" and summary.world_size == 0 and summary.steps == 0, done.stderr
    assert summary.note.startswith("no process of this job joined a process group or stepped an optimizer")
    assert "3 process(es) used" in summary.note and "cores" in summary.note
    # Each with the CPU it had used when last seen (a scan a second: a loaded machine sees less of it).
    assert len(summary.processes) == 3 and all(p.cpu_s > 0.05 for p in summary.processes)
    text = subprocess.run([*CLI, "runs", "--run-dir", str(run_dir.parent)], capture_output=True, text=True)
    assert text.returncode == 0, text.stderr


def test_a_spawned_rank_that_raises_is_the_root_cause_with_its_exception(tmp_path):
    done, run_dir = run_exec(tmp_path, sys.executable, SPAWN, "--fail-rank", "1", "--fail-at", "5")
    assert done.returncode == 1, done.stderr
    cause = summary_from(done.stdout).root_cause
    assert cause.rank == 1 and cause.message == "ValueError: corrupt sample in shard 1 at step 5"
    assert 'spawn_ddp.py", line' in cause.traceback and "in get_batch" in cause.traceback
    assert "process_watch" not in cause.traceback and "ProcessRaisedException" not in cause.message
    assert live_processes_of(run_dir) == []

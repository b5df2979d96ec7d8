"""A rank that fails, and a run that is interrupted: named, stopped, nothing left behind."""

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from waiting import wait_until

from conftest import CLI, live_processes_of, only_run_dir, run_cli, summary_from


def test_a_rank_that_raises_is_the_root_cause(runs_root):
    """The failure ends the run: the peer waiting for it in an all-reduce is stopped, not left to gloo's
    own timeout (30 minutes: run_cli's 120 s fails it). How soon is a speed goal, measured on an
    idle machine by `bench/run.py failures` (a wall-clock bound here failed on a busy one)."""
    result = run_cli(
        "run",
        "ddp",
        "--nproc",
        "2",
        "--steps",
        "200",
        "--device",
        "cpu",
        "--run-dir",
        str(runs_root),
        "--json",
        "--",
        "--fail-at-step",
        "5",
        "--fail-rank",
        "1",
    )
    ended = time.time()
    assert result.returncode == 1
    summary = summary_from(result.stdout)
    assert summary.status == "failed" and summary.exit_code == 1
    cause = summary.root_cause
    # Exit 1; or a signal while the rank tears down after its exception: torchrun's SIGTERM once the
    # peer has failed, or now and then a SIGSEGV or SIGABRT from gloo's threads as the interpreter
    # exits with DDP still alive in the middle of the peer's collective (both seen in CI). Either way
    # the exception is the cause, and the exit is reported as it happened.
    assert cause.rank == 1 and (cause.exit_code == 1 or cause.signal in ("SIGTERM", "SIGSEGV", "SIGABRT"))
    assert cause.message == "RuntimeError: injected failure at step 5 on rank 1"
    assert "raise RuntimeError" in cause.traceback and "maybe_fail" in cause.traceback
    assert "rank 1 failed first" in result.stderr
    assert "Traceback" not in result.stderr.split("rank 1 failed first")[0]  # no traceback of ours
    run_dir = only_run_dir(runs_root)
    # Every rank was gone soon after the failure (rank 1 failed right after its step 4): a second or
    # two on an idle machine (the goal, 5 s, is bench's); 30 s tells a stop from a wait on a timeout.
    steps = [json.loads(line) for line in (run_dir / "events" / "rank1.jsonl").read_text().splitlines()]
    last_step_t = max(e["t"] for e in steps if e["kind"] == "step")
    assert ended - last_step_t < 30
    assert live_processes_of(run_dir) == []


def test_a_failure_before_any_step_leads_with_its_cause(runs_root):
    """Issue #31: the cause came at line 21 of 32 on stderr, after the casualty's 'Connection closed
    by peer', and the summary said 'status failed' alone. Now the cause leads stderr, the ranks'
    last lines follow it, and the summary names the cause."""
    result = run_cli(
        "run",
        "ddp",
        "--nproc",
        "2",
        "--steps",
        "20",
        "--device",
        "cpu",
        "--run-dir",
        str(runs_root),
        "--sample-interval",
        "0",
        "--",
        "--fail-at-step",
        "1",
        "--fail-rank",
        "1",
    )
    assert result.returncode == 1, result.stderr
    cause = "rank 1 failed first"
    said = result.stderr.splitlines()
    assert said[0].startswith("mgpu-tui: ddp") and said[1].startswith(cause), said[:3]
    assert result.stderr.index(cause) < result.stderr.index("no rank reported a step")
    head = result.stdout.splitlines()[:2]
    assert "status failed" in head[0] and head[1].startswith(f"cause: {cause}"), head
    assert head[1].endswith("RuntimeError: injected failure at step 1 on rank 1")


@pytest.mark.parametrize(
    "mode, kind, expect",
    [
        ("ddp", "segv", {"rank": 1, "signal": "SIGSEGV"}),  # torchrun's report of a signal
        ("single", "abort", {"rank": 0, "signal": "SIGABRT"}),
        ("single", "exit", {"rank": 0, "exit_code": 3}),
        ("single", "oom", {"rank": 0, "message": "MemoryError: injected out-of-memory on cpu after 256 MiB"}),
    ],
)
def test_every_kind_of_crash_is_named(mode, kind, expect, runs_root):
    nproc = ["--nproc", "2"] if mode == "ddp" else []
    result = run_cli(
        "run",
        mode,
        *nproc,
        "--steps",
        "50",
        "--device",
        "cpu",
        "--run-dir",
        str(runs_root),
        "--json",
        "--",
        "--fail-at-step",
        "3",
        "--fail-rank",
        str(expect["rank"]),
        "--fail-kind",
        kind,
    )
    assert result.returncode == 1, result.stderr
    cause = summary_from(result.stdout).root_cause
    assert {k: getattr(cause, k) for k in expect} == expect, cause
    if kind in ("segv", "abort", "exit"):  # no Python traceback: the stderr tail tells what happened
        assert f"injecting a failure ({kind}) at step 3" in cause.message + cause.traceback
    assert "Traceback" not in result.stderr.split("failed first")[0]
    assert live_processes_of(only_run_dir(runs_root)) == []


def test_ctrl_c_stops_every_rank_and_exits_130(runs_root):
    proc = subprocess.Popen(
        [
            *CLI,
            "run",
            "ddp",
            "--nproc",
            "2",
            "--steps",
            "100000",
            "--device",
            "cpu",
            "--run-dir",
            str(runs_root),
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    # Wait until both ranks are training, so there is something to stop.
    def stepping() -> Path | None:
        found = list(runs_root.glob("*/events/rank1.jsonl"))
        return found[0] if found and found[0].read_text().count('"step"') >= 3 else None

    assert wait_until(stepping, timeout=60, every=0.2), "the ranks never started stepping"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert summary_from(out).status == "interrupted"
    assert live_processes_of(only_run_dir(runs_root)) == []


def test_a_hung_rank_stalls_the_run_which_stops_with_every_ranks_stacks(runs_root):
    """Stopped by the stall watch at its timeout (the cause says 5 s), not by the end of its 1,000
    steps or gloo's timeout; how soon on an idle machine: `bench/run.py failures`."""
    result = run_cli(
        "run",
        "ddp",
        "--nproc",
        "2",
        "--steps",
        "1000",
        "--device",
        "cpu",
        "--stall-timeout",
        "5",
        "--run-dir",
        str(runs_root),
        "--json",
        "--",
        "--fail-at-step",
        "5",
        "--fail-rank",
        "1",
        "--fail-kind",
        "hang",
    )
    assert result.returncode == 1, result.stderr
    summary = summary_from(result.stdout)
    assert summary.status == "failed"
    assert {r.rank for r in summary.stall.ranks} == {0, 1}
    assert all(r.last_step == 4 for r in summary.stall.ranks)
    cause = summary.root_cause
    # The flight recorder's verdict: who never entered which collective, and where it is instead.
    verdict = summary.stall.verdict
    assert re.fullmatch(
        r"rank 1 never entered all_reduce\(float32\[\d+\]\) #\d+ \(default group\); rank 0 "
        r"has waited in it for \d+ s; rank 1 is in maybe_fail at faults\.py:\d+",
        verdict,
    )
    assert cause.rank == 1 and cause.message == f"stalled for 5 s: {verdict}"
    run_dir = only_run_dir(runs_root)
    hung = (run_dir / "stacks" / "rank1.txt").read_text()
    assert "in maybe_fail" in hung  # the hung rank's stack shows where it hangs
    assert "--- rank 1 ---" in cause.traceback and "maybe_fail" in cause.traceback
    assert "backward" in (run_dir / "stacks" / "rank0.txt").read_text()  # waiting in the all-reduce
    assert live_processes_of(run_dir) == []


def test_on_stall_report_keeps_the_run_going(runs_root):
    proc = subprocess.Popen(
        [
            *CLI,
            "run",
            "ddp",
            "--nproc",
            "2",
            "--steps",
            "1000",
            "--device",
            "cpu",
            "--stall-timeout",
            "3",
            "--on-stall",
            "report",
            "--run-dir",
            str(runs_root),
            "--json",
            "--",
            "--fail-at-step",
            "3",
            "--fail-rank",
            "0",
            "--fail-kind",
            "hang",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def taken() -> Path | None:
        found = list(runs_root.glob("*/stacks/rank0.txt"))
        return found[0] if found and found[0].stat().st_size else None

    stacks = wait_until(taken, timeout=40, every=0.3)
    assert stacks is not None, "no stacks were taken"
    time.sleep(1)
    assert proc.poll() is None  # reported, not stopped
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    summary = summary_from(out)
    assert summary.status == "interrupted" and summary.stall.ranks
    assert live_processes_of(only_run_dir(runs_root)) == []


def test_sigkill_of_mgpu_tui_leaves_no_rank_behind(runs_root):
    proc = subprocess.Popen(
        [
            *CLI,
            "run",
            "ddp",
            "--nproc",
            "2",
            "--steps",
            "100000",
            "--device",
            "cpu",
            "--run-dir",
            str(runs_root),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_until(lambda: list(runs_root.glob("*/events/rank1.jsonl")), 60)
    run_dir = only_run_dir(runs_root)
    assert live_processes_of(run_dir), "the ranks never started"
    proc.kill()  # SIGKILL: no clean-up here; the launcher's parent-death signal stops the ranks
    proc.wait()
    wait_until(lambda: not live_processes_of(run_dir), 10)
    assert live_processes_of(run_dir) == []


def test_a_slow_rank_is_named_a_straggler_with_where_its_time_goes(runs_root):
    """--fail-kind slow: rank 1 takes 50 ms longer over each batch. Every step of the job then takes
    as long (the others wait in the all-reduce), so step times cannot tell; when each rank is ready
    can. Named while the run goes and in the summary."""
    result = run_cli(
        "run",
        "ddp",
        "--nproc",
        "2",
        "--steps",
        "30",
        "--device",
        "cpu",
        "--run-dir",
        str(runs_root),
        "--json",
        "--",
        "--fail-kind",
        "slow",
        "--fail-rank",
        "1",
    )
    assert result.returncode == 0, result.stderr
    (straggler,) = summary_from(result.stdout).stragglers
    assert straggler.rank == 1 and straggler.steps >= 0.8 * straggler.of_steps >= 20
    assert 0.035 < straggler.late_s < 0.2 and straggler.data_s > 0.04 > straggler.others_data_s
    assert "mgpu-tui: straggler: rank 1 arrives" in result.stderr  # said as soon as it showed

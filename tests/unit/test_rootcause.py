"""The root cause from torchrun's own report, including when torchrun names a casualty first."""

import json
from pathlib import Path

from mgpu_tui.engine.protocol.rundir import RunDir
from mgpu_tui.engine.run.causes.rootcause import find_root_cause

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures/torchrun/segv-reported-after-its-casualty.txt"
REPORT = "".join(line for line in FIXTURE.read_text().splitlines(keepends=True) if not line.startswith("#"))
GLOO_RESET = (
    "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read "
    "error [127.0.0.1]:4838: Connection reset by peer."
)


def run_dir_with(tmp_path, report: str, errors: dict[int, str]) -> RunDir:
    run = RunDir.create(tmp_path, "ddp")
    for local in (0, 1):
        rank_dir = run.logs_dir / "job_1" / "attempt_0" / str(local)
        rank_dir.mkdir(parents=True)
        (rank_dir / "stdout.log").write_text("")
        (rank_dir / "stderr.log").write_text("injecting a failure (segv) at step 3\n" if local == 1 else "")
        if local in errors:
            (rank_dir / "error.json").write_text(
                json.dumps(
                    {
                        "message": {
                            "message": errors[local],
                            "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1"},
                        }
                    }
                )
            )
    error_file = run.logs_dir / "job_1" / "attempt_0" / "0" / "error.json"
    run.launcher_log.write_text(report.replace("{ERROR_FILE}", str(error_file)))
    return run


def test_a_rank_that_lost_its_peer_is_not_the_cause_when_torchrun_names_it_first(tmp_path):
    report = REPORT
    run = run_dir_with(tmp_path, report, {0: GLOO_RESET})
    cause = find_root_cause(run, launcher_exit_code=1, single_process=False)
    assert (cause.rank, cause.exit_code, cause.signal) == (1, -11, "SIGSEGV")
    assert cause.message == "killed by SIGSEGV (last stderr line: injecting a failure (segv) at step 3)"


def test_torchrun_is_believed_when_its_first_failure_is_a_failure_of_its_own(tmp_path):
    """Rank 1 raised, then torchrun ended it with SIGTERM while it tore down: still the cause."""
    report = REPORT
    # Root cause: rank 0 (SIGTERM) with an exception of its own; the other: rank 1 (SIGSEGV).
    run = run_dir_with(tmp_path, report, {0: "ValueError: bad batch"})
    cause = find_root_cause(run, launcher_exit_code=1, single_process=False)
    assert (cause.rank, cause.message) == (0, "ValueError: bad batch")


def test_the_rank_the_user_stopped_is_the_cause_whatever_torchrun_saw_first(tmp_path):
    """The app's x sends one rank SIGTERM: it has no error of its own, and its peer's "connection
    reset" can reach torchrun first (both look like casualties). The rank the user stopped is
    the cause; without that word, torchrun's first is (a test of the app saw either, by timing)."""
    stopped_by_hand = REPORT.replace(
        "exitcode  : -11 (pid: 17088)  (SIGSEGV)", "exitcode  : -15 (pid: 17088)  (SIGTERM)"
    )
    run = run_dir_with(tmp_path, stopped_by_hand, {0: GLOO_RESET})
    assert find_root_cause(run, launcher_exit_code=1, single_process=False).rank == 0
    cause = find_root_cause(run, launcher_exit_code=1, single_process=False, stopped_rank=1)
    assert (cause.rank, cause.signal) == (1, "SIGTERM")


def test_a_rank_that_timed_out_waiting_for_a_hung_peer_is_a_casualty_too(tmp_path):
    # One pattern decides a casualty everywhere: torchrun's order of failures, the nodes' verdicts
    # and the hint. A watchdog timeout is the waiting rank's consequence of its peer's hang.
    from mgpu_tui.engine.run.causes.rootcause import RootCause, is_consequence

    timeout = (
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) "
        "ran for 600000 milliseconds before timing out."
    )
    run = run_dir_with(tmp_path, REPORT, {0: timeout})
    cause = find_root_cause(run, launcher_exit_code=1, single_process=False)
    assert (cause.rank, cause.signal) == (1, "SIGSEGV")
    aborted = RootCause(
        rank=2, exit_code=1, signal=None, message="RuntimeError: ProcessGroupGloo is aborted", traceback=""
    )
    assert is_consequence(aborted)
    assert not is_consequence(
        RootCause(rank=2, exit_code=1, signal=None, message="ValueError: bad batch", traceback="")
    )


def test_the_traceback_shown_starts_at_the_users_frames():
    """Issue #43: the root-cause panel at 80x24 showed torch elastic's wrapper frame (and the
    watch's own) before the user's. They are left out of what is shown; the rest is unchanged."""
    from mgpu_tui.engine.protocol.causes import users_frames

    tb = (
        "Traceback (most recent call last):\n"
        '  File "/v/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/errors/'
        '__init__.py", line 357, in wrapper\n'
        "    return f(*args, **kwargs)\n"
        "           ^^^^^^^^^^^^^^^^^^\n"
        '  File "/home/u/train.py", line 12, in main\n'
        "    dist.init_process_group()\n"
        '  File "/v/lib/python3.11/site-packages/mgpu_tui/engine/rank/watch/wrapping.py", line 97, '
        "in watched\n"
        "    result = original(*args, **kwargs)\n"
        '  File "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 1892, in init\n'
        "    store, rank, world_size = next(rendezvous_iterator)\n"
        "RuntimeError: boom\n"
    )
    assert users_frames(tb) == (
        "Traceback (most recent call last):\n"
        '  File "/home/u/train.py", line 12, in main\n'
        "    dist.init_process_group()\n"
        '  File "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 1892, in init\n'
        "    store, rank, world_size = next(rendezvous_iterator)\n"
        "RuntimeError: boom\n"
    )
    assert users_frames("RuntimeError: no frames\n") == "RuntimeError: no frames\n"

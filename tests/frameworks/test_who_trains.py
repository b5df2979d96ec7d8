"""Who trains, and in which job, under `mgpu-tui exec` (issue #57): a process group's members are its
ranks; processes that train with no group (Hogwild's, a pool's tasks, a learning-rate finder before
the job) are trainers of their own, each with its figures and its end; sequential phases are
phases. And the watch's own bounds: the thread that trains is the one watched, backward with no
step keeps nothing without bound, a hello's claimed world size costs nothing past the processes
seen, a stopped rank's verdict is in summary.json. Each job's own RESULT lines are the truth."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import CLI, REPO, live_processes_of, only_run_dir, results_of, run_exec, summary_from

SCRIPTS = REPO / "tests" / "scripts"
PYTHON = sys.executable


@pytest.mark.timeout(300)
def test_a_learning_rate_finder_then_a_two_rank_job_are_two_phases_and_rank_1s_crash_is_rank_1s(tmp_path):
    """The finder steps an optimizer in the parent with no group, then mp.spawn starts the job. It
    was "rank 0 of 1": the job's rank 1 was never read, rank 0's steps mixed two processes, and
    rank 1's crash read "the launcher (rank null)"."""
    args = ["--lr-finder", "5", "--steps", "30", "--fail-rank", "1", "--fail-at", "20"]
    done, run_dir = run_exec(tmp_path, PYTHON, str(SCRIPTS / "spawn_ddp.py"), *args, timeout=280)
    summary = summary_from(done.stdout)
    assert done.returncode == 1 and summary.status == "failed", done.stderr
    assert summary.world_size == 2 and [r.rank for r in summary.ranks] == [0, 1]
    assert [r.last_step for r in summary.ranks] == [20, 20]  # both ranks, up to the crash
    cause = summary.root_cause
    assert cause.rank == 1 and cause.message == "ValueError: corrupt sample in shard 1 at step 20"
    (finder,) = summary.trainers
    assert finder.last_step == 5 and finder.done and finder.process == "MainProcess"
    parent = next(p for p in summary.processes if "spawn_ddp.py" in p.command and p.rank is None)
    assert finder.pid == parent.pid
    first, job = summary.phases
    assert (first.kind, first.trainers, job.kind, job.world_size) == ("trainers", (1,), "ranks", 2)
    assert first.ended_at <= job.began_at
    assert summary.malformed_events == 0 and live_processes_of(run_dir) == []


def test_a_pool_of_three_trainings_is_three_trainers(tmp_path):
    """Two workers, three learning rates: one worker trains twice, each time a trainer of its own
    (the three trainings interleaved in one rank's file before)."""
    done, run_dir = run_exec(tmp_path, PYTHON, str(SCRIPTS / "pool_sweep.py"), "--workers", "2")
    summary = summary_from(done.stdout)
    assert summary.status == "ok" and summary.world_size == 0 and not summary.ranks, done.stderr
    truth = results_of(done.stderr)
    assert len(summary.trainers) == 3 and len(truth) == 3
    assert len({t.pid for t in summary.trainers}) == 2  # a worker ran two of them
    by_loss = sorted(summary.trainers, key=lambda t: t.loss)
    for trainer, result in zip(by_loss, sorted(truth.values(), key=lambda r: r["loss"])):
        assert trainer.pid == result["pid"] and trainer.last_step == 12 and trainer.done
        assert abs(trainer.loss - result["loss"]) < 1e-6
        assert trainer.samples_per_s > 0
    # A task that began once every earlier one had ended begins a phase (as the machine schedules).
    assert summary.finished_training and all(
        1 <= t.phase <= len(summary.phases or [1]) for t in summary.trainers
    )
    assert live_processes_of(run_dir) == []


@pytest.mark.timeout(300)
def test_hogwild_trainers_each_have_their_steps_and_rate(tmp_path):
    """mnist_hogwild's shape: two spawned processes train one shared model, each its own optimizer.
    Both wrote rank 0's file (80 steps, a malformed hello, a rate off by half) before."""
    done, run_dir = run_exec(tmp_path, PYTHON, str(SCRIPTS / "hogwild.py"), "--steps", "40", timeout=280)
    summary = summary_from(done.stdout)
    assert summary.status == "ok" and summary.malformed_events == 0, done.stderr
    truth = {r["pid"]: r for r in results_of(done.stderr).values()}
    assert {t.pid for t in summary.trainers} == set(truth) and len(truth) == 2
    for trainer in summary.trainers:
        own = truth[trainer.pid]
        assert trainer.last_step == own["steps"] == 40 and trainer.done
        assert abs(trainer.samples_per_s / own["samples_per_s"] - 1) < 0.1, (trainer, own)
    assert summary.finished_training and summary.root_cause is None
    assert "evaluation: " in done.stderr  # the parent's own evaluation ran after them
    assert live_processes_of(run_dir) == []


@pytest.mark.timeout(300)
def test_a_hogwild_trainer_that_raises_fails_the_run_with_its_exception(tmp_path):
    """Its parent exits 0 (it never reads its children's exit codes): the summary said "ok ... the
    script ran to its end on every rank" before, the events holding `done`."""
    args = ["--steps", "12", "--fail-trainer", "1", "--fail-at", "6"]
    runs = tmp_path / "runs"
    done = subprocess.run(
        [*CLI, "exec", "--run-dir", str(runs), "--", PYTHON, str(SCRIPTS / "hogwild.py"), *args],
        capture_output=True, text=True, timeout=280, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr  # exec returns its command's own status (the parent's)
    summary = json.loads((only_run_dir(runs) / "summary.json").read_text())
    cause = summary["root_cause"]
    assert summary["status"] == "failed" and summary["finished_training"] is False
    assert cause["rank"] is None and cause["message"] == "IndexError: trainer 1: batch 6 out of range"
    assert 'hogwild.py", line' in cause["traceback"] and "in train" in cause["traceback"]
    assert "multiprocessing" not in cause["traceback"] and "process_watch" not in cause["traceback"]
    failed = next(t for t in summary["trainers"] if t["trainer"] == cause["trainer"])
    assert failed["last_step"] == 6 and not failed["done"] and failed["error"] == cause["message"]
    assert "ran to its end" not in done.stdout
    assert f"cause: trainer {cause['trainer']}: IndexError: trainer 1: batch 6 out of range" in done.stdout
    assert live_processes_of(only_run_dir(runs)) == []


@pytest.mark.parametrize("shape", ["evaluation", "hang"])
def test_a_thread_that_trains_is_the_one_watched(tmp_path, shape):
    """The main thread waits in join while a worker thread trains: a 12 s evaluation there is no
    stall (it was one, and --on-stall stop ended a healthy job), and a real hang there is."""
    args = ["--eval-at", "5", "--eval-s", "12"] if shape == "evaluation" else ["--hang-at", "5"]
    ours = ("--stall-timeout", "3", "--on-stall", "stop")
    done, run_dir = run_exec(tmp_path, PYTHON, str(SCRIPTS / "thread_train.py"), *args, ours=ours)
    summary = summary_from(done.stdout)
    if shape == "evaluation":
        assert summary.status == "ok" and summary.stall is None, done.stderr
        assert summary.ranks[0].last_step == results_of(done.stderr)[0]["steps"] == 20
        (events,) = (run_dir / "events").glob("trainer*.jsonl")  # a job of one process: its own file
        beats = [json.loads(line) for line in events.read_text().splitlines()]
        assert any(b["kind"] == "beat" and "evaluate at thread_train.py" in b["where"] for b in beats)
    else:
        stacks = summary.root_cause.traceback
        assert summary.status == "failed" and summary.stall.ranks[0].last_step == 5, done.stderr
        assert stacks.index("in train") < stacks.index("in join")  # the training thread's, first
    assert live_processes_of(run_dir) == []


@pytest.mark.timeout(600)  # 200,000 backward calls: 10 s on an idle 2-core machine, far more on a busy one
def test_backward_without_a_step_keeps_the_watchs_memory_flat(tmp_path):
    """200,000 backward calls and no optimizer step (a saliency map): the watch kept every loss
    until a step, about 50 MiB more here, without bound. Then one step, which the watch counts."""
    done, _ = run_exec(tmp_path, PYTHON, str(SCRIPTS / "saliency.py"), timeout=580)
    summary = summary_from(done.stdout)
    assert summary.status == "ok" and summary.ranks[0].last_step == 1, done.stderr  # the watch saw it
    (own,) = results_of(done.stderr).values()
    assert own["calls"] == 200_000 and own["rss_late"] - own["rss_early"] < 5 << 20, own


def test_a_hello_claiming_a_world_of_2_20_costs_nothing_past_the_processes_seen(tmp_path):
    """One forged line, a real pid: mgpu-tui read flight records for every claimed rank (82 s after
    a 2 s job) and called it world size 1,048,576. The job's own training is still counted."""
    done, run_dir = run_exec(tmp_path, PYTHON, str(SCRIPTS / "forged_world.py"))
    summary = summary_from(done.stdout)
    assert summary.status == "ok" and summary.world_size == 1 == len(summary.processes), done.stderr
    assert len(summary.peak_mem_bytes) == 1
    (trainer,) = summary.trainers
    assert trainer.last_step == 20 and trainer.done
    said = (run_dir / "mgpu-tui.log").read_text()
    assert "a rank said the world size is 1048576, but 1 process(es) ran: the job's is taken as 1" in said


@pytest.mark.timeout(300)
def test_a_stopped_rank_is_the_stalls_verdict_in_summary_json_as_on_the_console(tmp_path):
    """Rank 1 frozen by SIGSTOP, named on the console, then Ctrl-C: summary.json's verdict and
    culprit were null, and the console said "stopped" where the JSON said "interrupted"."""
    runs = tmp_path / "runs"
    args = ["--steps", "100000", "--step-sleep", "0.05"]
    proc = subprocess.Popen(
        [*CLI, "exec", "--run-dir", str(runs), "--stall-timeout", "3", "--", PYTHON,
         str(SCRIPTS / "spawn_ddp.py"), *args],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    pid, deadline = None, time.monotonic() + 120
    while pid is None and time.monotonic() < deadline:
        time.sleep(0.5)
        events = runs.glob("*/events/rank1.jsonl")
        lines = [json.loads(line) for path in events for line in path.read_text().splitlines()]
        if any(line["kind"] == "step" for line in lines):
            pid = lines[0]["pid"]
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        said = ""
        while time.monotonic() < deadline + 60 and "the run goes on" not in said:
            said += proc.stderr.readline()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    # exec returns its command's own status: mp.spawn's parent, waiting for the stopped rank after
    # the SIGINT passed on, is killed at the end of the stop grace (SIGKILL: 137); bare, it would wait.
    assert proc.returncode in (130, 137) and "rank 1 is stopped (SIGSTOP" in said, said
    summary = json.loads((only_run_dir(runs) / "summary.json").read_text())
    stall = summary["stall"]
    assert summary["status"] == "interrupted" and stall["culprit"] == 1
    assert stall["verdict"].startswith("rank 1 is stopped (SIGSTOP, Ctrl-Z or a debugger)")
    assert (
        "status interrupted" in out
        and "hung: stalled for" in out
        and stall["verdict"] in out
        and "status stopped" not in out
    )
    assert live_processes_of(only_run_dir(runs)) == []

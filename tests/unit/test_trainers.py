"""A command's trainers and phases read from their files (issue #57; the real processes are in
tests/frameworks/test_who_trains.py): each hello of a trainer's file begins a trainer of its own,
a lone training is the job (rank 0 of 1) as a one-process script has been, a learned world size is
shown no larger than the processes seen, and the summary and its text say who trained when."""

import dataclasses
import json

from test_untrusted_events import hello, line, step
from test_untrusted_events import run_dir as run_dir  # noqa: F401 (the fixture)

from mgpu_tui.engine.protocol.causes import RootCause
from mgpu_tui.engine.run.causes.watchdog import Stall, StalledRank
from mgpu_tui.engine.run.figures.trainers import TrainerStats, phases_of
from mgpu_tui.engine.run.ingest import MAX_TRAINER_FILES, Ingest
from mgpu_tui.engine.run.summary import RunSummary
from mgpu_tui.reports.run_summary import summary_text


def trainer(pid, world_size=1, **over):
    """A trainer's hello, as the watch writes it: rank 0 of a world of one, its process named."""
    fields = dict(local_rank=0, world_size=world_size, pid=pid, host="h", device="cpu", device_uuid=None)
    return line(
        "hello", 0, **fields, mode="script", config={"process": "ForkPoolWorker-1"}, stacks=True, **over
    )


def write_trainer(run_dir, pid, *lines):
    with open(run_dir.events_dir / f"trainer{pid}.jsonl", "ab") as f:
        f.write(b"".join(lines))


def test_each_hello_of_a_trainers_file_begins_a_trainer_of_its_own(run_dir):
    """A pool worker's two tasks: two trainers, each its own steps and end; nothing in a rank."""
    first = [trainer(300), step(0, 1), step(0, 2), line("done", 0, steps=2)]
    error = line("error", 0, message="IndexError: out of range", traceback="", type="IndexError", dt=9)
    write_trainer(run_dir, 300, *first, trainer(300, dt=5), step(0, 1, loss=0.25), error)
    write_trainer(run_dir, 301, trainer(301, dt=1), step(0, 1))
    ingest = Ingest(run_dir, None, command_output=True)
    ingest.read()
    stats = ingest.stats()
    assert ingest.malformed_events == 0 and ingest.world_size is None and stats.ranks == ()
    assert [(t.trainer, t.pid, t.figures.last_step) for t in stats.trainers] == [
        (1, 300, 2),
        (2, 301, 1),
        (3, 300, 1),
    ]
    assert stats.trainers[0].figures.done and not stats.trainers[2].figures.done
    assert stats.trainers[0].process == "ForkPoolWorker-1" and stats.trainers[2].figures.loss == 0.25
    assert list(ingest.trainer_errors()) == [3] and ingest.errors() == {}


def test_one_training_alone_is_the_job_rank_0_of_1(run_dir):
    write_trainer(run_dir, 300, trainer(300), step(0, 1), step(0, 2))
    ingest = Ingest(run_dir, None, command_output=True)
    ingest.read()
    stats = ingest.stats()
    assert ingest.world_size == 1 and stats.world_size == 1 and stats.trainers == ()
    assert [(r.rank, r.last_step, r.pid) for r in stats.ranks] == [(0, 2, 300)]
    assert ingest.rank_processes() == {0: (300, None)} and ingest.lone_trainer_pid() == 300


def test_a_trainers_line_fits_only_as_rank_0_of_one_under_its_files_pid(run_dir):
    lines = [trainer(301), step(0, 1), trainer(300, world_size=2), step(1, 1), line("done", 1, steps=1)]
    write_trainer(run_dir, 300, step(0, 1), *lines)  # a step before any hello, a hello of pid 301...
    ingest = Ingest(run_dir, None, command_output=True)
    ingest.read()
    assert ingest.malformed_events == 6 and len(ingest.trainers) == 0


def test_a_helper_before_the_job_is_a_trainer_and_its_own_phase(run_dir):
    write_trainer(run_dir, 300, trainer(300), step(0, 1), step(0, 2), line("done", 0, steps=2, dt=90))
    with open(run_dir.events_dir / "rank0.jsonl", "wb") as f:
        f.write(hello(0, pid=400, world_size=2, dt=10) + step(0, 20, loss=0.5))
    ingest = Ingest(run_dir, None, command_output=True)
    ingest.read()
    stats = ingest.stats()
    assert stats.world_size == 2 and [(r.rank, r.last_step) for r in stats.ranks] == [(0, 20)]
    (finder,) = stats.trainers
    first, job = stats.phases
    assert (first.kind, first.trainers, finder.phase) == ("trainers", (1,), 1)
    assert (job.kind, job.world_size, job.trainers) == ("ranks", 2, ())


def test_spans_that_overlap_are_one_phase():
    def at(number, began, last):
        return TrainerStats(number, 100 + number, None, began, last, None)  # type: ignore[arg-type]

    phases, placed = phases_of((at(1, 0.0, 5.0), at(2, 1.0, 9.0), at(3, 10.0, 12.0)), (11.0, 20.0), 4)
    assert [(p.kind, p.trainers, p.world_size) for p in phases] == [
        ("trainers", (1, 2), 0),
        ("ranks", (3,), 4),
    ]
    assert [t.phase for t in placed] == [1, 1, 2]


def test_the_trainers_files_read_are_bounded(run_dir):
    for pid in range(1000, 1000 + MAX_TRAINER_FILES + 20):
        write_trainer(run_dir, pid, trainer(pid), step(0, 1))
    ingest = Ingest(run_dir, None, command_output=True)
    ingest.read()
    assert len(ingest.trainers) == MAX_TRAINER_FILES


def test_a_claimed_world_size_is_shown_no_larger_than_the_processes_seen(run_dir):
    with open(run_dir.events_dir / "rank0.jsonl", "wb") as f:
        f.write(hello(0, pid=400, world_size=2**20) + step(0, 1))
    ingest = Ingest(run_dir, None, command_output=True, seen=lambda: 3)
    ingest.read()
    assert ingest.stats().world_size == 3
    ingest.read_flight_records(range(2**20))  # the ranks heard from alone: no wait, no million files
    assert ingest.stats().ranks[0].collectives is None


def test_the_summary_keeps_its_trainers_and_phases_and_its_text_says_them(run_dir):
    write_trainer(run_dir, 300, trainer(300), step(0, 1), step(0, 2), line("done", 0, steps=2, dt=90))
    with open(run_dir.events_dir / "rank0.jsonl", "wb") as f:
        f.write(hello(0, pid=400, world_size=1, dt=10) + step(0, 20, loss=0.5))
    ingest = Ingest(run_dir, None, command_output=True)
    ingest.read()
    summary = summary_of(ingest.stats(), run_dir)
    document = json.loads(json.dumps(summary.to_json()))
    again = RunSummary.from_json(document)
    assert again.trainers == summary.trainers and again.phases == summary.phases
    assert [t["trainer"] for t in document["trainers"]] == [1] and len(document["phases"]) == 2
    text = summary_text(again)
    assert "trainer 1  300 ForkPoolWorker-1" in text and "done" in text
    assert "phases: 1. trainer 1 0.0-2.0 s; 2. ranks (world size 1) 10.0-20.0 s" in text
    plain = dataclasses.replace(summary, trainers=(), phases=())
    assert "trainers" not in plain.to_json() and "phases" not in plain.to_json()


def test_a_trainers_failure_and_a_stopped_ranks_stall_in_words(run_dir):
    write_trainer(run_dir, 300, trainer(300), step(0, 1))
    write_trainer(run_dir, 301, trainer(301), step(0, 1))
    ingest = Ingest(run_dir, None, command_output=True)
    ingest.read()
    cause = RootCause(None, None, None, "IndexError: out of range", "", trainer=2)
    stopped = StalledRank(1, 5, 4.0, process="stopped", answers_stacks=True)
    verdict = "rank 1 is stopped (SIGSTOP, Ctrl-Z or a debugger) and cannot run until continued (SIGCONT)"
    stall = Stall(3.0, (stopped,), "stacks", verdict, 1)
    summary = summary_of(ingest.stats(), run_dir, root_cause=cause, stall=stall, status="interrupted")
    text = summary_text(summary)
    assert "status interrupted  trainers 2 (no process group)" in text
    assert (
        "cause: trainer 2: IndexError: out of range" in text and f"hung: stalled for 3 s: {verdict}" in text
    )
    assert "trainer" in summary.to_json()["root_cause"] and "trainer_pid" not in json.dumps(stall.to_json())
    assert "stalled for 3 s: rank 1 is stopped" in stall.root_cause().message
    assert stall.root_cause().message.count("is stopped") == 1


def summary_of(stats, run_dir, root_cause=None, stall=None, status="ok"):
    from test_untrusted_events import CPU

    from mgpu_tui.engine.launch.spec import LaunchSpec, resolve
    from mgpu_tui.engine.run.summary import RunStatus

    resolved = resolve(LaunchSpec(mode="exec", command=("python", "job.py"), device="cpu"), CPU)
    return RunSummary.build(
        resolved,
        str(run_dir.path),
        stats,
        status=RunStatus(status),
        exit_code=0,
        root_cause=root_cause,
        started_at=1000.0,
        ended_at=1030.0,
        malformed_events=0,
        stall=stall,
        world_size=stats.world_size,
    )

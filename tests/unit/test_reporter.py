"""The reporter, as rank code uses it: with a run directory, and without."""

import io
import json
import os

from mgpu_tui.engine.protocol.events import parse_line
from mgpu_tui.engine.rank import event_files
from mgpu_tui.engine.rank.reporter import Reporter, ScriptReporter


def test_with_a_run_directory_every_call_is_one_event(tmp_path):
    reporter = Reporter(rank=1, world_size=2, run_dir=tmp_path, stream=io.StringIO())
    reporter.hello(mode="ddp", device="cpu", config={"steps": 2})
    path = tmp_path / "events" / "rank1.jsonl"
    assert parse_line(path.read_text().splitlines()[0]).mode == "ddp"  # readable before close
    reporter.step(1, samples=32, loss=0.5, mem_peak_bytes=7)
    reporter.done(2)
    reporter.close()
    events = [parse_line(line) for line in path.read_text().splitlines()]
    assert [type(e).__name__ for e in events] == ["Hello", "Step", "Done"]
    assert events[1].samples == 32 and events[1].loss == 0.5 and events[1].step_s >= 0


def test_an_exception_inside_is_recorded_as_an_error_event(tmp_path):
    try:
        with Reporter(rank=0, run_dir=tmp_path) as reporter:
            reporter.hello(mode="single", device="cpu")
            raise ValueError("bad batch")
    except ValueError:
        pass
    last = json.loads((tmp_path / "events" / "rank0.jsonl").read_text().splitlines()[-1])
    assert last["kind"] == "error" and last["message"] == "ValueError: bad batch"
    assert "raise ValueError" in last["traceback"]


def test_without_a_run_directory_it_writes_nothing_and_prints_every_nth_step(tmp_path, monkeypatch):
    monkeypatch.delenv("MGPU_RUN_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    reporter = Reporter(rank=0, stream=out)
    reporter.hello(mode="single", device="cpu", config={"steps": 50})
    for step in range(1, 51):
        reporter.step(step, samples=8, loss=1.0)
    assert not reporter.recording
    assert list(tmp_path.iterdir()) == []
    hello, *progress = out.getvalue().splitlines()
    assert hello.startswith("[rank 0] single on cpu, rank 0 of 1, pid ") and hello.endswith(", 50 steps")
    assert len(progress) == 10 and progress[-1].startswith("[rank 0] step 50  loss 1.0000  ")


def test_a_long_run_prints_at_least_every_ten_seconds(monkeypatch):
    from mgpu_tui.engine.rank import reporter as reporter_module

    monkeypatch.delenv("MGPU_RUN_DIR", raising=False)
    clock = [1000.0]
    monkeypatch.setattr(reporter_module.time, "time", lambda: clock[0])
    out = io.StringIO()
    reporter = Reporter(rank=0, stream=out)
    reporter.hello(mode="single", device="cpu", config={"steps": 1_000_000})  # a tenth: 100,000 steps
    for step in range(1, 31):
        clock[0] += 1.0  # one step a second
        reporter.step(step, samples=8, loss=1.0)
    assert [line.split()[3] for line in out.getvalue().splitlines()[1:]] == ["10", "20", "30"]


def test_other_ranks_stay_quiet_without_a_run_directory(monkeypatch):
    monkeypatch.delenv("MGPU_RUN_DIR", raising=False)
    out = io.StringIO()
    reporter = Reporter(rank=1, stream=out)
    reporter.hello(mode="ddp", device="cpu", config={"steps": 10})
    for step in range(1, 11):
        reporter.step(step, samples=8)
    assert out.getvalue() == ""


def _kinds(path) -> list[tuple[str, int | None]]:
    return [(e["kind"], e.get("step")) for e in map(json.loads, path.read_text().splitlines())]


def test_a_steps_line_waits_until_flush_s_passed_another_event_comes_or_a_beat_flushes(tmp_path, monkeypatch):
    """Two system calls a write: the watch's step line waits (event_files.FLUSH_S) and goes with those
    after it, in order, once it is due, at any other event, at the beat thread's flush, or at the end."""
    monkeypatch.setattr(event_files, "FLUSH_S", 3600.0)
    reporter = ScriptReporter(rank=0, run_dir=tmp_path)
    reporter.hello(mode="ddp", device="cpu")
    path = tmp_path / "events" / "rank0.jsonl"
    for step in range(1, 6):
        reporter.step(step, samples=1, loss=1.0)
    assert _kinds(path) == [("hello", None)]  # the steps wait
    reporter.flush()  # the beat thread's, each beat
    assert _kinds(path) == [("hello", None)] + [("step", n) for n in range(1, 6)]
    reporter.step(6, samples=1, loss=1.0)
    reporter.error("boom")  # another kind: the step before it first
    assert _kinds(path)[-2:] == [("step", 6), ("error", None)]
    monkeypatch.setattr(event_files, "FLUSH_S", 0.0)
    reporter.step(7, samples=1, loss=1.0)  # due: at once
    assert _kinds(path)[-1] == ("step", 7)
    monkeypatch.setattr(event_files, "FLUSH_S", 3600.0)
    reporter.step(8, samples=1, loss=1.0)
    reporter.close()  # the end writes what waits
    assert _kinds(path)[-1] == ("step", 8)


def test_waiting_lines_never_go_to_a_file_the_script_opened_under_the_events_number(tmp_path, monkeypatch):
    monkeypatch.setattr(event_files, "FLUSH_S", 3600.0)
    reporter = ScriptReporter(rank=0, run_dir=tmp_path)
    reporter.hello(mode="ddp", device="cpu")
    reporter.step(1, samples=1, loss=1.0)
    assert reporter._files is not None and reporter._files.file is not None
    number = reporter._files.file.fileno()
    os.close(number)  # the script's os.closerange(3, ...), then a file of its own
    theirs = tmp_path / "theirs.txt"
    assert os.open(theirs, os.O_RDWR | os.O_CREAT) == number
    reporter.step(2, samples=1, loss=1.0)
    reporter.flush()
    assert theirs.read_bytes() == b""
    assert _kinds(tmp_path / "events" / "rank0.jsonl") == [("hello", None), ("step", 1), ("step", 2)]
    os.close(number)
    reporter.close()


def test_a_forked_childs_copy_of_the_waiting_lines_is_the_parents_to_write(tmp_path, monkeypatch):
    monkeypatch.setattr(event_files, "FLUSH_S", 3600.0)
    reporter = ScriptReporter(rank=0, run_dir=tmp_path)
    reporter.hello(mode="ddp", device="cpu")
    reporter.step(1, samples=1, loss=1.0)
    pid = os.fork()
    if pid == 0:  # the child: lets go of the parent's rank, and writes nothing of it
        reporter.abandon()
        reporter.close()
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    reporter.close()
    assert _kinds(tmp_path / "events" / "rank0.jsonl") == [("hello", None), ("step", 1)]  # once


def test_a_reporter_with_no_beats_to_flush_it_writes_each_step_at_once(tmp_path, monkeypatch):
    """A demo's (or a script's own) Reporter: a rank that hangs after a step has that step on record."""
    monkeypatch.setattr(event_files, "FLUSH_S", 3600.0)
    reporter = Reporter(rank=0, run_dir=tmp_path, stream=io.StringIO(), print_every=10**9)
    reporter.hello(mode="ddp", device="cpu")
    reporter.step(1, samples=1, loss=1.0)
    assert _kinds(tmp_path / "events" / "rank0.jsonl") == [("hello", None), ("step", 1)]
    reporter.close()

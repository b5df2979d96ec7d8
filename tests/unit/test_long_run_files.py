"""A long run's event files stay bounded and lose nothing a reader needs (issue 64): the reporter
writes its head, then segments of which it keeps the latest few, and a digest of every run of steps
(engine/rank/event_files.py); a reader, live and behind, or opening the run late, reads every step
once, whole or digested (engine/protocol/long_run/tail.py). Here the sizes are made small, so that a
few thousand steps go through many segments; and the files are what any rank can make of them."""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import time
import urllib.request
from pathlib import Path

import figures_before
import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_long_run_figures import close, differences

from conftest import hostile_finished_run
from mgpu_tui.engine.metrics.server import MetricsServer
from mgpu_tui.engine.protocol.events import Digest, Hello, MalformedEvent, Step, encode, parse_line
from mgpu_tui.engine.protocol.long_run.tail import EventTail
from mgpu_tui.engine.protocol.rundir import RunDir
from mgpu_tui.engine.rank import event_files
from mgpu_tui.engine.rank.event_files import EventFiles
from mgpu_tui.engine.rank.reporter import Reporter, ScriptReporter
from mgpu_tui.engine.records.follow import FollowedRun
from mgpu_tui.engine.run.figures.aggregate import read_events
from mgpu_tui.engine.run.figures.long_run import whole_run
from mgpu_tui.engine.run.figures.trainers import Trainers
from mgpu_tui.engine.run.ingest import Ingest

SEGMENT = 16 << 10  # about 80 steps a segment


@pytest.fixture
def small_files(monkeypatch):
    monkeypatch.setattr(event_files, "HEAD_BYTES", SEGMENT)
    monkeypatch.setattr(event_files, "SEGMENT_BYTES", SEGMENT)
    monkeypatch.setattr(event_files, "DIGEST_STEPS", 32)


def seconds_of(step: int) -> float:
    return 0.05 + 0.001 * (step * 7 % 13)


def write_run(folder: Path, steps: int, ranks: int = 2, *, lines: list | None = None) -> list[Reporter]:
    """A run of ``steps`` steps a rank, as the ranks' own reporters write it (each rank's times the
    same: a job whose ranks wait for each other); ``lines``: every line written, kept."""
    reporters = [
        Reporter(rank=r, world_size=ranks, run_dir=folder, print_every=10**9, stream=io.StringIO())
        for r in range(ranks)
    ]
    t = {r: 1e9 for r in range(ranks)}
    for reporter in reporters:
        reporter.hello(mode="ddp", device="cpu", config={"steps": steps})
        reporter._last = t[reporter.rank]
    for step in range(1, steps + 1):
        for reporter in reporters:
            t[reporter.rank] += seconds_of(step)
            loss = math.nan if step == steps // 2 and reporter.rank == 1 else 3.0 / step
            reporter.step(
                step, samples=16, tokens=16 * 64, loss=loss, mem_peak_bytes=1000 + step, at=t[reporter.rank]
            )
    for reporter in reporters:
        reporter.done(steps)
        reporter.close()
    return reporters


@pytest.fixture
def kept_lines(monkeypatch):
    """Every line the reporters write, as written (the figures of every step kept: the oracle)."""
    lines: list[str] = []
    write = EventFiles.write

    def keep(self, line, *rest):
        lines.append(line)
        write(self, line, *rest)

    monkeypatch.setattr(EventFiles, "write", keep)
    return lines


def test_a_long_run_keeps_its_head_a_few_segments_and_a_digest(tmp_path, small_files):
    write_run(tmp_path, 3000)
    folder = RunDir(tmp_path)
    for rank in (0, 1):
        segments = folder.events_segments(rank)
        assert len(segments) == event_files.KEEP and max(segments) > 20  # the older ones removed
        assert folder.events_path(rank).stat().st_size < SEGMENT + 1024
        assert all(p.stat().st_size < SEGMENT + 1024 for p in segments.values())
        digests = [parse_line(x) for x in folder.events_digest_path(rank).read_bytes().splitlines()]
        kinds = {type(e).__name__ for e in digests}
        assert kinds == {"Hello", "Digest", "Done"}
        assert sum(d.n for d in digests if isinstance(d, Digest)) == 3000  # every step, once


def test_a_long_run_read_back_has_the_figures_of_every_step(tmp_path, small_files, kept_lines):
    """Read back (its head, its digests, its latest segments), a long run has the figures of every
    step, and issue 62's metrics endpoint serves them as the Run view reads them."""
    folder = hostile_finished_run(tmp_path)  # its spec and summary, for the metrics; its events, a long run's
    shutil.rmtree(folder / "events")
    write_run(folder, 3000)
    every = figures_before.Aggregator()
    for line in kept_lines:
        every.add(parse_line(line))
    before, now = every.stats(), read_events(folder).stats()
    differ = differences(before, now, rel=1e-9)  # its older steps' sums added a digest at a time
    for name in ("step_time_s_median", "step_time_s_spread"):  # their bins', each rank's times the same
        assert close(*differ.pop(name), rel=0.01), name
    assert differ == {}
    assert now.ranks[1].diverged_at == 1500 and now.ranks[0].mem_peak_bytes == 4000
    steps, _, losses = read_events(folder).whole_series()
    assert steps[0] <= whole_run.BLOCK and steps[-1] == 3000 and losses[-1] == pytest.approx(3.0 / 3000)
    value = served_figures(FollowedRun(folder))
    for r in (0, 1):
        assert value[("mgpu_rank_steps_total", str(r))] == 3000 == before.ranks[r].last_step
        assert value[("mgpu_rank_samples_per_second", str(r))] == pytest.approx(before.ranks[r].samples_per_s)
        assert value[("mgpu_rank_step_seconds", str(r))] == pytest.approx(before.ranks[r].step_s)
    assert value[("mgpu_run_samples_per_second", None)] == pytest.approx(before.samples_per_s)


def served_figures(run: FollowedRun) -> dict:
    """What the metrics endpoint serves of ``run``, once read to its end: (name, rank) -> value."""
    server = MetricsServer(0, "127.0.0.1", linger_s=0)
    server.start()
    try:
        while not run.poll().finished:
            pass
        server.publish(run, force=True)
        with urllib.request.urlopen(server.url, timeout=30) as answer:
            body = answer.read().decode()
    finally:
        server.close()
        run.close()
    families = text_string_to_metric_families(body)
    return {
        (s.name, s.labels.get("rank")): s.value
        for f in families
        for s in f.samples
        if "quantile" not in s.labels
    }


def steps_of(lines: list[bytes]) -> list[tuple[int, int]]:
    """(first, last) of each step or digest among the lines (the rest: none)."""
    found = []
    for line in lines:
        event = parse_line(line)
        if isinstance(event, Step):
            found.append((event.step, event.step))
        elif isinstance(event, Digest):
            found.append((event.first, event.last))
    return found


def read_all(tail: EventTail) -> list[bytes]:
    lines = []
    for _ in range(10_000):
        got = tail.read_lines()
        lines += got
        if not got and not tail.behind:
            return lines
    raise AssertionError("never caught up")


def test_a_reader_behind_the_writer_reads_every_step_once_whole_or_digested(
    tmp_path, small_files, monkeypatch
):
    monkeypatch.setattr("mgpu_tui.engine.protocol.long_run.tail.LOOK_EVERY_S", 0.0)
    reporter = Reporter(rank=0, world_size=1, run_dir=tmp_path, print_every=10**9, stream=io.StringIO())
    reporter.hello(mode="ddp", device="cpu")
    tail = EventTail(RunDir(tmp_path), 0, max_line=1 << 20)
    read: list[bytes] = []
    step = 0
    for burst in (10, 50, 400, 3, 2000, 90, 1500):  # past KEEP segments at a time: it falls behind
        for _ in range(burst):
            step += 1
            reporter.step(step, samples=1, loss=1.0)
        read += tail.read_lines(SEGMENT // 3)  # a little at a time
    reporter.close()
    read += read_all(tail)
    covered = steps_of(read)
    assert [first for first, _ in covered] == [1] + [
        last + 1 for _, last in covered[:-1]
    ]  # each once, in order
    assert covered[-1][1] == step and any(first < last for first, last in covered)  # some digested


def test_a_reader_starting_late_reads_the_head_digests_then_the_latest_segments_whole(tmp_path, small_files):
    write_run(tmp_path, 3000, ranks=1)
    tail = EventTail(RunDir(tmp_path), 0, max_line=1 << 20)
    lines = read_all(tail)
    covered = steps_of(lines)
    assert covered[0] == (1, 1) and covered[-1] == (3000, 3000)
    assert [first for first, _ in covered] == [1] + [last + 1 for _, last in covered[:-1]]
    whole = sum(1 for first, last in covered if first == last)
    assert whole < 3 * SEGMENT / 150  # the head and two segments: not the 3,000 steps
    assert sum(isinstance(parse_line(x), type(parse_line(lines[0]))) for x in lines) == 1  # one hello


def test_a_rank_started_again_goes_on_in_its_latest_segment(tmp_path, small_files):
    write_run(tmp_path, 500, ranks=1)
    before = RunDir(tmp_path).events_segments(0)
    write_run(tmp_path, 10, ranks=1)  # torchrun's restart: a new process of the same rank
    after = RunDir(tmp_path).events_segments(0)
    assert max(after) == max(before) and after[max(after)].read_text().count('"kind":"hello"') == 1


def test_a_line_is_the_same_whether_its_copy_for_json_is_skipped_or_not():
    """The encoding of an event whose fields are plain numbers skips the copy that makes JSON of a
    NaN at any depth (it pays for the reference a step's digest keeps): the bytes are the same."""
    fields = {
        "step": 1,
        "samples": 32,
        "tokens": 0,
        "loss": 0.5,
        "step_s": 0.1,
        "mem_bytes": 1,
        "mem_peak_bytes": 2,
    }
    assert encode("step", 0, 1.5, fields) == (
        '{"v":1,"kind":"step","rank":0,"t":1.5,"step":1,"samples":32,"tokens":0,"loss":0.5,'
        '"step_s":0.1,"mem_bytes":1,"mem_peak_bytes":2}\n'
    )
    assert '"loss":null,' in encode("step", 0, 1.5, {**fields, "loss": math.inf})
    assert encode("done", 0, 1.5, {"steps": 1, "x": [math.nan], "y": {2: math.inf}}).endswith(
        '"steps":1,"x":["nan"],"y":{"2":"inf"}}\n'
    )


# ---- what any rank can make of them ---------------------------------------------------------


def test_hostile_segments_and_digests_are_refused_or_malformed_never_followed(tmp_path, small_files):
    write_run(tmp_path, 1500, ranks=1)
    folder = RunDir(tmp_path)
    segments = folder.events_segments(0)
    secret = tmp_path / "secret.jsonl"
    secret.write_text(
        encode("step", 0, 1.0, {"step": 10**6, "samples": 1, "tokens": 0, "loss": 7.0, "step_s": 1})
    )
    newest = max(segments)
    segments[newest].unlink()
    segments[newest].symlink_to(secret)  # a link to a file of steps: never read
    segments[newest - 1].unlink()
    os.mkfifo(segments[newest - 1])  # a FIFO: never blocks
    with open(folder.events_digest_path(0), "a") as f:  # digests out of their range, or not JSON
        f.write('{"v":1,"kind":"digest","rank":0,"t":1,"first":1,"last":2,"n":2,"samples":1,"tokens":0,'
                f'"step_s":[1,0.5,0.5],"hist":[[99999,2]],"loss":null,"seg":{newest + 1}}}\n')  # fmt: skip
        f.write(f'[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[ "seg": {newest + 1}\n')
    started = time.monotonic()
    aggregator = read_events(tmp_path)
    assert time.monotonic() - started < 30  # (a hang would never end)
    stats = aggregator.stats()
    assert stats.ranks[0].last_step < 10**6 and stats.ranks[0].loss != 7.0
    with pytest.raises(MalformedEvent):
        parse_line(
            '{"v":1,"kind":"digest","rank":0,"t":1,"first":1,"last":2,"n":2,"samples":1,"tokens":0,'
            '"step_s":[1,0.5,0.5],"hist":[[99999,2]],"loss":null}'
        )
    tail = EventTail(folder, 0, max_line=1 << 20)
    read_all(tail)
    assert tail.refused


def test_a_ranks_folder_that_is_a_link_is_never_read(tmp_path, small_files):
    elsewhere = tmp_path / "elsewhere"
    write_run(elsewhere, 1500, ranks=1)
    run = tmp_path / "run"
    (run / "events").mkdir(parents=True)
    (run / "events" / "rank0.jsonl").write_bytes((elsewhere / "events" / "rank0.jsonl").read_bytes())
    (run / "events" / "rank0").symlink_to(elsewhere / "events" / "rank0")
    tail = EventTail(RunDir(run), 0, max_line=1 << 20)
    lines = read_all(tail)
    assert max(last for _, last in steps_of(lines)) < 200  # the head only: the link is refused


def test_a_long_run_read_as_open_reads_it_reaches_every_ranks_last_step(tmp_path, small_files):
    """The ingest reads while some file is behind (follow.py, run/ingest.py): a segment read to its
    end, with a later one there, is behind."""
    write_run(tmp_path, 3000)
    ingest = Ingest(RunDir(tmp_path), world_size=2)
    for _ in range(1000):
        if not ingest.read():
            break
    stats = ingest.stats()
    assert [r.last_step for r in stats.ranks] == [3000, 3000] and all(r.done for r in stats.ranks)
    assert stats.steps == 3000 and ingest.malformed_events == 0
    ingest.close()


def test_a_long_runs_telemetry_is_thinned_ever_more_and_never_reaches_its_cap(tmp_path):
    """Its run's own writer (telemetry_log.py), fed 20,000 samples (an hour of them full rate, here 10):
    the file stays under its cap however long, and still reaches the run's end."""
    from mgpu_tui.engine.machine.nvml import NvmlState, NvmlStatus
    from mgpu_tui.engine.machine.telemetry import HostSample, Snapshot
    from mgpu_tui.engine.run.figures.telemetry_log import TelemetryLog

    path = tmp_path / "telemetry.jsonl"
    log = TelemetryLog(path, interval=1.0, ranks=dict, full_rate_samples=10, thin_every=2, max_bytes=12_000)
    log._file = open(path, "a", encoding="utf-8")  # (what start() opens, without its sampler thread)
    host = HostSample((50.0,), 1 << 30, 1 << 40, (1.0, 1.0, 1.0))
    for t in range(20_000):
        log._take(Snapshot(float(t), NvmlStatus(NvmlState.OK, "ok"), (), host, ()))
    log._file.close()
    kept = [json.loads(line) for line in path.read_text().splitlines()]
    assert path.stat().st_size < 12_000 and "end" not in kept[-1] and len(kept) == log.kept
    gaps = [b["t"] - a["t"] for a, b in zip(kept, kept[1:])]
    assert gaps[:9] == [1.0] * 9 and gaps[-1] > 8 * gaps[10] and kept[-1]["t"] > 15_000
    assert log.stop().samples == 20_000


def test_a_trainers_long_run_rotates_as_a_ranks_and_is_read_back_whole(tmp_path, small_files):
    """A trainer (a process of a command that trains with no process group: issue 57) writes
    events/trainer<PID>.jsonl: a long one goes on in trainer<PID>/'s segments and digest, bounded as
    a rank's, and the ingest of a command reads every step of it, whole or digested."""
    reporter = ScriptReporter(trainer=True, rank=0, world_size=1, run_dir=tmp_path, print_every=10**9)
    reporter.hello(mode="exec", device="cpu", config={"process": "python train.py"})
    reporter._last = t = 1e9
    for step in range(1, 3001):
        t += seconds_of(step)
        reporter.step(step, samples=16, tokens=0, loss=3.0 / step, mem_peak_bytes=1000, at=t)
    reporter.done(3000)
    reporter.close()
    folder, pid = RunDir(tmp_path), os.getpid()
    segments = folder.events_segments(pid, trainer=True)
    assert len(segments) == event_files.KEEP and max(segments) > 20 and not folder.event_files()
    assert folder.events_path(pid, trainer=True).stat().st_size < SEGMENT + 1024
    digests = [parse_line(x) for x in folder.events_digest_path(pid, trainer=True).read_bytes().splitlines()]
    assert sum(d.n for d in digests if isinstance(d, Digest)) == 3000
    ingest = Ingest(folder, world_size=None, command_output=True)
    for _ in range(1000):
        if not ingest.read():
            break
    (trainer,) = ingest.trainers.figures()
    assert trainer.pid == pid and trainer.figures.last_step == 3000 and trainer.figures.done
    assert ingest.stats().steps == 3000 and ingest.malformed_events == 0  # a job of one: its figures
    ingest.close()


def test_a_commands_many_trainings_hold_together_what_one_jobs_ranks_may(monkeypatch):
    """A pool's trainings (issue 57: each hello in a trainer's file begins one) share one job's memory:
    each keeps a share of the steps a job's ranks keep whole, the older ones folded (whole_run.py); here
    a job keeps 256 steps whole, a rank at most 64 and at least 8."""
    for name, value in (("WINDOW", 64), ("MIN_WINDOW", 8), ("WINDOW_BUDGET", 256), ("MIN_FOLD", 4)):
        monkeypatch.setattr(whole_run, name, value)
    trainers, steps = Trainers(), 200
    for pid in range(1, 33):
        assert trainers.add(pid, Hello(0, 1.0, 0, 1, pid, "h", "cpu", None, "exec"))
        for step in range(1, steps + 1):
            trainers.add(pid, Step(0, 1.0 + step, step, 1, 0, 1.0, 0.01, None, None))
    kept = [len(track.steps) for t in trainers._trainings for track in t.aggregator._ranks.values()]
    assert whole_run.window_for(32) == 8 and max(kept) <= 8 + 4  # the first trainings' folded too
    figures = [t.figures for t in trainers.figures()]
    assert len(figures) == 32 and all(f.last_step == steps for f in figures)
    assert all(f.step_s == pytest.approx(0.01) for f in figures)  # (every steady step's, folded or whole)


def test_a_digest_keeps_its_observed_steps_apart_and_its_recomputed_flops():
    """Issue 54 in a digest: a segment read back as its digests gives the figures its steps whole give
    (observed steps left out of the steady sums, their recomputed FLOPs summed), and its hist holds the
    steps the job's step time counts."""
    from mgpu_tui.engine.protocol.long_run.digest import digest_of
    from mgpu_tui.engine.run.figures.long_run.whole_run import RankTrack

    fields = [
        {"step": s, "samples": 8, "tokens": 64, "loss": 1.0, "step_s": 0.5 if s % 7 else 5.0,
         "flops": 10**12, "recomputed_flops": 3 * 10**11, **({"observed": True} if s % 7 == 0 else {})}
        for s in range(6, 40)
    ]  # fmt: skip
    digest = parse_line(encode("digest", 0, 1e9, digest_of(fields)))
    assert isinstance(digest, Digest) and digest.steady is not None
    read, whole = RankTrack(), RankTrack()
    read.add_digest(digest)
    for f in fields:
        whole.add_step(f["step"], 8, 64, f["step_s"], math.nan, 1e12, 1.0, 3e11, "observed" in f)
    for t in (read, whole):
        assert (t.n, t.steady_n(0), t.steady_samples(0), t.steady_tokens(0)) == (34, 29, 29 * 8, 29 * 64)
        assert t.seconds[0] == 29 * 0.5 and t.flops_sums[0] == 29e12 and t.recomputed[0] == 29 * 3e11
    assert sum(c for _, c in digest.hist) == 29
    every = parse_line(encode("digest", 0, 1e9, digest_of([f for f in fields if "observed" not in f])))
    assert isinstance(every, Digest) and every.steady is None and every.recomputed == 29 * 3e11

"""A rank can write events faster than anyone reads them (issue #28: with 3,000,000 steps behind,
the stall watch called a talking rank stalled and the summary counted 677,215 of them). A backlog
is never silence, and the end of a run counts every rank's last step within a bounded time."""

from __future__ import annotations

import time

from mgpu_tui.engine.protocol.events import encode
from mgpu_tui.engine.protocol.file_tail import READ_CHUNK
from mgpu_tui.engine.protocol.rundir import RunDir
from mgpu_tui.engine.run.causes.watchdog import find_stalled
from mgpu_tui.engine.run.ingest import SHOWN_LINE_BYTES, Ingest

STEPS = 100_000  # ~13 MB a rank: several chunks of READ_CHUNK behind


def write_backlog(run_dir: RunDir, rank: int, old: float, now: float) -> None:
    hello = {"local_rank": rank, "world_size": 2, "pid": 1, "host": "h", "device": "cpu", "mode": "ddp"}
    fields = {"step": 0, "samples": 32, "tokens": 0, "loss": 1.0, "step_s": 1e-4}
    line = encode("step", rank, 0.5, {**fields, "mem_bytes": None, "mem_peak_bytes": None})
    template = line.replace('"t":0.5', '"t":%r').replace('"step":0', '"step":%d')
    with open(run_dir.events_dir / f"rank{rank}.jsonl", "w") as f:
        f.write(encode("hello", rank, old, hello))
        # as the reporter writes them (encode), the bulk by its template: the test's own time is small
        f.writelines(template % (old + step * 1e-4, step) for step in range(1, STEPS))
        f.write(template % (now, STEPS))  # the last step is written now


def test_a_backlog_is_never_a_stall_and_the_end_counts_every_last_step(tmp_path):
    run_dir = RunDir.create(tmp_path, "ddp")
    now = time.time()
    for rank in (0, 1):
        write_backlog(run_dir, rank, now - 3600, now)
    assert (run_dir.events_dir / "rank0.jsonl").stat().st_size > 3 * READ_CHUNK
    ingest = Ingest(run_dir, world_size=2)
    assert ingest.read()  # one chunk: far behind
    liveness = ingest.liveness()
    assert [step for _, _, step, _ in liveness][0] < STEPS
    assert find_stalled(liveness, timeout=5, now=time.time()) == ()  # read an hour ago, said just now
    # Too short to read it all: the reading stops at its deadline, with both ranks still behind, and
    # their last steps come from the ends of their files (reading both whole takes seconds; a bound
    # on the wall clock here failed on a busy machine, so the count of ranks taken says it).
    assert ingest.catch_up(seconds=0.2) == 2
    assert ingest.stats().steps == STEPS
    assert [step for _, _, step, _ in ingest.liveness()] == [STEPS, STEPS]


def test_the_end_of_a_file_is_read_as_untrusted(tmp_path):
    """A rank's file that ends in junk, another rank's steps or a cut line: only its own last step."""
    run_dir = RunDir.create(tmp_path, "ddp")
    now = time.time()
    write_backlog(run_dir, 0, now - 3600, now)
    write_backlog(run_dir, 1, now - 3600, now)
    with open(run_dir.events_dir / "rank0.jsonl", "a") as f:
        fields = {"step": 10**9, "samples": 1, "tokens": 0, "loss": 1.0, "step_s": 1.0}
        f.write(encode("step", 1, now, {**fields, "mem_bytes": None, "mem_peak_bytes": None}))  # as rank 1
        f.write('{"v": 1, "kind": "step", "rank": 0, "t": 1e999}\n{"nope\n\x1b[2J' * 100)
    ingest = Ingest(run_dir, world_size=2)
    ingest.read()
    ingest.catch_up(seconds=0)
    assert [step for _, _, step, _ in ingest.liveness()] == [STEPS, STEPS]


def test_a_ranks_long_lines_reach_a_display_cut_with_a_word_of_what_is_left(tmp_path):
    """Lines of 60 KiB of control characters: the app holds thousands of lines, so each is handed
    on cut to its first 4 KiB, saying how much more the rank's log file holds."""
    run_dir = RunDir.create(tmp_path, "ddp")
    log = run_dir.logs_dir / "job" / "attempt_0" / "0"
    log.mkdir(parents=True)
    (log / "stdout.log").write_bytes((b"\x1b[2J\x9b" * 12_000 + b"\n") * 300)
    (log / "stderr.log").write_bytes(b"short\n")
    ingest = Ingest(run_dir, world_size=1)
    while ingest.read():
        pass
    lines, dropped = ingest.drain_log_lines()
    assert len(lines) == 301 and dropped == 0
    long = [text for _, stream, text in lines if stream == "stdout"]
    assert all(len(text) < SHOWN_LINE_BYTES + 100 for text in long)  # characters: one per byte at most
    assert long[0].endswith(f" … ({60_000 - SHOWN_LINE_BYTES:,} bytes more in the log file)")
    assert [text for _, stream, text in lines if stream == "stderr"] == ["short"]

"""Follow a run's files as they grow: every rank's events into the aggregator, every log line
to a display.

:class:`FileTail` follows one file: each :meth:`FileTail.read_lines` returns the
complete lines added since the last call and keeps a partial last line until its
newline arrives. A file that does not exist yet simply has no lines; a line longer
than ``max_line`` is dropped and counted rather than held in memory; a file that
shrinks (rewritten) is read again from the start; a file deleted while its writer goes
on is still followed through its descriptor.

:class:`Ingest` follows all of one run's files. One thread (the run's poller) calls
:meth:`Ingest.read`; other threads (the app's telemetry, its screen) read the figures
through its other methods, which hold the same lock, so no reader ever sees the rank
table change under it.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Callable, Iterable

from mgpu_tui.engine.planning.modes import Job
from mgpu_tui.engine.protocol.events import (
    MAX_LINE_BYTES,
    Done,
    Error,
    Hello,
    MalformedEvent,
    Step,
    parse_line,
)
from mgpu_tui.engine.protocol.file_tail import CATCH_UP_S, LAST_EVENT_BYTES, FileTail
from mgpu_tui.engine.protocol.rundir import JOB_OUTPUT, RankFiles, RunDir
from mgpu_tui.engine.run.figures.aggregate import Aggregator, RunStats
from mgpu_tui.engine.run.figures.trainers import Trainers, phases_of
from mgpu_tui.engine.run.nccl.flight_records import late_arrivals, read_trace

# New lines waiting for a display to drain them; beyond this the oldest are dropped (and counted).
NEW_LINES_KEPT = 5000
# Of one log line, what a display is handed: the app keeps thousands of lines, and a rank's lines of
# 64 KiB of control characters made it hold 1.34 GB. The whole line stays in the rank's log file.
SHOWN_LINE_BYTES = 4096


def shown_line(line: bytes) -> str:
    """A rank's log line as a display gets it: its first SHOWN_LINE_BYTES, and how much is left out."""
    if len(line) <= SHOWN_LINE_BYTES:
        return line.decode("utf-8", "replace")
    cut = len(line) - SHOWN_LINE_BYTES
    return line[:SHOWN_LINE_BYTES].decode("utf-8", "replace") + f" … ({cut:,} bytes more in the log file)"


MAX_LOG_LINE_BYTES = 64 * 1024
CUT = b"\0cut"  # where a log line too long to follow was left out (FileTail's cut): said in its place


def _cut(path) -> str:
    return f"… a line of over {MAX_LOG_LINE_BYTES >> 10} KiB not shown (every line is in {path})"


MAX_TRAINER_FILES = 256  # a command's trainers' event files followed (one a process; more are not read)


class Ingest:
    """All of one run's files. ``world_size`` and ``restarts`` say which events fit the job:
    an event must come from the file of its own rank, of a rank of the job (0..world_size-1),
    and a rank says hello once (once per attempt when torchrun may restart it), or again once its
    process has said its end: a later phase of the same rank (Lightning's ddp_spawn starts the ranks
    again for ``trainer.test``), whose steps count on from the earlier ones (aggregate.py). The
    rest is counted as malformed and never reaches the figures.

    A command's world size (mgpu-tui exec) is learned: ``world_size`` None, the first hello read
    gives it (its process group's), and from then on it is the job's like any other; a hello for
    another world size is malformed, and the files of ranks beyond it are closed, never read.

    A command's trainers (processes that train with no group: figures/trainers.py) are read from
    their own files, MAX_TRAINER_FILES at most. Where no process joined a group and one training is
    all there is, that training is the job (rank 0 of 1): every figure of the ranks below is its."""

    def __init__(
        self,
        run_dir: RunDir,
        world_size: int | None,
        restarts: bool = False,
        log_dirs: Callable[[], Iterable[tuple[RunDir, int]]] | None = None,
        command_output: bool = False,
        job: Job | None = None,
        seen: Callable[[], int] | None = None,
    ) -> None:
        """``log_dirs``: where the ranks' logs are, each folder with the first global rank of its
        local ranks (several nodes' logs read from their shared folder); default ``run_dir``'s, by
        local rank. ``command_output``: the command's own output too (mgpu-tui exec), as JOB_OUTPUT.
        ``job``: what its ranks communicate (its mode's), for its verdicts' advice (aggregate.py).
        ``seen()``: how many processes the command's tree ran so far (its ranks are among them: a
        learned world size is shown no larger, whatever a hello claims)."""
        self._seen = seen
        self.run_dir = run_dir
        self._log_dirs = log_dirs or (lambda: ((run_dir, 0),))
        self._command_output = command_output
        self._world = world_size
        self.restarts = restarts
        self.aggregator = Aggregator(job)
        self.trainers = Trainers()
        self._trainer_tails: dict[int, FileTail] = {}
        self.malformed_events = 0
        self._greeted: set[int] = set()  # ranks that said hello
        self._ended: set[int] = set()  # ranks whose process said done since its hello: a later phase may come
        self.foreign_files: set[int] = set()  # events/rank<N>.jsonl with N outside the job: unread
        self._lock = threading.Lock()
        self._event_tails: dict[int, FileTail] = {}
        self._log_tails: dict[tuple[int, str], FileTail] = {}
        self._new_lines: collections.deque[tuple[int, str, str]] = collections.deque(maxlen=NEW_LINES_KEPT)
        self._new_lines_seen = 0
        self._late_arrivals: tuple = ()  # stragglers from the flight recorder (read_flight_records)
        self._collectives: dict[int, int] = {}  # rank -> the collectives it entered, as its records say

    def read(self) -> bool:
        """Take in what every file gained since the last call (a chunk of each at most);
        True when some file has more than was read."""
        for rank, path in self.run_dir.event_files().items():
            if rank in self._event_tails:
                continue
            if self._world is None or rank < self._world:
                self._event_tails[rank] = FileTail(path, max_line=MAX_LINE_BYTES)
            else:  # a file of no rank of the job: never opened (there may be thousands)
                self.foreign_files.add(rank)
        # Every known file, listed or not: one deleted mid-run is still followed by its descriptor.
        for file_rank, tail in list(self._event_tails.items()):
            if self._event_tails.get(file_rank) is tail:  # else beyond the world size just learned
                fits = lambda event, rank=file_rank: rank in self._event_tails and self._fits(event, rank)  # noqa: E731
                self._take(tail, fits, self.aggregator.add)
        if self._command_output:
            self._read_trainers()
        logs = [] if self._command_output else self._log_dirs()
        for folder, offset in logs:
            world = self._world if self._world is not None else 0
            for local, files in folder.rank_files(world - offset).items():
                self._read_log(local + offset, files)
        if self._command_output:
            self._read_log(JOB_OUTPUT, self.run_dir.command_output())
        tails = [*self._event_tails.values(), *self._trainer_tails.values(), *self._log_tails.values()]
        return any(tail.behind for tail in tails)

    def _take(self, tail: FileTail, fits: Callable, add: Callable) -> None:
        """What ``tail`` gained: each line parsed, and added where it ``fits`` (else malformed)."""
        before = tail.dropped_long_lines
        events, malformed = [], 0
        for line in tail.read_lines():
            try:
                event = parse_line(line)
            except MalformedEvent:
                malformed += 1
                continue
            if fits(event):
                events.append(event)
            else:
                malformed += 1
        with self._lock:
            for event in events:
                if add(event) is False:
                    malformed += 1
            self.malformed_events += malformed + tail.dropped_long_lines - before

    def _read_trainers(self) -> None:
        """The trainers' files (events/trainer<PID>.jsonl), MAX_TRAINER_FILES of them at most."""
        for pid, path in self.run_dir.event_files(trainers=True).items():
            if pid not in self._trainer_tails and len(self._trainer_tails) < MAX_TRAINER_FILES:
                self._trainer_tails[pid] = FileTail(path, max_line=MAX_LINE_BYTES)
        for pid, tail in self._trainer_tails.items():
            self._take(tail, lambda event: True, lambda event, pid=pid: self.trainers.add(pid, event))

    @property
    def world_size(self) -> int | None:
        """The job's ranks: the spec's; a command's, learned from its group's first hello, or 1 for a
        job of one process that trained alone; None before."""
        if self._world is None and self._command_output and self.trainers.lone() is not None:
            return 1
        return self._world

    def lone_trainer_pid(self) -> int | None:
        """The process of a job of one that trained with no group (its files are named by it)."""
        with self._lock:
            job = self._job()
            return None if job is self.aggregator else next(iter(job.rank_processes().values()), (None,))[0]

    def _job(self) -> Aggregator:
        """The figures of the job's ranks: the group's, or a lone trainer's (a job of one process)."""
        lone = self.trainers.lone() if self._world is None else None
        return lone if lone is not None else self.aggregator

    def _read_log(self, rank: int, files: RankFiles) -> None:
        for stream, path in (("stdout", files.stdout), ("stderr", files.stderr)):
            known = self._log_tails.get((rank, stream))
            if known is None or known.path != path:  # a new attempt has new files
                if known is not None:
                    known.close()
                known = self._log_tails[(rank, stream)] = FileTail(path, max_line=MAX_LOG_LINE_BYTES, cut=CUT)
            # The very object FileTail put there (``is``): a rank that writes those bytes is shown them.
            lines = [shown_line(line) if line is not CUT else _cut(path) for line in known.read_lines()]
            if lines:
                with self._lock:
                    self._new_lines.extend((rank, stream, line) for line in lines)
                    self._new_lines_seen += len(lines)

    def _learn_world(self, world_size: int) -> None:
        """A command's world size, from its first hello: the files of ranks beyond it are let go."""
        self._world = world_size
        for rank in [r for r in self._event_tails if r >= world_size]:
            self._event_tails.pop(rank).close()
            self.foreign_files.add(rank)

    def _fits(self, event, file_rank: int) -> bool:
        """Whether an event belongs to this job: its own rank's file, and a first hello."""
        if event.rank != file_rank:  # one rank writing as another
            return False
        if self._world is None:  # a command's job: only a hello says how many ranks it has
            if not isinstance(event, Hello) or event.rank >= event.world_size:
                return False
            self._learn_world(event.world_size)
        if isinstance(event, Hello):
            if event.world_size != self._world:
                return False  # a rank of another job, or one that lies about this one
            if event.rank in self._greeted and not self.restarts and event.rank not in self._ended:
                return False  # a second hello would take over the rank's pid and device
            self._greeted.add(event.rank)
            self._ended.discard(event.rank)
        elif isinstance(event, Done):
            self._ended.add(event.rank)
        return True

    # ---- for any thread ----------------------------------------------------------------

    def stats(self, *, fresh: bool = False) -> RunStats:
        """The figures now, for a live view (``fresh``: a large job's anatomy worked out again
        whatever its age, for the summary: aggregate.py)."""
        with self._lock:
            job = self._job()
            stats = job.stats(fresh=fresh)
            if self._world is not None and self._seen is not None and (stats.world_size or 0) > 1:
                bound = max(self._seen(), max((r.rank for r in stats.ranks), default=-1) + 1)
                stats = dataclasses.replace(stats, world_size=min(stats.world_size or 0, bound))
            late, collectives = self._late_arrivals, self._collectives
            if job is self.aggregator and len(self.trainers):
                figures = self.trainers.figures(fresh=fresh)
                phases, trainers = phases_of(figures, job.span(), stats.world_size)
                phases = phases if len(phases) > 1 else ()  # one phase: nothing to tell apart
                stats = dataclasses.replace(stats, trainers=trainers, phases=phases)
        if (
            collectives
        ):  # each rank's collectives, from its flight records: a script without steps moves by them
            ranks = tuple(dataclasses.replace(r, collectives=collectives.get(r.rank)) for r in stats.ranks)
            stats = dataclasses.replace(stats, ranks=ranks)
        # The demos' own timing says where a straggler's time goes; the flight recorder only who.
        return stats if stats.stragglers or not late else dataclasses.replace(stats, stragglers=late)

    def read_flight_records(self, ranks: range) -> None:
        """Who arrives late at the collectives, from the ranks' flight-recorder dumps
        (run/nccl/flight_records.py); for one host's ranks only: the times are each host's clock's.
        Only the ranks heard from are read (a rank that never said hello wrote no record): a world
        size a hello claims costs nothing past the processes that spoke."""
        record = self.run_dir.flight_record_path
        heard = sorted(rank for rank in self.rank_processes() if rank in ranks)
        traces = {rank: read_trace(record(rank), self.run_dir.path) for rank in heard}
        step_s = self.recent_step_time()
        every = len(heard) == len(ranks) and all(traces.values())
        late = late_arrivals({r: t for r, t in traces.items() if t}, step_s) if every else ()
        counts = {r: max(e.seq for e in t) for r, t in traces.items() if t}
        with self._lock:
            self._late_arrivals = late
            for rank, count in counts.items():  # a later dump (of a group gone) may hold fewer: keep the most
                self._collectives[rank] = max(count, self._collectives.get(rank, 0))

    def series(self) -> tuple[list[int], list[float], list[float | None]]:
        with self._lock:
            return self._job().series()

    def whole_series(self) -> tuple[list[int], list[float], list[float | None]]:
        with self._lock:
            return self._job().whole_series()

    def liveness(self) -> list[tuple[int, float | None, int, bool]]:
        """As the aggregator's, but a rank whose event file holds more than was read is talking now
        (faster than it is read): never silent for a backlog of ours."""
        now = time.time()
        with self._lock:
            job = self._job()
            found = job.liveness()
            behind = {rank for rank, tail in self._event_tails.items() if tail.behind}
            if job is not self.aggregator and any(tail.behind for tail in self._trainer_tails.values()):
                behind.add(0)  # a job of one process that trained alone: its file is its trainer's
        return [(rank, now if rank in behind else t, step, done) for rank, t, step, done in found]

    def catch_up(self, seconds: float = CATCH_UP_S) -> int:
        """Read every file to its end, for ``seconds`` at most; then each rank still behind gets its
        latest step from its file's end, so a summary counts every rank's last step, not what a
        backlog let us read. The ranks taken from their ends (0: none)."""
        deadline = time.monotonic() + seconds
        while self.read():
            if time.monotonic() >= deadline:
                break
        else:
            return 0
        skipped = 0
        for rank, tail in list(self._event_tails.items()):
            if tail.behind and (last := self._last_step(rank, tail)) is not None:
                with self._lock:
                    self.aggregator.add(last)
                skipped += 1
        return skipped

    def _last_step(self, rank: int, tail: FileTail) -> Step | None:
        """The latest step event of ``rank`` in the end of its file (read as untrusted: bounded, each
        line parsed, only the rank's own)."""
        data = tail.read_end(LAST_EVENT_BYTES)
        for line in reversed(data.split(b"\n")[1:]):  # the first piece may be cut: never trusted
            try:
                event = parse_line(line)
            except MalformedEvent:
                continue
            if isinstance(event, Step) and event.rank == rank:
                return event
        return None

    def recent_step_time(self) -> float | None:
        with self._lock:
            return self._job().recent_step_time()

    def rank_processes(self) -> dict[int, tuple[int, str | None]]:
        with self._lock:
            return self._job().rank_processes()

    def stack_answering(self) -> dict[int, int]:
        with self._lock:
            return self._job().stack_answering()

    def errors(self) -> dict[int, Error]:
        with self._lock:
            return self._job().errors()

    def trainer_errors(self) -> dict[int, Error]:
        """Trainer number -> the error it told, where the trainers are not the job itself."""
        with self._lock:
            return self.trainers.errors() if self._job() is self.aggregator else {}

    def drain_log_lines(self) -> tuple[list[tuple[int, str, str]], int]:
        """(rank, stream, line) read since the last drain, and how many were dropped unshown.

        A display that cannot keep up loses only lines from its screen: the files keep them all.
        """
        with self._lock:
            lines = list(self._new_lines)
            dropped = self._new_lines_seen - len(lines)
            self._new_lines.clear()
            self._new_lines_seen = 0
        return lines, dropped

    def close(self) -> None:
        for tail in [*self._event_tails.values(), *self._log_tails.values()]:
            tail.close()


class IngestReadings:
    """What a run's files say so far, for any thread: the reading side a Run (lifecycle.py) and a
    run followed from its folder (records/follow.py) share, both through their ``_ingest``."""

    _ingest: Ingest

    def stats(self) -> RunStats:
        return self._ingest.stats()

    @property
    def malformed_events(self) -> int:
        """Event lines skipped as malformed so far (a rank can write anything)."""
        return self._ingest.malformed_events

    def series(self) -> tuple[list[int], list[float], list[float | None]]:
        """(steps, global samples/s, global-batch loss) over the last steps (aggregate.py)."""
        return self._ingest.series()

    def whole_series(self) -> tuple[list[int], list[float], list[float | None]]:
        """(steps, global samples/s, global-batch loss) over the whole run, thinned (aggregate.py)."""
        return self._ingest.whole_series()

    def drain_log_lines(self) -> tuple[list[tuple[int, str, str]], int]:
        return self._ingest.drain_log_lines()

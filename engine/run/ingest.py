"""Follow a run's files: every rank's events into the aggregator, every log line to a display.

One thread (the run's poller) calls :meth:`Ingest.read`; other threads (the app's
telemetry, its screen) read the figures through the methods below, which hold the
same lock, so no reader ever sees the rank table change under it.
"""

from __future__ import annotations

import collections
import threading

from mgpu_tui.engine.protocol.events import MAX_LINE_BYTES, MalformedEvent, parse_line
from mgpu_tui.engine.run.aggregate import Aggregator, RunStats
from mgpu_tui.engine.run.rundir import RunDir
from mgpu_tui.engine.run.tail import FileTail

# New lines waiting for a display to drain them; beyond this the oldest are dropped (and counted).
NEW_LINES_KEPT = 5000
MAX_LOG_LINE_BYTES = 64 * 1024


class Ingest:
    def __init__(self, run_dir: RunDir) -> None:
        self.run_dir = run_dir
        self.aggregator = Aggregator()
        self.malformed_events = 0
        self._lock = threading.Lock()
        self._event_tails: dict[int, FileTail] = {}
        self._log_tails: dict[tuple[int, str], FileTail] = {}
        self._new_lines: collections.deque[tuple[int, str, str]] = collections.deque(maxlen=NEW_LINES_KEPT)
        self._new_lines_seen = 0

    def read(self) -> None:
        """Take in what every file gained since the last call."""
        for rank, path in self.run_dir.event_files().items():
            if rank not in self._event_tails:
                self._event_tails[rank] = FileTail(path, max_line=MAX_LINE_BYTES)
        # Every known file, listed or not: one deleted mid-run is still followed by its descriptor.
        for tail in self._event_tails.values():
            before = tail.dropped_long_lines
            events, malformed = [], 0
            for line in tail.read_lines():
                try:
                    events.append(parse_line(line))
                except MalformedEvent:
                    malformed += 1
            with self._lock:
                for event in events:
                    self.aggregator.add(event)
                self.malformed_events += malformed + tail.dropped_long_lines - before
        for local, files in self.run_dir.rank_files().items():
            for stream, path in (("stdout", files.stdout), ("stderr", files.stderr)):
                tail = self._log_tails.get((local, stream))
                if tail is None or tail.path != path:  # a new attempt has new files
                    if tail is not None:
                        tail.close()
                    tail = self._log_tails[(local, stream)] = FileTail(path, max_line=MAX_LOG_LINE_BYTES)
                lines = [line.decode("utf-8", "replace") for line in tail.read_lines()]
                if lines:
                    with self._lock:
                        self._new_lines.extend((local, stream, line) for line in lines)
                        self._new_lines_seen += len(lines)

    # ---- for any thread ----------------------------------------------------------------

    def stats(self) -> RunStats:
        with self._lock:
            return self.aggregator.stats()

    def series(self) -> tuple[list[int], list[float], list[float | None]]:
        with self._lock:
            return self.aggregator.series()

    def liveness(self) -> list[tuple[int, float | None, int, bool]]:
        with self._lock:
            return self.aggregator.liveness()

    def recent_step_time(self) -> float | None:
        with self._lock:
            return self.aggregator.recent_step_time()

    def rank_processes(self) -> dict[int, tuple[int, str | None]]:
        with self._lock:
            return self.aggregator.rank_processes()

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

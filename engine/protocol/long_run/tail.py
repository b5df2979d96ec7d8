"""One rank's event files read as they grow, whatever the run's length (docs/long-runs.md).

A rank writes its events to its head, ``events/rank<N>.jsonl``; in a long run, once the head is full,
to segments ``events/rank<N>/seg<K>.jsonl`` (K = 1, 2, ...), keeping the latest few only, and a
digest of every run of steps to ``events/rank<N>/digest.jsonl``, each digest line naming the segment
its steps were written to (``seg``) (rank/event_files.py). :class:`EventTail` hands on the lines of
the head, then of each segment in turn; a segment that is gone (a reader that fell behind), or one
that a reader starting late passes over (all but the latest RAW_AT_OPEN), is read from its digest
lines instead: its steps as digests, its hellos, abouts, dones and errors as they were written.
A run folder of before (its head alone) is read as it always was.

Each line is handed on as the rank wrote it (the ingest parses it and checks it fits the job); every
file is opened below the run folder without following a link, never a FIFO (folder.py).
"""

from __future__ import annotations

import collections
import json
import time

from mgpu_tui.engine.protocol.file_tail import READ_CHUNK, FileTail
from mgpu_tui.engine.protocol.folder import read_bytes
from mgpu_tui.engine.protocol.rundir import RunDir

RAW_AT_OPEN = 2  # a reader starting late reads a rank's latest segments whole, this many
LOOK_EVERY_S = 1.0  # at the end of its segment, a follower looks for the next this often
WAITING_LINES = 50_000  # digest lines read ahead of the segment they stand for, at most


class EventTail:
    """One rank's events, as FileTail reads one file: :meth:`read_lines`, ``behind``, ``refused``."""

    def __init__(self, run_dir: RunDir, rank: int, *, max_line: int, trainer: bool = False) -> None:
        """``trainer``: ``rank`` is a trainer's pid, its files events/trainer<PID>.jsonl and trainer<PID>/."""
        self.run_dir, self.rank, self.max_line = run_dir, rank, max_line
        self._named = (rank, trainer)
        self.path = run_dir.events_path(rank, trainer)
        self.segment = 0  # the segment read now (0: the head)
        self._tail = FileTail(self.path, max_line=max_line, root=run_dir.path)
        self._digests = FileTail(
            run_dir.events_digest_path(rank, trainer), max_line=max_line, root=run_dir.path
        )
        self._waiting: collections.deque[tuple[int, bytes]] = collections.deque()
        self._digest_segment = 0  # the latest segment a digest line named
        self._skip_to: int | None = None  # the first segment after the head read whole, when not 1
        self._started = False
        self._looked = time.monotonic()  # when it last looked for a segment that may be gone
        self._dropped = 0  # long lines of the segments read before this one
        self.lost_digest_lines = 0  # passed over: more waiting than WAITING_LINES
        self.behind = False

    @property
    def refused(self) -> bool:
        return self._tail.refused or self._digests.refused

    @property
    def dropped_long_lines(self) -> int:
        return self._dropped + self._tail.dropped_long_lines + self._digests.dropped_long_lines

    def read_lines(self, max_bytes: int = READ_CHUNK) -> list[bytes]:
        """Lines added since the last call: the segment read now, and where it ended, the digest
        lines of those passed over, then the next one's (at most ``max_bytes`` of each file)."""
        if not self._started:
            self._start()
        lines = self._tail.read_lines(max_bytes)
        self.behind = self._tail.behind
        if self.behind:
            return lines
        held = self._tail.open()  # (a segment gone before it was opened is passed over too)
        after = self._next_segment(gone=not held)
        if after is None:
            return lines
        self.behind = True  # a later segment is there: read on
        if lines:
            return lines
        if after > self.segment + 1 or not held:  # passing over some: their digest lines first, every one
            self._read_digests(max_bytes)
            if self._digests.behind:
                return lines
        lines += self._tail.read_lines(max_bytes)  # its last lines, written before the next began
        if self._tail.behind:
            return lines
        lines += self._passed_over(self.segment if held else self.segment - 1, after)
        self._switch(after)  # (read at the next call)
        return lines

    def _start(self) -> None:
        """At the first read: which segments to read whole (the latest RAW_AT_OPEN)."""
        self._started = True
        segments = self.run_dir.events_segments(*self._named)
        if segments:
            last = max(segments)
            first_whole = max(1, last - RAW_AT_OPEN + 1)
            self._skip_to = first_whole if first_whole > 1 else None
            self._digest_segment = last

    def _read_digests(self, max_bytes: int) -> None:
        """The digest lines written since, kept for a segment not read whole yet (bounded)."""
        for line in self._digests.read_lines(max_bytes):
            try:
                segment = json.loads(line).get("seg")
            except (ValueError, AttributeError, RecursionError):
                continue  # not one: the ingest would count it malformed; nothing to hand on
            if isinstance(segment, int) and not isinstance(segment, bool) and segment > self.segment:
                self._digest_segment = max(self._digest_segment, segment)
                self._waiting.append((segment, line))
                if len(self._waiting) > WAITING_LINES:
                    self._waiting.popleft()
                    self.lost_digest_lines += 1

    def _next_segment(self, gone: bool = False) -> int | None:
        """The segment to read after this one, once this one has ended (a later one is there): the
        next, or where it is gone (this reader fell behind), the first still there. ``gone``: this
        one could not be opened (removed before this reader came to it)."""
        if self.segment == 0 and self._skip_to is not None:
            return self._skip_to
        after = self.segment + 1
        path = self.run_dir.events_segment_path(self.rank, after, self._named[1])
        if path.exists() or path.is_symlink():  # (a link is refused when opened: read as empty)
            return after
        now = time.monotonic()
        if now - self._looked < LOOK_EVERY_S and not gone:
            return None
        self._looked = now
        self._read_digests(READ_CHUNK)
        if self._digest_segment > self.segment:  # the rank went on past this one: the next is gone
            later = [k for k in self.run_dir.events_segments(*self._named) if k > self.segment]
            return min(later) if later else None
        return None

    def _passed_over(self, segment: int, after: int) -> list[bytes]:
        """The digest lines of the segments between ``segment`` and ``after``, in order."""
        lines = []
        while self._waiting and self._waiting[0][0] < after:
            named, line = self._waiting.popleft()
            if named > segment:
                lines.append(line)
        return lines

    def _switch(self, segment: int) -> None:
        self._dropped += self._tail.dropped_long_lines
        self._tail.close()
        self.segment, self._skip_to = segment, None
        path = self.run_dir.events_segment_path(self.rank, segment, self._named[1])
        self._tail = FileTail(path, max_line=self.max_line, root=self.run_dir.path)
        self._tail.open()  # now: the rank may remove it before it is read, once it is KEEP behind

    def read_end(self, limit: int) -> bytes:
        """The last ``limit`` bytes of the rank's latest file (for its latest step), without moving
        the reading position; nothing when there is none."""
        segments = self.run_dir.events_segments(*self._named)
        latest = max(segments, default=0)
        if latest <= self.segment:
            return self._tail.read_end(limit)
        try:
            return read_bytes(segments[latest], limit, tail=True, root=self.run_dir.path)
        except (OSError, ValueError):
            return b""

    @property
    def pending(self) -> bytes:
        return self._tail.pending

    def close(self) -> None:
        self._tail.close()
        self._digests.close()

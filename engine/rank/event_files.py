"""A rank's event files, bounded whatever the run's length (docs/long-runs.md).

The first HEAD_BYTES of a rank's events go to its head, ``events/rank<N>.jsonl``, as they always did:
a run of a few thousand steps writes nothing else. Past that, its events go to segments of
SEGMENT_BYTES, ``events/rank<N>/seg<K>.jsonl``, of which the latest KEEP are kept: each new segment
removes the one KEEP before it. So that nothing a segment held is lost with it, every DIGEST_STEPS
steps (and where a segment ends) one line of ``events/rank<N>/digest.jsonl`` sums them up
(events.py's ``digest``: min, max, sum and a histogram of their times, their samples, loss, FLOPs,
memory peak), and every hello, about, done and error is copied there too; each of its lines names
the segment it stands for (``seg``). A rank's files hold at most HEAD_BYTES + KEEP x SEGMENT_BYTES
of events, and its digest about 0.4 MB a million steps.

A step costs a reference kept (its fields, which the reporter made anyway) and a length added; the
digest is made once every DIGEST_STEPS steps, from them. The watch's step line waits in memory until FLUSH_S
passed since the last write to the file (or FLUSH_BYTES wait, or any other event comes, or the beat
thread's next beat, or the end): each write costs the step two system calls (the descriptor checked,
the bytes written), tens of microseconds in a busy process, so a step of a few milliseconds pays them
once in many. A reader sees a step at most that much later; a rank killed outright (SIGKILL, the
kernel's OOM killer) leaves out at most FLUSH_S of its last steps. A process of a rank started
again (torchrun's restart, a later phase) goes on in the latest segment there. Nothing here raises
into the script but OSError from a write (a full disk: the reporter stops recording and says so once).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TextIO

from mgpu_tui.engine.protocol import events
from mgpu_tui.engine.protocol.long_run.digest import digest_of
from mgpu_tui.engine.protocol.rundir import RunDir

HEAD_BYTES = 1 << 20  # about 3,000 steps of a script's events
SEGMENT_BYTES = 1 << 20
KEEP = 4  # segments past the head kept whole (a reader that falls further behind reads digests)
DIGEST_STEPS = 1024
FLUSH_S = 0.1  # at most this long a step's line waits to be written (and at most FLUSH_BYTES of them)
FLUSH_BYTES = 1 << 16
COPIED = frozenset({"hello", "about", "done", "error"})  # kinds copied to the digest: all but steps, beats


class EventFiles:
    """One rank's files, open: :meth:`write` each event's line as the reporter encoded it."""

    def __init__(
        self, run_dir: Path, rank: int, let_go: list[Any], trainer: int | None = None, waits: bool = False
    ) -> None:
        """``let_go``: where a file whose descriptor is no longer ours is kept, never closed; ``trainer``:
        a trainer's pid, its files' name (events/trainer<PID>.jsonl and trainer<PID>/); ``waits``: a
        step's line waits (FLUSH_S) for a writer whose beat thread flushes (the watch's); else each
        line is written at once (a rank that stops after a step, with nothing to flush it, still has it)."""
        self.run_dir, self.rank, self._let_go, self._waits = RunDir(run_dir), rank, let_go, waits
        self._named = (rank, False) if trainer is None else (trainer, True)
        self.run_dir.events_dir.mkdir(parents=True, exist_ok=True)
        self.segment = max(
            self.run_dir.events_segments(*self._named), default=0
        )  # where an earlier process stopped
        self.file: TextIO | None = None
        self.size = 0
        self._ids: dict[int, tuple[int, int]] = {}  # id(file) -> its (device, inode), taken at open
        self._open_segment()
        self._digest: TextIO | None = None
        self._steps: list[dict[str, Any]] = []  # the fields of the steps since the last digest
        self._t = 0.0
        self._waiting: list[str] = []  # lines not written yet (steps': FLUSH_S)
        self._waiting_bytes = 0
        self._written_at = 0.0  # when lines were last written (the events' clock)

    def _path(self, segment: int) -> Path:
        named, trainer = self._named
        if segment == 0:
            return self.run_dir.events_path(named, trainer)
        return self.run_dir.events_segment_path(named, segment, trainer)

    def _open(self, path: Path) -> TextIO:
        """A file opened to append, line buffered: each event reaches it as written."""
        file = open(path, "a", buffering=1)  # noqa: SIM115 (kept open: closed by close())
        info = os.fstat(file.fileno())
        self._ids[id(file)] = (info.st_dev, info.st_ino)
        return file

    def _open_segment(self) -> None:
        path = self._path(self.segment)
        if self.segment:
            path.parent.mkdir(exist_ok=True)
        self.file = self._open(path)
        self.size = os.fstat(self.file.fileno()).st_size

    def _ours(self, file: TextIO) -> bool:
        try:
            info = os.fstat(file.fileno())
            return (info.st_dev, info.st_ino) == self._ids.get(id(file))
        except (OSError, ValueError):
            return False

    def still_ours(self) -> bool:
        """Whether the events file's descriptor is still that file: a script that closes every
        inherited descriptor (``os.closerange(3, 4096)``) and opens its own may be given the same
        number, and an event written then would land in the script's file. One that is no longer
        ours is let go of without closing it (it is the script's now), and ours opened again."""
        if self.file is not None and self._ours(self.file):
            return True
        if self.file is not None:
            self._let_go.append(self.file)
        self.file = None
        try:
            self._open_segment()
        except OSError:
            return False
        return True

    def write(self, line: str, kind: str, fields: dict[str, Any], now: float) -> None:
        """One event (``fields``: what the reporter encoded as ``line``, kept as is for a step's):
        a step's written with those before it once FLUSH_S passed, every other kind at once."""
        self._waiting.append(line)
        self._waiting_bytes += len(line)  # (ASCII: the encoder escapes the rest)
        if kind == "step":
            self._steps.append(fields)
            self._t = now
        if (
            not self._waits
            or kind != "step"
            or now - self._written_at >= FLUSH_S
            or self._waiting_bytes >= FLUSH_BYTES
        ):
            self.flush(now)
        if kind == "step" and len(self._steps) >= DIGEST_STEPS:
            self.flush(now)  # (the digest follows the steps it sums up; a segment ended wrote it)
            if self._steps:
                self._write_digest()
        elif kind in COPIED:
            self._to_digest(line)

    def flush(self, now: float) -> None:
        """The lines waiting, written to the events file if its descriptor is still ours (else to
        ours opened again); let go of where no file can be had."""
        if not self._waiting:
            return
        lines, size = self._waiting, self._waiting_bytes
        self._waiting, self._waiting_bytes, self._written_at = [], 0, now
        if not self.still_ours():
            return
        assert self.file is not None
        self.file.write("".join(lines))  # line buffered: one write
        self.size += size
        if self.size >= (HEAD_BYTES if self.segment == 0 else SEGMENT_BYTES):
            self._next_segment()

    def _to_digest(self, line: str) -> None:
        """A line of the digest file, naming the segment it stands for."""
        if self._digest is not None and not self._ours(self._digest):
            self._let_go.append(self._digest)
            self._digest = None
        if self._digest is None:
            path = self.run_dir.events_digest_path(*self._named)
            path.parent.mkdir(exist_ok=True)
            self._digest = self._open(path)
        self._digest.write(f'{line[:-2]},"seg":{self.segment}}}\n')  # (an event's line ends "}\n")

    def _write_digest(self) -> None:
        steps, self._steps = self._steps, []
        try:
            line = events.encode("digest", self.rank, self._t, digest_of(steps))
        except (TypeError, ValueError, OverflowError, KeyError):  # a script's odd numbers: its steps are
            return  # still in the segment; a reader that passes over it lacks them (and says so: none)
        self._to_digest(line)

    def _next_segment(self) -> None:
        """The segment is full: its digest written, the next begun, the one KEEP before removed."""
        if self._steps:
            self._write_digest()
        file, self.file = self.file, None
        if file is not None:
            self._close(file)
        self.segment += 1
        self._open_segment()
        if self.segment > KEEP:
            self._path(self.segment - KEEP).unlink(missing_ok=True)

    def _close(self, file: TextIO) -> None:
        if self._ours(file):
            file.close()
        else:
            self._let_go.append(file)  # its number is the script's now: never closed from here
        self._ids.pop(id(file), None)

    def let_go(self) -> None:
        """In a forked child: the files are the parent's, never closed (nor flushed) from here; the
        lines waiting are the parent's to write."""
        self._waiting, self._waiting_bytes = [], 0
        self._let_go += [f for f in (self.file, self._digest) if f is not None]
        self.file = self._digest = None

    def close(self) -> None:
        """Its files closed, its last steps written and digested: the digest holds every step of the rank."""
        try:
            self.flush(self._t)
        except OSError:
            pass  # (a full disk: the reporter said so)
        if self._steps and self.file is not None:
            try:
                self._write_digest()
            except OSError:
                pass  # (a full disk: those steps are in the segment)
        for file in (self.file, self._digest):
            if file is not None:
                self._close(file)
        self.file = self._digest = None

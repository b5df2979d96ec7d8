"""Follow files that other processes append to, never re-reading what was read.

:class:`FileTail` follows one file: each :meth:`FileTail.read_lines` returns
the complete lines added since the last call and keeps a partial last line
until its newline arrives. A file that does not exist yet simply has no lines;
a line longer than ``max_line`` is dropped and counted rather than held in
memory; a file that shrinks (rewritten) is read again from the start.
"""

from __future__ import annotations

import os
from pathlib import Path

# How much one call reads at most, so that one poll of a file that grew by
# gigabytes cannot stall the caller or hold it all in memory at once.
READ_CHUNK = 4 << 20


class FileTail:
    """Incremental reader of one append-only file."""

    def __init__(self, path: str | os.PathLike, *, max_line: int = 1 << 20) -> None:
        self.path = Path(path)
        self.max_line = max_line
        self.offset = 0
        self.dropped_long_lines = 0
        self._partial = b""
        self._skipping = False  # inside a line that is already too long

    def read_lines(self, max_bytes: int = READ_CHUNK) -> list[bytes]:
        """Complete lines (without their newlines) appended since the last call."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return []
        try:
            size = os.fstat(fd).st_size
            if size < self.offset:  # truncated or replaced: start again
                self.offset, self._partial, self._skipping = 0, b"", False
            if size == self.offset:
                return []
            data = os.pread(fd, min(size - self.offset, max_bytes), self.offset)
        finally:
            os.close(fd)
        self.offset += len(data)
        return self._split(data)

    def _split(self, data: bytes) -> list[bytes]:
        pieces = data.split(b"\n")
        lines: list[bytes] = []
        for piece in pieces[:-1]:
            if self._skipping:
                self._skipping = False  # the newline ends the over-long line
                continue
            line = self._partial + piece
            self._partial = b""
            if len(line) > self.max_line:
                self.dropped_long_lines += 1
            else:
                lines.append(line)
        tail = pieces[-1]
        if self._skipping:
            return lines
        self._partial += tail
        if len(self._partial) > self.max_line:
            self.dropped_long_lines += 1
            self._partial = b""
            self._skipping = True
        return lines

    @property
    def pending(self) -> bytes:
        """The partial last line read so far, waiting for its newline."""
        return self._partial

"""Follow files that other processes append to, never re-reading what was read.

:class:`FileTail` follows one file: each :meth:`FileTail.read_lines` returns
the complete lines added since the last call and keeps a partial last line
until its newline arrives. A file that does not exist yet simply has no lines;
a line longer than ``max_line`` is dropped and counted rather than held in
memory; a file that shrinks (rewritten) is read again from the start; a file
deleted while its writer goes on is still followed through its descriptor.
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
        self._fd: int | None = None
        self._inode: int | None = None

    def read_lines(self, max_bytes: int = READ_CHUNK) -> list[bytes]:
        """Complete lines (without their newlines) appended since the last call.

        The file is followed by its descriptor, as ``tail -f`` does: deleted, it is still
        read to its end (its writer keeps writing to it); replaced by a new file at the
        same path, the new one is followed once the old one is read out.
        """
        if self._fd is None and not self._open():
            return []
        size = os.fstat(self._fd).st_size
        if size < self.offset:  # truncated: start again
            self.offset, self._partial, self._skipping = 0, b"", False
        if size == self.offset:
            if self._replaced():
                self.close()
                self.offset, self._partial, self._skipping = 0, b"", False
                return self.read_lines(max_bytes) if self._open() else []
            return []
        data = os.pread(self._fd, min(size - self.offset, max_bytes), self.offset)
        self.offset += len(data)
        return self._split(data)

    def _open(self) -> bool:
        try:
            self._fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        self._inode = os.fstat(self._fd).st_ino
        return True

    def _replaced(self) -> bool:
        try:
            return os.stat(self.path).st_ino != self._inode
        except FileNotFoundError:
            return False  # deleted: keep following the open file

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        self.close()

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

"""A file as it grows: read in chunks from where the last read stopped, whole lines only, never
through a link or a FIFO, with its latest step found from its end (a large job's files, caught up)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

# How much one call reads at most, so that one poll of a file that grew by
# gigabytes cannot stall the caller or hold it all in memory at once.
READ_CHUNK = 4 << 20


# At the end of a run, how long the last of a backlog is read before each rank's latest event is
# taken from its file's end instead (a rank can write events faster than anyone can read them).
CATCH_UP_S = 5.0


LAST_EVENT_BYTES = 256 << 10  # of a file's end, read for its latest step


class FileTail:
    """Incremental reader of one append-only file."""

    def __init__(self, path: str | os.PathLike, *, max_line: int = 1 << 20, cut: bytes | None = None) -> None:
        """``cut``: a line that stands where a line over ``max_line`` was left out (None: nothing)."""
        self.path = Path(path)
        self.max_line = max_line
        self.cut = cut
        self.offset = 0
        self.dropped_long_lines = 0
        self._partial = b""
        self._skipping = False  # inside a line that is already too long
        self._fd: int | None = None
        self._inode: int | None = None
        self.refused = False  # something that is not a regular file was found at the path
        self.behind = False  # the last read stopped short of the end (a chunk at a time)

    def read_lines(self, max_bytes: int = READ_CHUNK) -> list[bytes]:
        """Complete lines (without their newlines) appended since the last call.

        The file is followed by its descriptor, as ``tail -f`` does: deleted, it is still
        read to its end (its writer keeps writing to it); replaced by a new file at the
        same path, the new one is followed once the old one is read out.
        """
        fd = self._fd if self._fd is not None else self._open()
        if fd is None:
            return []
        size = os.fstat(fd).st_size
        if size < self.offset:  # truncated: start again
            self.offset, self._partial, self._skipping = 0, b"", False
        if size == self.offset:
            if self._replaced():
                self.close()
                self.offset, self._partial, self._skipping = 0, b"", False
                return self.read_lines(max_bytes) if self._open() is not None else []
            return []
        data = os.pread(fd, min(size - self.offset, max_bytes), self.offset)
        whole = data.rstrip(b"\0")
        # Zeros at the end of what was read: on a shared filesystem (NFS) a file read from another
        # host may show its new size before its new bytes. They are read again at the next call,
        # once there, rather than taken as zeros (zeros that a line follows are read as written).
        hole = len(whole) < len(data)
        self.offset += len(whole)
        self.behind = self.offset < size and not hole
        return self._split(whole)

    def _open(self) -> int | None:
        """Open the file if it is there and is a regular file; its descriptor. A rank may put anything
        at the path: a FIFO (whose open would block for ever without O_NONBLOCK), a device, a folder,
        a link to something unreadable; such a path is read as empty, and never blocks."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError:
            return None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            self.refused = True
            return None
        self._fd, self._inode = fd, info.st_ino
        return fd

    def _replaced(self) -> bool:
        try:
            return os.stat(self.path).st_ino != self._inode
        except OSError:
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
                lines += [self.cut] if self.cut is not None else []
            else:
                lines.append(line)
        tail = pieces[-1]
        if self._skipping:
            return lines
        self._partial += tail
        if len(self._partial) > self.max_line:
            self.dropped_long_lines += 1
            lines += [self.cut] if self.cut is not None else []
            self._partial = b""
            self._skipping = True
        return lines

    def read_end(self, limit: int) -> bytes:
        """The last ``limit`` bytes of the file as it is now (for its latest line), without moving
        the reading position; nothing when it is not open."""
        if self._fd is None:
            return b""
        size = os.fstat(self._fd).st_size
        start = max(self.offset, size - limit)
        return os.pread(self._fd, size - start, start) if size > start else b""

    @property
    def pending(self) -> bytes:
        """The partial last line read so far, waiting for its newline."""
        return self._partial

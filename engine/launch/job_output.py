"""A command's own output (``mgpu-tui exec``): what its stdout and stderr are, and how each of its
bytes reaches the run's log and the console.

Never a file: a job may reopen its stdout by name (``echo x > /dev/stderr``, ``open("/dev/stdout",
"w")``), and reopening a file truncates it. Each stream is a pipe, or, where the console stream it
is shown on is a terminal, a pseudo-terminal of its own (as ``script`` and ``ssh -t`` make one), so
the job's ``isatty()``, colours and progress bars are what they are bare: the pseudo-terminal takes
the terminal's settings and window size (again at each SIGWINCH: :meth:`JobOutput.resize`), with
its output processing off, so that the bytes the job writes are the bytes the terminal gets.

One thread, the relay, reads both streams as they come and writes every byte to the run's log
first, then hands it to the console's writer (a second thread) through a bounded queue: a terminal
that does not keep up (scrolled back, a slow link) never blocks the job's writes. What the queue
cannot hold is left out of the console only, until the console has caught up with half of what
waits, and the console then says how much was left out, and that the log has it all. Nothing here
reads the bytes: they are the job's, as bare, and the log keeps them as written.
"""

from __future__ import annotations

import collections
import errno
import fcntl
import os
import select
import signal
import termios
import threading
from dataclasses import dataclass, field
from typing import BinaryIO

CONSOLE_QUEUE_BYTES = 4 << 20  # of the job's output waiting for a slow console; past it, left out
# once bytes were left out, the console takes more only when its queue is down to this fraction:
# one gap and one note, not a note between every read that happens to fit
RESUME_FRACTION = 0.5
READ_BYTES = 1 << 16


@dataclass(frozen=True)
class Foreground:
    """A launch line run as a shell runs it (``exec``, the torchrun drop-in, headless): in mgpu-tui's
    process group with its stdin; ``ignored``: the signals ignored when mgpu-tui started (``nohup``),
    ignored by the job too; ``stdout``, ``stderr``: the console's descriptors the command's own
    streams are shown on (None: not shown, --quiet); ``open_files``: the job's soft limit of open
    files, as mgpu-tui found it before raising its own."""

    ignored: frozenset[int] = frozenset()
    stdout: int | None = None
    stderr: int | None = None
    open_files: int | None = None  # the soft limit of open files mgpu-tui found (it raises its own)

    def keeper_args(self) -> list[str]:
        """What the keeper is told (launch/keeper.py), to start the job as this says."""
        args = ["--foreground", "--ignored", ",".join(str(int(sig)) for sig in sorted(self.ignored))]
        return args + (["--open-files", str(self.open_files)] if self.open_files is not None else [])


@dataclass(eq=False)
class _Stream:
    name: str  # "stdout" or "stderr"
    log: BinaryIO  # the run's file for it (logs/command/)
    console: int | None  # the descriptor it is shown on
    read: int = -1  # a pseudo-terminal's master, or a pipe's read end
    child: int = -1  # what the job gets: the pseudo-terminal's slave, or the pipe's write end
    terminal: bool = False
    dropped: int = 0  # bytes left out of the console since the last note
    logging: bool = True  # False once the log could not be written (a full disk: the watchdog's)

    def open(self) -> None:
        if self.console is not None and os.isatty(self.console):
            self.read, self.child = os.openpty()
            self.terminal = True
            try:
                settings = termios.tcgetattr(self.console)
                settings[1] &= ~termios.OPOST  # the terminal itself does the output processing, once
                termios.tcsetattr(self.child, termios.TCSANOW, settings)
            except termios.error:
                pass
            self.resize()
        else:
            self.read, self.child = os.pipe()

    def resize(self) -> None:
        if self.terminal and self.console is not None:
            try:
                size = fcntl.ioctl(self.console, termios.TIOCGWINSZ, b"\0" * 8)
                fcntl.ioctl(self.read, termios.TIOCSWINSZ, size)
            except OSError:
                pass


@dataclass(eq=False)
class _Console:
    """The writer's queue: (stream, bytes) in the order read, at most CONSOLE_QUEUE_BYTES."""

    items: collections.deque = field(default_factory=collections.deque)
    size: int = 0
    done: bool = False
    ready: threading.Condition = field(default_factory=threading.Condition)


class JobOutput:
    """The command's stdout and stderr for one run: made by :meth:`open`, given to the job
    (:meth:`child_ends`), followed from :meth:`started` until :meth:`finish`."""

    def __init__(self, logs: tuple[BinaryIO, BinaryIO], console: tuple[int | None, int | None]) -> None:
        self._streams = [_Stream("stdout", logs[0], console[0]), _Stream("stderr", logs[1], console[1])]
        self._console = _Console()
        self._threads: list[threading.Thread] = []
        for stream in self._streams:
            stream.open()

    def child_ends(self) -> tuple[int, int]:
        """The job's stdout and stderr, to give it when it starts."""
        return self._streams[0].child, self._streams[1].child

    def terminals(self) -> tuple[bool, bool]:
        """Which of the job's stdout and stderr are pseudo-terminals."""
        return self._streams[0].terminal, self._streams[1].terminal

    def started(self) -> None:
        """The job holds its ends now: mgpu-tui lets go of them (so that their end is the job's),
        and the relay and the console's writer start."""
        for stream in self._streams:
            os.close(stream.child)
            stream.child = -1
        self._threads = [
            threading.Thread(target=self._relay, name="mgpu-job-output", daemon=True),
            threading.Thread(target=self._write, name="mgpu-job-console", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def resize(self) -> None:
        """The console's window changed (SIGWINCH): the job's pseudo-terminals take its new size."""
        for stream in self._streams:
            stream.resize()

    def finish(self, timeout: float | None = None) -> bool:
        """Wait until every process holding the job's streams has let them go and all they wrote
        is in the log and shown (the run's processes are gone: their streams end with them).
        False when ``timeout`` passed first (the rest is left to :meth:`close`)."""
        for thread in self._threads:
            thread.join(timeout)
        return not any(thread.is_alive() for thread in self._threads)

    def close(self) -> None:
        """Let everything go, whatever state the threads are in (they are daemons: a console that
        never reads again holds only its writer)."""
        with self._console.ready:
            self._console.done = True
            self._console.ready.notify_all()
        for stream in self._streams:
            if stream.child >= 0:  # never started
                os.close(stream.child)
                os.close(stream.read)
                stream.child = -1
            stream.log.close()

    # ---- the threads ---------------------------------------------------------------------

    def _relay(self) -> None:
        """Every byte to the log, then to the console's queue, until both streams end."""
        reading = {stream.read: stream for stream in self._streams}
        try:
            while reading:
                ready, _, _ = select.select(list(reading), [], [])
                for fd in ready:
                    stream = reading[fd]
                    try:
                        data = os.read(fd, READ_BYTES)
                    except OSError as exc:  # a pseudo-terminal whose every slave is closed: its end
                        if exc.errno != errno.EIO:
                            raise
                        data = b""
                    if not data:
                        del reading[fd]
                        os.close(fd)
                        continue
                    self._log(stream, data)
                    if stream.console is not None:
                        self._show(stream, data)
        finally:
            for stream in self._streams:
                if stream.console is not None and stream.dropped:
                    self._show(stream, b"")  # the last note of what was left out
            with self._console.ready:
                self._console.done = True
                self._console.ready.notify_all()

    def _log(self, stream: _Stream, data: bytes) -> None:
        if not stream.logging:
            return
        try:
            stream.log.write(data)
            stream.log.flush()
        except (OSError, ValueError):  # ValueError: closed, the run given up on (close())
            stream.logging = False  # the disk is full: the watchdog stops the run and says so

    def _show(self, stream: _Stream, data: bytes) -> None:
        """Queue ``data`` for the console, or count it as left out; a note first, once the console
        has caught up after bytes were left out (a chunk that happens to fit in between is left out
        too: the console shows one gap with one note, not a note between each read)."""
        queue = self._console
        with queue.ready:
            room = CONSOLE_QUEUE_BYTES * RESUME_FRACTION if stream.dropped else CONSOLE_QUEUE_BYTES
            if data and queue.size + len(data) > room:
                stream.dropped += len(data)
                return
            if stream.dropped:
                note = (
                    f"\nmgpu-tui: … {stream.dropped:,} bytes of the job's {stream.name} not shown here: "
                    f"the terminal did not keep up (every byte is in {stream.log.name})\n"
                )
                said = note.encode("utf-8", "replace")
                queue.items.append((stream, said))
                queue.size += len(said)
                stream.dropped = 0
            if data:
                queue.items.append((stream, data))
                queue.size += len(data)
            queue.ready.notify_all()

    def _write(self) -> None:
        """The console's writer: blocking writes, in the order read; a console gone (its terminal
        hung up, its reader closed) is written no more."""
        queue, dead = self._console, set()
        while True:
            with queue.ready:
                while not queue.items and not queue.done:
                    queue.ready.wait()
                if not queue.items:
                    return
                stream, data = queue.items.popleft()
            if stream.console is not None and stream.console not in dead:
                try:
                    _write_all(stream.console, data)
                except OSError:
                    dead.add(stream.console)
            with queue.ready:
                queue.size -= len(data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except InterruptedError:
            continue


def save_terminal() -> tuple[int, list] | None:
    """The settings of the terminal mgpu-tui runs in (its first standard stream that is one), to be
    put back however the job ends: a job killed in raw mode, or with echo off, leaves it so."""
    for fd in (0, 1, 2):
        try:
            return fd, termios.tcgetattr(fd)
        except (termios.error, OSError):
            continue
    return None


def restore_terminal(saved: tuple[int, list] | None) -> None:
    """Put the terminal's settings back (from a background process group too: SIGTTOU is held off)."""
    if saved is None:
        return
    fd, settings = saved
    previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        termios.tcsetattr(fd, termios.TCSADRAIN, settings)
    except (termios.error, OSError):
        pass
    finally:
        signal.signal(signal.SIGTTOU, previous)

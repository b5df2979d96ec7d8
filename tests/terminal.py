"""A command run in a real terminal, as a shell runs it at its prompt: Python's ``pty``, the command
the session leader of a new pseudo-terminal and its foreground process group, so that a Ctrl-C
typed (``\\x03``) reaches it from the kernel, as from a keyboard. What it wrote is kept as the
terminal received it (its output processing included: ``\\n`` becomes ``\\r\\n``)."""

from __future__ import annotations

import fcntl
import os
import pty
import signal
import struct
import termios
import threading
import time
from pathlib import Path

from waiting import wait_until


class Terminal:
    def __init__(
        self, argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, size=(40, 100)
    ) -> None:
        self.output = bytearray()
        pid, self.master = pty.fork()
        if pid == 0:  # the child: a session of its own on the terminal, then the command
            try:
                os.chdir(cwd)
                os.execvpe(argv[0], argv, env if env is not None else os.environ)
            finally:
                os._exit(127)
        self.pid = pid
        self.resize(*size)
        self.status: int | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: every process holding the terminal has closed it
                return
            if not data:
                return
            self.output += data

    def type(self, keys: bytes) -> None:
        """Keys typed at the terminal (b"\\x03": Ctrl-C)."""
        os.write(self.master, keys)

    def resize(self, rows: int, cols: int) -> None:
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def group_signal(self, sig: int) -> None:
        """``sig`` to the terminal's foreground process group, as a shell passes a hangup to its job."""
        os.killpg(self.pid, sig)

    def saw(self, text: bytes, timeout: float = 90) -> bool:
        return bool(wait_until(lambda: text in self.output, timeout, every=0.05))

    def wait(self, timeout: float = 120) -> int:
        """The command's exit status as a shell says it (128 + N for a signal N)."""
        deadline = time.monotonic() + timeout
        while self.status is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.status = os.waitstatus_to_exitcode(status)
                self.status = self.status if self.status >= 0 else 128 - self.status
            elif time.monotonic() > deadline:
                os.killpg(self.pid, signal.SIGKILL)
                raise TimeoutError(f"{self.pid} still runs after {timeout} s: {bytes(self.output)[-2000:]!r}")
            else:
                time.sleep(0.05)
        self._reader.join(10)
        os.close(self.master)
        return self.status

    def text(self) -> str:
        return bytes(self.output).decode("utf-8", "replace")

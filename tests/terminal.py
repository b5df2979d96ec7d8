"""A command run in a real terminal, as a shell runs it at its prompt: Python's ``pty``, the command
the session leader of a new pseudo-terminal and its foreground process group, so that a Ctrl-C
typed (``\\x03``) reaches it from the kernel, as from a keyboard. What it wrote is kept as the
terminal received it (its output processing included: ``\\n`` becomes ``\\r\\n``).

``bare_and_watched`` runs one job both ways, bare and under mgpu-tui (issue #55's tests)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import shlex
import signal
import struct
import termios
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from waiting import wait_until

from conftest import live_processes_of, only_run_dir


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


@dataclass
class Ran:
    status: int
    seen: dict  # what the job wrote of what it saw: its file ("main"), and each rank's of torchrun's
    text: str  # what the terminal got
    run_dir: Path | None = None  # under mgpu-tui

    def job_text(self) -> str:
        """What the job itself wrote to the terminal: under mgpu-tui, between its first line and its
        summary."""
        if self.run_dir is None:
            return self.text
        after = self.text.split(f"run directory {self.run_dir}\r\n", 1)[1]
        summary = after.find("mode ")  # its first line
        while summary > 0 and after[summary - 2 : summary] != "\r\n":
            summary = after.find("mode ", summary + 1)
        return after if summary < 0 else after[:summary]


def bare_and_watched(
    tmp_path: Path,
    job: list[str],
    *,
    bare: list[str],
    watched: list[str],
    drive: Callable[[Terminal], None] | None = None,
    shell: str = "exec {}",
) -> tuple[Ran, Ran]:
    """``job`` (a script and its arguments; ``--out FILE`` added) run by ``bare`` (python, torchrun),
    then by ``watched`` (mgpu-tui exec, its drop-in; ``--run-dir runs``), in tmp_path, each
    in a terminal of its own driven by ``drive(terminal)``; ``shell``: the line sh runs, {} the
    command (``exec {}``: as a prompt runs it, no shell between; a redirection, a pipe, nohup).
    Under mgpu-tui, no process of the run is left."""
    ran = []
    for way, launcher in (("bare", bare), ("watched", watched)):
        out = tmp_path / f"{way}.json"
        line = shell.format(shlex.join([*launcher, *job, "--out", str(out)]))
        term = Terminal(["sh", "-c", line], cwd=tmp_path)
        if drive is not None:
            drive(term)
        status = term.wait()
        run_dir = only_run_dir(tmp_path / "runs") if way == "watched" else None
        if run_dir is not None:
            left = live_processes_of(run_dir)
            assert left == [], [(p.pid, p.cmdline()) for p in left]
        seen = {p.name.removeprefix(out.name).lstrip(".") or "main": json.loads(p.read_text())
                for p in sorted(tmp_path.glob(f"{out.name}*"))}  # fmt: skip
        ran.append(Ran(status, seen, term.text(), run_dir))
    return ran[0], ran[1]

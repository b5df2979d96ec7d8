"""A launch line the user wrote (``exec``, the torchrun drop-in), run headless as a shell runs it.

``mgpu-tui exec -- CMD`` is a prefix, as ``time`` or ``nohup`` are: the job stays in the terminal's
foreground process group with mgpu-tui's stdin (engine/launch/processes.py), so what the terminal
sends reaches the job itself, once. While it waits, mgpu-tui does what ``system(3)`` does:

- the first Ctrl-C is the job's (the kernel gave it SIGINT: mgpu-tui sends nothing more); mgpu-tui
  notes the interruption and waits up to the stop grace for the job to end, then kills what is
  left; a second Ctrl-C kills it at once;
- SIGTERM and SIGHUP sent to mgpu-tui are passed to the job's process group (not again where the
  group had them too: a hangup, Slurm's or ``timeout``'s signal to every process), with the same
  grace; a signal ignored when mgpu-tui started (``nohup``'s SIGHUP) stays ignored, for the job too;
- Ctrl-\\ (SIGQUIT) is the job's alone; a new window size (SIGWINCH) goes to the job's
  pseudo-terminals; the terminal's settings are put back however the job ended.

Then mgpu-tui exits with the job's own status (the launcher's: 128 + N for a signal N).
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import TYPE_CHECKING, Any

from mgpu_tui.commands.launchers.slurm import why_slurm_stopped
from mgpu_tui.engine.launch.job_output import Foreground, restore_terminal, save_terminal
from mgpu_tui.engine.machine.open_files import found_open_files_limit

if TYPE_CHECKING:
    from mgpu_tui.engine.launch.slurm import SlurmJob
    from mgpu_tui.engine.run.lifecycle import Run

# What a shell's job inherits as it was: a signal ignored when mgpu-tui started stays ignored.
INHERITED = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGTERM)


def foreground(args: argparse.Namespace, *, command: bool) -> Foreground:
    """The foreground of this mgpu-tui: the signals it found ignored, and for a command (exec) the
    console streams its own output is shown on (its stdout on stdout, or on stderr under --json,
    which keeps stdout for the summary; none under --quiet)."""
    ignored = frozenset(sig for sig in INHERITED if signal.getsignal(sig) == signal.SIG_IGN)
    limit = found_open_files_limit()
    if not command or args.quiet:
        return Foreground(ignored, open_files=limit)
    return Foreground(ignored, stdout=2 if args.json else 1, stderr=2, open_files=limit)


class SignalsPassed:
    """While a foreground run goes: mgpu-tui's signals, as a shell's wait for its job takes them
    (this module's docstring). A context: the handlers and the terminal's settings as they were
    after it. A signal that comes before the job has started is passed once it has (started())."""

    def __init__(self, run: Run, slurm: SlurmJob | None = None) -> None:
        self.run, self.slurm = run, slurm
        self.interrupts = 0
        self._previous: dict[int, Any] = {}
        self._pending: list[tuple[signal.Signals, str | None]] = []
        self._started = False
        self._terminal: tuple[int, list] | None = None

    def __enter__(self) -> SignalsPassed:
        self._terminal = save_terminal()
        ignored = self.run.foreground.ignored if self.run.foreground else frozenset()
        handlers: dict[signal.Signals, Any] = {
            signal.SIGINT: self._interrupt,
            signal.SIGTERM: self._pass,
            signal.SIGHUP: self._pass,
            signal.SIGQUIT: signal.SIG_IGN,
            signal.SIGWINCH: self._resize,
        }
        for sig, handler in handlers.items():
            if sig not in ignored:
                self._previous[sig] = signal.signal(sig, handler)
        return self

    def started(self) -> None:
        """The job runs: what came before is passed to it now."""
        self._started = True
        for sig, by in self._pending:
            self.run.pass_signal(sig, stopped_by=by)
        self._pending.clear()

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        restore_terminal(self._terminal)

    def _interrupt(self, signum: int, frame) -> None:
        self.interrupts += 1
        if self.interrupts > 1:
            print("mgpu-tui: a second Ctrl-C: killing every process of the job", file=sys.stderr, flush=True)
            self.run.kill_now()
            return
        grace = self.run.stop_grace
        print(
            f"mgpu-tui: interrupted; the job has its Ctrl-C: waiting up to {grace:g} s for it to end "
            "(Ctrl-C again kills it now)",
            file=sys.stderr,
            flush=True,
        )
        self._pass(signum, frame)

    def _pass(self, signum: int, frame) -> None:
        by = why_slurm_stopped(self.slurm) if signum == signal.SIGTERM else None
        if not self._started:
            self._pending.append((signal.Signals(signum), by))
            return
        self.run.pass_signal(signal.Signals(signum), stopped_by=by)

    def _resize(self, signum: int, frame) -> None:
        if self.run.output is not None:
            self.run.output.resize()


def exit_status(code: int | None) -> int | None:
    """A launcher's exit code as a shell says it: itself, or 128 + N for a signal N; None if none."""
    return None if code is None else code if code >= 0 else 128 - code

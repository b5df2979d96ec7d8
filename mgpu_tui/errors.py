"""How every command ends: its exit codes, and which errors mean which code.

The one place that maps an error to an exit code: commands raise, ``cli.main``
catches and asks :func:`exit_code_for`, and prints the error's one sentence. An
error it does not know is a bug, and is not turned into a code.
"""

from __future__ import annotations

import signal
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # a run or a check failed
    USAGE = 2  # bad input: an unknown mode, a flag of the wrong type, ...
    ENVIRONMENT = 3  # this environment cannot run anything (torch missing, say)
    INTERRUPTED = 130  # Ctrl-C, SIGTERM or SIGHUP; every rank was stopped first


class UsageError(Exception):
    """Bad input: one sentence for the user, exit code 2."""


def exit_code_for(error: BaseException) -> ExitCode | None:
    """The exit code an error stands for, or None when it is not one a user can cause."""
    # The engine's errors load with the engine, not with `mgpu-tui --help`.
    from mgpu_tui.engine.launch.errors import EnvironmentUnusable, SpecError
    from mgpu_tui.engine.machine.nvml import GpuLost, NvmlCallFailed
    from mgpu_tui.engine.machine.topology import TopologyParseError
    from mgpu_tui.engine.protocol.rundir_make import RunDirError

    if isinstance(error, KeyboardInterrupt):
        return ExitCode.INTERRUPTED
    if isinstance(error, BrokenPipeError):
        return ExitCode.FAILED  # the reader of the output went away (`| head`): as Python itself ends
    if isinstance(error, (UsageError, SpecError, RunDirError, TopologyParseError)):
        return ExitCode.USAGE
    if isinstance(error, (EnvironmentUnusable, NvmlCallFailed, GpuLost)):
        return ExitCode.ENVIRONMENT
    return None


_SIGNALS_SEEN: list[int] = []


def _raise_interrupt(signum, frame) -> None:
    _SIGNALS_SEEN.append(signum)
    raise KeyboardInterrupt


def terminated() -> bool:
    """Whether a SIGTERM interrupted this command (a scheduler stopping it, not a person's Ctrl-C)."""
    return signal.SIGTERM in _SIGNALS_SEEN


def interrupt_on_term_and_hup() -> None:
    """SIGTERM and SIGHUP end a headless command the way Ctrl-C does (every rank stopped first,
    exit 130): from now on they raise KeyboardInterrupt, which the commands already handle."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_interrupt)

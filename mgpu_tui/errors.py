"""How every command ends: its exit codes, and the usage error behind exit code 2."""

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # a run or a check failed
    USAGE = 2  # bad input: an unknown mode, a flag of the wrong type, ...
    ENVIRONMENT = 3  # this environment cannot run anything (torch missing, say)
    INTERRUPTED = 130  # Ctrl-C, SIGTERM or SIGHUP; every rank was stopped first


class UsageError(Exception):
    """Bad input: one sentence for the user, exit code 2."""

"""Name the rank that failed first, and why.

Sources, best first:

1. torchrun's own report (``launcher.log``): its "Root Cause (first observed
   failure)" block names the global rank, the exit code and the error file.
2. The rank's ``error.json``, written by ``@record`` (torch's
   ``torch.distributed.elastic.multiprocessing.errors.record``): the message and
   the Python traceback.
3. Without an error file (a segfault, ``os._exit``): the last lines of the
   rank's stderr.
"""

from __future__ import annotations

import json
import re
import signal as signal_module
from dataclasses import asdict, dataclass
from pathlib import Path

from mgpu_tui.engine.run.rundir import RunDir, read_capped

STDERR_TAIL_LINES = 30
# Ranks write these files (torchrun's error files hold a rank's exception): they are read
# with a cap, so a rank cannot make the engine read gigabytes.
MAX_ERROR_FILE_BYTES = 4 << 20
MAX_LAUNCHER_LOG_BYTES = 1 << 20  # its end: torchrun's report is the last thing it writes


@dataclass(frozen=True)
class RootCause:
    rank: int | None
    exit_code: int | None  # as Python reports it: negative for a signal
    signal: str | None  # "SIGSEGV", when a signal ended the rank
    message: str
    traceback: str

    def headline(self) -> str:
        """One line: who failed first, how, and what it said (the CLI, the app and compare use it)."""
        who = "the launcher" if self.rank is None else f"rank {self.rank}"
        how = self.signal or (f"exit code {self.exit_code}" if self.exit_code is not None else None)
        return f"{who} failed first ({how}): {self.message}" if how else f"{who}: {self.message}"

    def describe(self) -> str:
        """The headline and, below it, the traceback (or the stacks, for a stall)."""
        return self.headline() + (f"\n{self.traceback.rstrip()}" if self.traceback.strip() else "")

    def to_json(self) -> dict:
        return asdict(self)


def signal_name(exit_code: int | None) -> str | None:
    if exit_code is None or exit_code >= 0:
        return None
    try:
        return signal_module.Signals(-exit_code).name
    except ValueError:
        return f"signal {-exit_code}"


_BLOCK = re.compile(r"Root Cause \(first observed failure\):\s*\n(?P<body>.*?)(?:\n=====|\Z)", re.S)
_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)", re.M)
_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)", re.M)
_ERROR_FILE = re.compile(r"^\s*error_file\s*:\s*(\S+)", re.M)


@dataclass(frozen=True)
class _TorchrunReport:
    rank: int
    local_rank: int
    exit_code: int | None
    error_file: Path | None


_FAILURES = re.compile(r"^Failures:\s*\n(?P<body>.*?)(?:\n-{20,}\s*\nRoot Cause|\Z)", re.S | re.M)
_ENTRY = re.compile(r"^\[\d+\]:\s*$", re.M)


def _parse_torchrun_reports(text: str) -> list[_TorchrunReport]:
    """Every failure torchrun reported: its root cause ("first observed failure") first, then the
    others, in its order."""
    first = _parse_torchrun_report(text)
    if first is None:
        return []
    found = [first]
    others = _FAILURES.search(text)
    if others:
        for body in _ENTRY.split(others.group("body"))[1:]:
            entry = _parse_block(body)
            if entry is not None and entry.rank != first.rank:
                found.append(entry)
    return found


def _parse_torchrun_report(text: str) -> _TorchrunReport | None:
    match = _BLOCK.search(text)
    return _parse_block(match.group("body")) if match else None


def _parse_block(body: str) -> _TorchrunReport | None:
    rank = _RANK.search(body)
    if not rank:
        return None
    exit_match = _EXIT.search(body)
    file_match = _ERROR_FILE.search(body)
    error_file = None
    if file_match and file_match.group(1) != "<N/A>":
        error_file = Path(file_match.group(1))
    return _TorchrunReport(
        rank=int(rank.group(1)),
        local_rank=int(rank.group(2)),
        exit_code=int(exit_match.group(1)) if exit_match else None,
        error_file=error_file,
    )


def read_error_file(path: Path) -> tuple[str, str, float | None] | None:
    """(message, traceback, timestamp) from an ``@record`` error file, or None."""
    try:
        document = json.loads(read_capped(path, MAX_ERROR_FILE_BYTES))
        body = document["message"]
        if isinstance(body, str):  # torch writes a plain string for some failures
            return body, "", None
        extra = body.get("extraInfo", {})
        timestamp = extra.get("timestamp")
        return (
            str(body.get("message", "")),
            str(extra.get("py_callstack", "")),
            float(timestamp) if timestamp else None,
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


_PORT_IN_USE = re.compile(r"EADDRINUSE|[Aa]ddress already in use")
_PORT = re.compile(r"port[:= ]+(\d{2,5})", re.I)
_ERROR_LINE = re.compile(r"\b\w*(Error|Exception|error:|failed)\b")


def launcher_failure(text: str) -> tuple[str, str]:
    """(message, the log's last lines) for a launcher that failed before any rank did: a port
    already taken by another process is said in those words, anything else by the launcher's
    last error line."""
    tail = "\n".join(text.strip().splitlines()[-STDERR_TAIL_LINES:])
    if _PORT_IN_USE.search(text):
        port = _PORT.search(text[max(0, _PORT_IN_USE.search(text).start() - 2000) :])
        which = f" {port.group(1)}" if port else ""
        message = (f"the launcher could not open its rendezvous port{which}: it is in use by another "
                   "process (EADDRINUSE); choose another --master-port, or leave it out to get a free one")
        return message, tail
    errors = [line.strip() for line in tail.splitlines() if _ERROR_LINE.search(line)]
    if errors:
        return f"the launcher failed before any rank did: {errors[-1]}", tail
    return "the launcher ended before any rank reported a failure", tail


def _stderr_tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str:
    try:
        data = read_capped(path, 64 * 1024, tail=True)
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def _last_line(text: str) -> str:
    for line in reversed(text.strip().splitlines()):
        if line.strip():
            return line.strip()
    return ""


# What a rank says when it is the casualty of another rank's failure, not its cause.
_PEER_GONE = re.compile(r"Connection (closed|reset) by peer|remote process exited|Broken pipe|"
                        r"ProcessGroup\w* (is )?(aborted|shut ?down)|NCCL communicator was aborted", re.I)


def _first_cause(reports: list[_TorchrunReport], rank_files: dict) -> _TorchrunReport | None:
    """torchrun's root cause, unless it is a casualty and another failure is not.

    torchrun orders failures by time, and a rank that lost its peer can write its error before
    torchrun notices the peer's death (a signal has no error file, so its time is when torchrun
    saw it). A casualty: a rank torchrun itself ended (SIGTERM) with no error of its own, or one
    whose error is its peer going away."""

    def casualty(report: _TorchrunReport) -> bool:
        files = rank_files.get(report.local_rank)
        parsed = None
        for path in (report.error_file, files.error_json if files else None):
            if path is not None and (parsed := read_error_file(path)):
                break
        if parsed is None:
            return report.exit_code == -signal_module.SIGTERM
        return bool(_PEER_GONE.search(parsed[0]))

    if not reports:
        return None
    return next((r for r in reports if not casualty(r)), reports[0])


def find_root_cause(
    run_dir: RunDir,
    *,
    launcher_exit_code: int | None,
    single_process: bool,
    rank_offset: int = 0,
) -> RootCause:
    """The first failure of a run that did not succeed.

    ``rank_offset`` turns a local rank into a global one (node rank x ranks per node).
    """
    rank_files = run_dir.rank_files()
    report = None
    launcher_text = ""
    if not single_process:
        try:
            launcher_text = read_capped(run_dir.launcher_log, MAX_LAUNCHER_LOG_BYTES, tail=True)
        except OSError:
            launcher_text = ""
        report = _first_cause(_parse_torchrun_reports(launcher_text), rank_files)

    if report is not None:
        rank, local, exit_code = report.rank, report.local_rank, report.exit_code
        error_file = report.error_file
    elif single_process:
        rank, local, exit_code, error_file = 0, 0, launcher_exit_code, None
    else:
        # torchrun did not get to write its report (it was killed): the earliest error file wins.
        candidates = []
        for files in rank_files.values():
            parsed = read_error_file(files.error_json)
            if parsed:
                candidates.append((parsed[2] or float("inf"), files.local_rank))
        if candidates:
            local = min(candidates)[1]
            rank, exit_code, error_file = local + rank_offset, None, None
        else:
            message, detail = launcher_failure(launcher_text)
            return RootCause(None, launcher_exit_code, signal_name(launcher_exit_code), message, detail)

    files = rank_files.get(local)
    parsed = None
    for path in (error_file, files.error_json if files else None):
        if path is not None and (parsed := read_error_file(path)):
            break
    if parsed:
        message, traceback, _ = parsed
    else:
        traceback = _stderr_tail(files.stderr) if files else ""
        message = _last_line(traceback)
        name = signal_name(exit_code)
        if name:
            message = f"killed by {name}" + (f" (last stderr line: {message})" if message else "")
        elif not message:
            message = f"exited with code {exit_code}"
    return RootCause(rank, exit_code, signal_name(exit_code), message, traceback)

"""What the launcher says of a failure: torchrun's report (its root cause, "first observed
failure", and the others), a rank's ``@record`` error file, and a launcher that failed before
any rank did (a port already taken)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from mgpu_tui.engine.protocol.causes import PEER_LOST, RootCause, is_consequence  # noqa: F401 (told here too)
from mgpu_tui.engine.protocol.folder import read_json

# Ranks write these files (torchrun's error files hold a rank's exception): they are read
# with a cap, so a rank cannot make the engine read gigabytes.
STDERR_TAIL_LINES = 30
MAX_ERROR_FILE_BYTES = 4 << 20


_BLOCK = re.compile(r"Root Cause \(first observed failure\):\s*\n(?P<body>.*?)(?:\n=====|\Z)", re.S)


_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)", re.M)


_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)", re.M)


_ERROR_FILE = re.compile(r"^\s*error_file\s*:\s*(\S+)", re.M)


@dataclass(frozen=True)
class TorchrunReport:
    rank: int
    local_rank: int
    exit_code: int | None
    error_file: Path | None


_FAILURES = re.compile(r"^Failures:\s*\n(?P<body>.*?)(?:\n-{20,}\s*\nRoot Cause|\Z)", re.S | re.M)


_ENTRY = re.compile(r"^\[\d+\]:\s*$", re.M)


def parse_torchrun_reports(text: str) -> list[TorchrunReport]:
    """Every failure torchrun reported: its root cause ("first observed failure") first, then the
    others, in its order."""
    first = parse_torchrun_report(text)
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


def parse_torchrun_report(text: str) -> TorchrunReport | None:
    match = _BLOCK.search(text)
    return _parse_block(match.group("body")) if match else None


def _parse_block(body: str) -> TorchrunReport | None:
    rank = _RANK.search(body)
    if not rank:
        return None
    exit_match = _EXIT.search(body)
    file_match = _ERROR_FILE.search(body)
    error_file = None
    if file_match and file_match.group(1) != "<N/A>":
        error_file = Path(file_match.group(1))
    return TorchrunReport(
        rank=int(rank.group(1)),
        local_rank=int(rank.group(2)),
        exit_code=int(exit_match.group(1)) if exit_match else None,
        error_file=error_file,
    )


def read_error_file(path: Path) -> tuple[str, str, float | None] | None:
    """(message, traceback, timestamp) from an ``@record`` error file, or None."""
    try:
        document = read_json(path, MAX_ERROR_FILE_BYTES)  # strict, bounded in depth: a rank can write it
        body = document["message"]
        if isinstance(body, str):  # torch writes a plain string for some failures
            return body, "", None
        extra = body.get("extraInfo", {})
        timestamp = extra.get("timestamp")
        return (
            str(body.get("message", ""))[:MAX_ERROR_FILE_BYTES],
            str(extra.get("py_callstack", ""))[:MAX_ERROR_FILE_BYTES],
            float(timestamp) if isinstance(timestamp, (int, float)) and 0 < timestamp < 1e11 else None,
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
    if in_use := _PORT_IN_USE.search(text):
        port = _PORT.search(text[max(0, in_use.start() - 2000) :])
        which = f" {port.group(1)}" if port else ""
        message = (
            f"the launcher could not open its rendezvous port{which}: it is in use by another "
            "process (EADDRINUSE); choose another --master-port, or leave it out to get a free one"
        )
        return message, tail
    errors = [line.strip() for line in tail.splitlines() if _ERROR_LINE.search(line)]
    if errors:
        return f"the launcher failed before any rank did: {errors[-1]}", tail
    return "the launcher ended before any rank reported a failure", tail

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

import dataclasses
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
    hint: str | None = None  # what the error means and what to try (HINTS), when it is a known one
    host: str | None = None  # the rank's host, in a job over several nodes
    # The message is the whole verdict (a lost host, a rendezvous that never completed): no "who" before it.
    verdict: bool = False

    def headline(self) -> str:
        """One line: who failed first, how, and what it said (the CLI, the app and compare use it)."""
        if self.verdict:
            return self.message
        who = "the launcher" if self.rank is None else f"rank {self.rank}"
        who += f" on {self.host}" if self.host else ""
        how = self.signal or (f"exit code {self.exit_code}" if self.exit_code is not None else None)
        return f"{who} failed first ({how}): {self.message}" if how else f"{who}: {self.message}"

    def describe(self) -> str:
        """The headline, the hint, and below them the traceback (or the stacks, for a stall)."""
        text = self.headline() + (f"\nhint: {self.hint}" if self.hint else "")
        return text + (f"\n{self.traceback.rstrip()}" if self.traceback.strip() else "")

    def to_json(self) -> dict:
        return asdict(self)


# What a rank says when it is the casualty of another rank's failure, not its cause: its peer went
# away, its process group was aborted under it, or it timed out waiting for a peer that hung. One
# pattern for torchrun's order of failures (_first_cause), the nodes' (is_consequence) and the hint.
PEER_LOST = re.compile(
    r"Connection (closed|reset) by peer|remote process exited|Broken pipe|"
    r"ProcessGroup\w* (is )?(aborted|shut ?down)|NCCL communicator was aborted|"
    r"Watchdog caught collective operation timeout|NCCL watchdog",
    re.I,
)
# The common signatures of distributed training's failures, and what each means for the user:
# (a pattern searched in the message and the traceback, the hint). The first that matches wins.
HINTS = (
    (
        r"Torch not compiled with CUDA enabled|Found no NVIDIA driver|No CUDA GPUs are available|"
        r"torch\._C' has no attribute '_cuda",
        "the script asks for CUDA, but torch here cannot use a GPU (this torch is a CPU build, or there is "
        "no NVIDIA driver): run it with --device cpu, or let the script choose its device with "
        "torch.cuda.is_available().",
    ),
    (
        r"ProcessGroupNCCL is only supported with GPUs|Distributed package doesn't have NCCL|"
        r"NCCL is not available",
        "NCCL needs CUDA GPUs, and there are none for it here: use the gloo backend on the CPU "
        '(init_process_group("gloo")).',
    ),
    (
        r"EADDRINUSE|[Aa]ddress already in use",
        "another process already listens on the rendezvous port: choose another --master-port, or leave it "
        "out to get a free one.",
    ),
    (
        r"CUDA out of memory|OutOfMemoryError",
        "the GPU ran out of memory: lower the batch size, train in mixed precision (--amp), accumulate "
        "gradients (--accum), or shard the model (fsdp) so that each rank holds less.",
    ),
    (
        r"Expected all tensors to be on the same device|is not on the expected device",
        "two tensors of one operation are on different devices: move the model and every batch to this "
        "rank's device (under DDP, the device of its LOCAL_RANK).",
    ),
    (
        r"Expected to have finished reduction in the prior iteration",
        "DDP waited for the gradients of parameters that took no part in the loss: pass "
        "find_unused_parameters=True to DistributedDataParallel, or make every parameter count.",
    ),
    (
        r"[Mm]ismatch between collectives|[Dd]etected mismatch|collective mismatch",
        "the ranks called different collectives (or the same one with other shapes) at the same point: "
        "every rank must issue the same collectives in the same order; TORCH_DISTRIBUTED_DEBUG=DETAIL "
        "names them.",
    ),
    (
        r"Duplicate GPU detected",
        "two ranks use the same GPU in one NCCL communicator: give each rank its own device "
        "(torch.cuda.set_device(LOCAL_RANK)), or let ranks share GPUs over gloo (--share-gpus).",
    ),
    (
        r"invalid device ordinal",
        "a rank asked for a GPU that does not exist: this node has fewer GPUs than ranks; lower --nproc, "
        "or let ranks share GPUs (--share-gpus).",
    ),
    (
        PEER_LOST,
        "this rank lost a peer: another rank failed or was killed first, and this error is the consequence; "
        "look for the cause in the other ranks' errors.",
    ),
)
ABORT_AT_EXIT = re.compile(r"terminate called without an active exception")
WORK_DONE_ABORT = (
    "every step had finished before this crash: the process aborted while shutting down (a gloo/DDP "
    "process group destroyed while a DDP model still holds it). The run's results are complete; to "
    "end cleanly, delete the DDP model and call gc.collect() before destroy_process_group()."
)


def hint_for(cause: RootCause, *, work_finished: bool = False) -> str | None:
    """What a root cause means, in a sentence or two; None for an error this does not know.

    ``work_finished``: the failed rank had reported its last step, so an abort at exit hit a
    finished job (the race that destroying a process group under a live DDP model loses)."""
    text = f"{cause.message}\n{cause.traceback[-20_000:]}"
    if work_finished and (cause.signal == "SIGABRT" or ABORT_AT_EXIT.search(text)):
        return WORK_DONE_ABORT
    return next((hint for pattern, hint in HINTS if re.search(pattern, text)), None)


def is_consequence(cause: RootCause) -> bool:
    """Whether this failure only echoes another's: the rank lost a peer (on several nodes, the
    first failure is then on another node, and that node's own cause is the one to tell)."""
    return bool(PEER_LOST.search(f"{cause.message}\n{cause.traceback[-20_000:]}"))


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
        message = (
            f"the launcher could not open its rendezvous port{which}: it is in use by another "
            "process (EADDRINUSE); choose another --master-port, or leave it out to get a free one"
        )
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
        return bool(PEER_LOST.search(parsed[0]))

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
            cause = RootCause(None, launcher_exit_code, signal_name(launcher_exit_code), message, detail)
            return dataclasses.replace(cause, hint=hint_for(cause))

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
    cause = RootCause(rank, exit_code, signal_name(exit_code), message, traceback)
    return dataclasses.replace(cause, hint=hint_for(cause))

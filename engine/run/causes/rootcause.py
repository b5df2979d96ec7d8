"""Name the rank that failed first, and why.

Sources, best first:

1. torchrun's own report (``launcher.log``): its "Root Cause (first observed
   failure)" block names the global rank, the exit code and the error file.
2. The rank's own ``error`` event, which a script's bootstrap writes from the exception itself
   (engine/rank/bootstrap.py): its type, its first line as the headline, its traceback.
3. The rank's ``error.json``, written by ``@record`` (torch's
   ``torch.distributed.elastic.multiprocessing.errors.record``): the message and
   the Python traceback.
4. Without either (a segfault, ``os._exit``): the last lines of the rank's stderr, torch's
   ``[rankN]:`` prefixes taken off.

A rank that had finished its work (its script ran to its end, or a mode's last step) and then
died is told as such (:func:`after_finishing`): the training is complete, only the exit failed.
"""

from __future__ import annotations

import dataclasses
import re
import signal as signal_module
from collections.abc import Mapping
from pathlib import Path

from mgpu_tui.engine.protocol.causes import PEER_LOST, RootCause, is_consequence  # noqa: F401 (told here too)
from mgpu_tui.engine.protocol.events import Error
from mgpu_tui.engine.protocol.folder import read_capped
from mgpu_tui.engine.protocol.rundir import RunDir
from mgpu_tui.engine.run.causes import out_of_memory
from mgpu_tui.engine.run.causes.launcher_report import (
    STDERR_TAIL_LINES,
    TorchrunReport,
    launcher_failure,
    parse_torchrun_reports,
    read_error_file,
)

MAX_LAUNCHER_LOG_BYTES = 1 << 20  # its end: torchrun's report is the last thing it writes


# The common signatures of distributed training's failures, and what each means for the user:
# (a pattern searched in the message and the traceback, the hint for a mode, the hint for the
# user's own program where it differs: what to change in the script). The first that matches wins;
# a hint may be a function of the text (the out-of-memory one reads the allocator's own figures).
_CPU_TORCH = (
    r"Torch not compiled with CUDA enabled|Found no NVIDIA driver|No CUDA GPUs are available|"
    r"torch\._C' has no attribute '_cuda|Cannot access accelerator device when none is available"
)
_OOM_SPLIT = re.compile(
    r"([\d.]+) (B|bytes|KiB|MiB|GiB) is allocated by PyTorch, and ([\d.]+) (B|bytes|KiB|MiB|GiB) is reserved"
)
_UNITS = {"B": 1, "bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
OOM = (
    "the GPU ran out of memory: lower the batch size, train in mixed precision (--amp), accumulate "
    "gradients (--accum), or shard the model (fsdp) so that each rank holds less."
)
OOM_SCRIPT = (
    "the GPU ran out of memory: lower the script's batch size, train under torch.autocast, accumulate "
    "gradients over smaller micro-batches, or shard the model (FSDP's fully_shard) so each rank holds less."
)
FRAGMENTED = (
    "the GPU ran out of memory while {reserved} of it sat reserved by PyTorch but unused (beside "
    "{allocated} in use): fragmentation. Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True for the "
    "job before anything else; if it still fails, the batch is too large."
)


def _oom_hint(text: str, program: bool) -> str:
    """Out of memory: fragmentation when the allocator says a large share sat reserved but unused."""
    split = _OOM_SPLIT.search(text)
    if split:
        allocated = float(split[1]) * _UNITS[split[2]]
        reserved = float(split[3]) * _UNITS[split[4]]
        if reserved >= max(0.25 * allocated, 256 << 20):
            return FRAGMENTED.format(reserved=f"{split[3]} {split[4]}", allocated=f"{split[1]} {split[2]}")
    return OOM_SCRIPT if program else OOM


HINTS = (
    (
        _CPU_TORCH,
        "the script asks for CUDA, but torch here cannot use a GPU (this torch is a CPU build, or there is "
        "no NVIDIA driver): run it with --device cpu, or let the script choose its device with "
        "torch.cuda.is_available().",
        "the script asks for a GPU, but torch here cannot use one (this torch is a CPU build, or there is no "
        'NVIDIA driver). Make the script choose: its device with torch.device("cuda" if '
        'torch.cuda.is_available() else "cpu"), and its backend with init_process_group("nccl" if '
        'torch.cuda.is_available() else "gloo").',
    ),
    (
        r"ProcessGroupNCCL is only supported with GPUs|Distributed package doesn't have NCCL|"
        r"NCCL is not available",
        "NCCL needs CUDA GPUs, and there are none for it here: use the gloo backend on the CPU "
        '(init_process_group("gloo")).',
        None,
    ),
    (
        r"EADDRINUSE|[Aa]ddress already in use",
        "another process already listens on the rendezvous port: choose another --master-port, or leave it "
        "out to get a free one.",
        None,
    ),
    (r"CUDA out of memory|OutOfMemoryError", _oom_hint, None),
    (
        r"Expected all tensors to be on the same device|is not on the expected device",
        "two tensors of one operation are on different devices: move the model and every batch to this "
        "rank's device (under DDP, the device of its LOCAL_RANK).",
        None,
    ),
    (
        r"Expected to have finished reduction in the prior iteration",
        "DDP waited for the gradients of parameters that took no part in the loss: pass "
        "find_unused_parameters=True to DistributedDataParallel, or make every parameter count.",
        None,
    ),
    (
        r"[Mm]ismatch between collectives|[Dd]etected mismatch|collective mismatch",
        "the ranks called different collectives (or the same one with other shapes) at the same point: "
        "every rank must issue the same collectives in the same order; TORCH_DISTRIBUTED_DEBUG=DETAIL "
        "names them.",
        None,
    ),
    (
        r"Duplicate GPU detected",
        "two ranks use the same GPU in one NCCL communicator: give each rank its own device "
        "(torch.cuda.set_device(LOCAL_RANK)), or let ranks share GPUs over gloo (--share-gpus).",
        "two ranks use the same GPU in one NCCL communicator (every rank on cuda:0 when a script never "
        'picks one): call torch.cuda.set_device(int(os.environ["LOCAL_RANK"])) before '
        "init_process_group and build the model on that device.",
    ),
    (
        r"invalid device ordinal",
        "a rank asked for a GPU that does not exist: this node has fewer GPUs than ranks; lower --nproc, "
        "or let ranks share GPUs (--share-gpus).",
        "a rank asked for a GPU that does not exist: this node has fewer GPUs than ranks; lower "
        "--nproc-per-node to the GPUs there are.",
    ),
    (
        r"Watchdog caught collective operation timeout",
        "a collective waited past the process group's timeout (10 minutes by default) for a rank that never "
        "joined it: that rank hung, or took another path. The stall verdict names it, with its stacks, long "
        "before that; a larger timeout= in init_process_group only helps when a step truly takes that long.",
        None,
    ),
    (
        PEER_LOST,
        "this rank lost a peer: another rank failed or was killed first, and this error is the consequence; "
        "look for the cause in the other ranks' errors.",
        None,
    ),
)
ABORT_AT_EXIT = re.compile(r"terminate called without an active exception")
WORK_DONE_ABORT = (
    "every step had finished before this crash: the process aborted while shutting down (a gloo/DDP "
    "process group destroyed while a DDP model still holds it). The run's results are complete; to "
    "end cleanly, delete the DDP model and call gc.collect() before destroy_process_group()."
)


FINISHED_THEN_DIED = (
    "the training had finished: every step was taken and the script ran to its end before this "
    "process died while Python shut down{after}. Its results (checkpoints, logs) are complete; only "
    "the exit code says failed. {fix}"
)
# Where the script had already ended its process group, it is not told to end it.
GROUP_ENDED_FIX = (
    "The script already ends its process group: this is torch's teardown race (gloo's, seen under "
    "plain torchrun too); dropping the last references to the wrapped model (del model; gc.collect()) "
    "before destroy_process_group() makes it rarer."
)
GROUP_ALIVE_FIX = (
    "The script ends with its process group still up: end it with torch.distributed."
    "destroy_process_group() (after del model; gc.collect()), so torch does not tear it down mid-exit."
)


def after_finishing(cause: RootCause, steps: int, process_group: str | None) -> RootCause:
    """A script's rank that ran to its end (it said ``done``) and then died at exit: the whole
    verdict says so, with a hint that fits how the script left its process group."""
    how = cause.signal or (f"exit code {cause.exit_code}" if cause.exit_code is not None else "an error")
    said = _last_line(cause.traceback) if cause.signal else ""
    who = "the launcher" if cause.rank is None else f"rank {cause.rank}"
    message = f"{who} finished its training ({steps:,} steps), then died at exit ({how})"
    if said and said not in message:
        message += f": {said}"
    fix = (
        GROUP_ALIVE_FIX
        if process_group == "alive"
        else GROUP_ENDED_FIX
        if process_group == "destroyed"
        else ""
    )
    after = " (after torch's teardown of its process group)" if process_group == "destroyed" else ""
    hint = FINISHED_THEN_DIED.format(after=after, fix=fix).strip()
    return dataclasses.replace(cause, message=message, hint=hint, verdict=True, kind="finished_then_died")


def from_error_event(cause: RootCause, error: Error, *, program: bool = False) -> RootCause:
    """The cause told by the rank itself: its exception's first line as the message, its whole
    traceback (chained exceptions and every line of the message in it), and the hint they match."""
    cause = dataclasses.replace(
        cause, message=_unprefixed(error.message), traceback=_unprefixed(error.traceback)
    )
    oom = out_of_memory.read(error.out_of_memory) if error.out_of_memory is not None else None
    if oom is not None:  # what filled it, and what would fit, before the usual advice
        hint = " ".join(filter(None, (out_of_memory.describe(oom), hint_for(cause, program=program))))
        return dataclasses.replace(cause, hint=hint, out_of_memory=oom)
    return dataclasses.replace(cause, hint=hint_for(cause, program=program))


_RANK_PREFIX = re.compile(r"^\[rank\d+\]: ?", re.M)


def _unprefixed(text: str) -> str:
    """Text without the ``[rankN]: `` that torch's excepthook puts before every line of a rank's stderr."""
    return _RANK_PREFIX.sub("", text)


def hint_for(cause: RootCause, *, work_finished: bool = False, program: bool = False) -> str | None:
    """What a root cause means, in a sentence or two; None for an error this does not know.

    ``work_finished``: the failed rank had reported its last step, so an abort at exit hit a
    finished job (the race that destroying a process group under a live DDP model loses).
    ``program``: the user's own script, told what to change in it rather than mgpu-tui's flags."""
    text = f"{cause.message}\n{cause.traceback[-20_000:]}"
    if work_finished and (cause.signal == "SIGABRT" or ABORT_AT_EXIT.search(text)):
        return WORK_DONE_ABORT
    for pattern, hint, for_program in HINTS:
        if re.search(pattern, text):
            chosen = for_program if program and for_program else hint
            return chosen(text, program) if callable(chosen) else chosen
    return None


def signal_name(exit_code: int | None) -> str | None:
    if exit_code is None or exit_code >= 0:
        return None
    try:
        return signal_module.Signals(-exit_code).name
    except ValueError:
        return f"signal {-exit_code}"


def _stderr_tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str:
    try:
        data = read_capped(path, 64 * 1024, tail=True)
    except OSError:
        return ""
    return _unprefixed("\n".join(data.splitlines()[-lines:]))


def _last_line(text: str) -> str:
    for line in reversed(text.strip().splitlines()):
        if line.strip():
            return line.strip()
    return ""


def _first_cause(
    reports: list[TorchrunReport], rank_files: dict, errors: Mapping[int, Error], stopped: int | None = None
) -> TorchrunReport | None:
    """The rank the user stopped (``stopped``: the app's x), whatever torchrun saw first; else
    torchrun's root cause, unless it is a casualty and another failure is not.

    torchrun orders failures by time, and a rank that lost its peer can write its error before
    torchrun notices the peer's death (a signal has no error file, so its time is when torchrun
    saw it). A casualty: a rank torchrun itself ended (SIGTERM) with no error of its own, or one
    whose error is its peer going away."""

    def casualty(report: TorchrunReport) -> bool:
        told = errors.get(report.rank)
        if told is not None:  # the rank's own words: an exception, or its peer gone
            return bool(PEER_LOST.search(f"{told.message}\n{told.whole_message or ''}"))
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
    if (asked := next((r for r in reports if r.rank == stopped), None)) is not None:
        return asked  # it died first by the user's hand; the others' errors are its consequence
    return next((r for r in reports if not casualty(r)), reports[0])


def find_root_cause(
    run_dir: RunDir,
    *,
    launcher_exit_code: int | None,
    single_process: bool,
    rank_offset: int = 0,
    errors: Mapping[int, Error] | None = None,
    program: bool = False,
    stopped_rank: int | None = None,
) -> RootCause:
    """The first failure of a run that did not succeed.

    ``rank_offset`` turns a local rank into a global one (node rank x ranks per node); ``errors``:
    the ``error`` events the ranks wrote, by global rank; ``program``: the user's own script (its
    hints say what to change in it); ``stopped_rank``: the rank the user stopped on its own (the
    app's x), which torchrun may see end after its peers' errors about it.
    """
    errors = errors or {}
    rank_files = run_dir.rank_files()
    report = None
    launcher_text = ""
    if not single_process:
        try:
            launcher_text = read_capped(run_dir.launcher_log, MAX_LAUNCHER_LOG_BYTES, tail=True)
        except OSError:
            launcher_text = ""
        report = _first_cause(parse_torchrun_reports(launcher_text), rank_files, errors, stopped_rank)

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
            return dataclasses.replace(cause, hint=hint_for(cause, program=program))

    chosen = rank_files.get(local)
    parsed = None
    for path in (error_file, chosen.error_json if chosen else None):
        if path is not None and (parsed := read_error_file(path)):
            break
    if parsed:
        message, traceback, _ = parsed
    else:
        traceback = _stderr_tail(chosen.stderr) if chosen else ""
        message = _last_line(traceback)
        name = signal_name(exit_code)
        if name:
            message = f"killed by {name}" + (f" (last stderr line: {message})" if message else "")
        elif not message:
            message = f"exited with code {exit_code}"
    cause = RootCause(rank, exit_code, signal_name(exit_code), message, traceback)
    if rank in errors and errors[rank].type is not None:  # told by the rank's bootstrap, whole
        return from_error_event(cause, errors[rank], program=program)
    return dataclasses.replace(cause, hint=hint_for(cause, program=program))


def command_root_cause(
    run_dir: RunDir,
    exit_code: int | None,
    errors: Mapping[int, Error],
    trainer_errors: Mapping[int, Error] | None = None,
) -> RootCause:
    """The first failure of a command run by mgpu-tui exec, whose launcher is the user's own (no
    torchrun report to read): the rank (or the trainer: ``trainer_errors``, by trainer number) whose
    exception came first, told by itself, whole (an mp.spawn child's too, which catches its own,
    and a multiprocessing child's, whose parent may exit 0); else the command's exit, with the end
    of what it wrote to stderr."""
    told: list[tuple[float, int, int, Error, int | None]] = [
        (e.t, 0, e.rank, e, None) for e in errors.values()
    ]
    told += [(e.t, 1, number, e, number) for number, e in (trainer_errors or {}).items()]
    if told:
        _, _, _, first, trainer = min(told, key=lambda found: found[:3])
        rank = None if trainer is not None else first.rank
        cause = RootCause(rank, None, None, first.message, first.traceback, trainer=trainer)
        return from_error_event(cause, first, program=True)
    tail = _stderr_tail(run_dir.command_output().stderr)
    name = signal_name(exit_code)
    last = _last_line(tail)
    if name:
        message = f"the command was killed by {name}" + (f" (last stderr line: {last})" if last else "")
    else:
        message = f"the command exited with code {exit_code}" + (f": {last}" if last else "")
    cause = RootCause(None, exit_code, name, message, tail)
    return dataclasses.replace(cause, hint=hint_for(cause, program=True))

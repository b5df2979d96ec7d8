"""The past runs of a folder, read back from their files: newest first, the broken ones said as such.

A run directory holds ``spec.json`` from the start and ``summary.json`` once it ended (the
protocol/rundir.py layout). Each is read with a bound and trusted for nothing but what it says;
a folder that is not a run, or a run whose files are half-written or foreign, is listed as
broken with the reason, never fatal. A run with a spec and no summary is *running* while the
process that follows it holds its lock (run/monitor.py), *cut off* once that process is gone
without writing one (killed, the machine restarted), and *unfinished* when it has no lock to tell
by (made by an mgpu-tui from before the lock).
"""

from __future__ import annotations

import dataclasses
import functools
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from mgpu_tui.engine.launch.slurm import SlurmJob
from mgpu_tui.engine.protocol.folder import Unreadable, entries, read_json
from mgpu_tui.engine.protocol.rundir import RunDir
from mgpu_tui.engine.protocol.rundir_make import NAME
from mgpu_tui.engine.protocol.typed import Invalid, Word, build
from mgpu_tui.engine.run.monitor import is_followed
from mgpu_tui.engine.run.summary import RunStatus, RunSummary

MAX_SPEC_BYTES = 1 << 20
MAX_SUMMARY_BYTES = 8 << 20
MAX_RUNS = 10_000  # a folder with more entries is read up to this many


MAX_WORLD = 1 << 16  # ranks a recorded run may claim: more is no run of this machine's making
MAX_NNODES = 1 << 12  # nodes a recorded run may claim (as the command line's --nnodes)
MAX_NAME = 200  # characters of a mode, script or module name kept
MAX_COMMAND_WORDS = 4096  # a command line's words (mgpu-tui exec), as its spec.json keeps them


class RecordError(ValueError):
    """A run directory that cannot be used as asked (opened, compared): one sentence for the user."""


@dataclass(frozen=True)
class RecordedSpec:
    """What a run's spec.json says it ran (ResolvedSpec.to_json, read back): every field checked by
    protocol/typed.py, the world bounded; what the records read of a spec, and nothing else."""

    world_size: int | None  # None: a command's (mgpu-tui exec), whose ranks said how many they were
    mode: str | None = None
    script: str | None = None
    module: str | None = None
    command: tuple[str, ...] = ()
    nproc: int | None = None
    nnodes: int = 1
    steps: int | None = None
    batch_size: int | None = None
    amp: bool = False
    device: str = "cpu"
    device_requested: str | None = None
    share_gpus: bool = False
    stall_timeout: float | None = None
    max_restarts: int = 0
    instrument: bool = True
    width: int | None = None
    depth: int | None = None
    model: str | None = None
    model_args: tuple[tuple[str, int], ...] = ()
    stages: int = 1
    lr: float | None = None
    name: str | None = None  # the user's name for the run (--name)
    slurm: SlurmJob | None = None  # the Slurm job it ran in (launch/slurm.py)
    # A mode's further demo flags, or a script's own arguments (what runs it again).
    demo_args: tuple[str, ...] = ()
    on_stall: Literal["stop", "report"] | None = None
    comparison: str | None = None  # the comparison it was a row of (LaunchSpec.comparison)

    def __post_init__(self) -> None:
        if self.world_size is None and not self.command:
            raise Invalid("world_size: none, for a run that is not a command's")
        if self.world_size is not None and not 1 <= self.world_size <= MAX_WORLD:
            raise Invalid(f"world_size: {self.world_size} is not between 1 and {MAX_WORLD:,}")
        if len(self.command) > MAX_COMMAND_WORDS:
            raise Invalid(f"command: more than {MAX_COMMAND_WORDS} words")
        if not 1 <= self.nnodes <= min(self.world_size or 1, MAX_NNODES):
            bound = f"between 1 and the world size (at most {MAX_NNODES:,})"
            raise Invalid(f"nnodes: {self.nnodes} is not {bound}")
        if self.comparison is not None and not NAME.fullmatch(self.comparison):
            raise Invalid("comparison: not a name (letters, digits, '.', '_' and '-', at most 64)")

    @property
    def program(self) -> str | None:
        """The user's own script, module or command line, for a run of one."""
        return self.script or self.module or (shlex.join(self.command) if self.command else None)

    @property
    def what(self) -> str:
        """The mode, or the user's script or module: as the lists name the run."""
        return (self.program or self.mode or "?")[:MAX_NAME]


@dataclass(frozen=True)
class RecordedMachine:
    """The machine a run recorded in its spec.json (older runs recorded none)."""

    hostname: str | None = None
    cpu_count: int | None = None
    gpu_count: int | None = None
    gpu_note: str | None = None


@dataclass(frozen=True)
class SpecDocument:
    spec: RecordedSpec
    created_at: float
    machine: RecordedMachine | None = None
    mgpu_tui_version: str | None = None


class RecordStatus(Word):
    """What a run folder says of its run: how it ended (a summary's RunStatus), or why it says
    nothing of that (``runs --json``'s ``status``: the value)."""

    OK = "ok"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    RUNNING = "running"  # no summary yet, and its monitor still follows it
    CUT_OFF = "cut off"  # no summary, and its monitor is gone (killed, or the machine went down)
    UNFINISHED = "unfinished"  # no summary, and no monitor ever took it
    BROKEN = "broken"  # its files cannot be read: ``reason`` says why

    @classmethod
    def of(cls, status: RunStatus) -> RecordStatus:
        return cls(status.value)


@dataclass(frozen=True)
class RunRecord:
    path: str
    created_at: float | None  # Unix time, from spec.json
    what: str  # the mode, or the user's script or module
    world_size: int | None
    nnodes: int | None
    status: RecordStatus
    summary: RunSummary | None = None
    reason: str | None = None  # why it is broken
    model: str | None = None  # a mode's workload (mlp, gpt-tiny...); None for a script, or unrecorded

    name: str | None = None  # the user's name for it (--name)
    slurm_job: str | None = None  # the Slurm job it ran in
    comparison: str | None = None  # the comparison it was a row of (compare, scale, the app's Compare)

    @property
    def label(self) -> str:
        """What ran, as a listing says it: its name if it has one, the mode, and its model where it
        is not the quick MLP."""
        what = f"{self.what} · {self.model}" if self.model and self.model != "mlp" else self.what
        return f"{self.name}: {what}" if self.name else what

    @property
    def why(self) -> str | None:
        """Why it ended as it did, as the listings say it: a broken folder's reason, a failure's root
        cause, or the hang it was stopped in (a stall reported, then stopped: no failure's cause)."""
        s = self.summary
        if self.reason or s is None:
            return self.reason
        if s.root_cause is not None:
            return s.root_cause.headline()
        return f"hung: {s.stall.headline()}" if s.stall is not None else None

    def to_json(self) -> dict:
        s = self.summary
        return {
            "path": self.path,
            "created_at": self.created_at,
            "what": self.what,
            "model": self.model,
            "name": self.name,
            "slurm_job": self.slurm_job,
            "comparison": self.comparison,
            "world_size": self.world_size,
            "nnodes": self.nnodes,
            "status": self.status,
            "reason": self.reason,
            "duration_s": s.duration_s if s else None,
            "steps": s.steps if s else None,
            "samples_per_s": s.samples_per_s if s else None,
            "final_loss": s.final_loss if s else None,
            "root_cause": s.root_cause.headline() if s and s.root_cause else None,
            "stall": s.stall.headline() if s and s.stall else None,
            "why": self.why,
        }


def read_run(path: Path) -> RunRecord:
    """One run directory as a record (never raises for what is in the folder)."""
    try:
        document, node = _spec_document(path)
    except FileNotFoundError:
        return _broken(path, "no spec.json: not a run directory")
    except (OSError, ValueError) as exc:  # Unreadable and Invalid among them: each says what
        return _broken(path, _unreadable(RunDir(path).spec_path.name, exc))
    spec, created = document.spec, document.created_at
    what, world, nnodes = spec.what, spec.world_size, spec.nnodes
    record = functools.partial(
        RunRecord,
        str(path),
        created,
        what,
        world,
        nnodes,
        model=None if spec.program else spec.model,
        name=spec.name,
        slurm_job=spec.slurm.job_id if spec.slurm else None,
        comparison=spec.comparison,
    )
    folder = RunDir(path, node)
    try:
        summary = RunSummary.from_json(read_json(folder.summary_path, MAX_SUMMARY_BYTES, root=path))
    except FileNotFoundError:
        lock = folder.monitor_lock_path
        if not lock.exists():
            return record(RecordStatus.UNFINISHED)
        return record(RecordStatus.RUNNING if is_followed(lock) else RecordStatus.CUT_OFF)
    except (OSError, ValueError) as exc:
        return record(RecordStatus.BROKEN, reason=_unreadable(folder.summary_path.name, exc))
    if world is None:  # a command's: its ranks said how many they were
        return dataclasses.replace(
            record(RecordStatus.of(summary.status), summary), world_size=summary.world_size
        )
    return record(RecordStatus.of(summary.status), summary)


def _spec_document(path: Path) -> tuple[SpecDocument, int | None]:
    """The run's spec.json (or, where the nodes of a job share the folder, the first node's
    spec-node<N>.json) read by the one reader and checked field by field; its node."""
    spec_path, node = RunDir(path).first_spec()
    return build(SpecDocument, read_json(spec_path, MAX_SPEC_BYTES, root=path)), node


def read_spec(path: Path) -> tuple[RecordedSpec, RecordedMachine | None, int | None]:
    """(the resolved spec, the machine it ran on, the node) of a run directory: spec.json, or the
    first node's spec-node<N>.json where nodes share the folder. RecordError if unreadable."""
    try:
        document, node = _spec_document(path)
    except (OSError, ValueError) as exc:
        raise RecordError(f"{path}: its spec.json is unreadable ({_why(exc)}).") from None
    return document.spec, document.machine, node


def comparison_runs(records: Sequence[RunRecord], comparison: str) -> list[Path]:
    """The run folders of one comparison, in the order they ran (the oldest first), among
    ``records``: the rows to show it again with (compare/records.py)."""
    members = [r for r in records if r.comparison == comparison and r.status is not RecordStatus.BROKEN]
    return [Path(r.path) for r in sorted(members, key=lambda r: r.created_at or 0.0)]


def list_runs(root: Path) -> list[RunRecord]:
    """Every run directory under ``root``, newest first (by its start, else by its name)."""
    listed = entries(root, MAX_RUNS)
    names = sorted((e.name for e in listed if e.is_dir(follow_symlinks=False)), reverse=True)
    records = [read_run(root / name) for name in names[:MAX_RUNS]]
    return sorted(records, key=lambda r: (r.created_at or 0.0, r.path), reverse=True)


def _broken(path: Path, reason: str) -> RunRecord:
    return RunRecord(str(path), None, "?", None, None, RecordStatus.BROKEN, reason=reason)


def _unreadable(name: str, exc: BaseException) -> str:
    """Why a run's file cannot be used: the reader's own sentence names the file already."""
    return str(exc)[:200] if isinstance(exc, Unreadable) else f"{name} unreadable ({_why(exc)})"


def _why(exc: BaseException) -> str:
    if isinstance(exc, (Unreadable, Invalid)):  # each names the file or field, and why
        return str(exc)[:200]
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return f"{type(exc).__name__}: {str(exc)[:80]}"

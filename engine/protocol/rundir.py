"""The run directory: where everything about one run lives, and can be reopened from.

Layout::

    runs/20261121T070323Z-ddp/
        spec.json             the resolved launch spec, argv and environment changes
        launcher.log          torchrun's (or python's) own stdout and stderr
        logs/<id>/attempt_<k>/<local rank>/stdout.log, stderr.log, error.json
                              written by torchrun --log-dir --redirects 3; single-process
                              modes use the same shape with <id> = "python"
        logs/command/stdout.log, stderr.log
                              mgpu-tui exec: the command's own output, every process's lines
                              merged as its launcher printed them (the "rank" JOB_OUTPUT)
        events/rank<N>.jsonl  the rank event stream (see events.py); events/trainer<PID>.jsonl: a
                              process that trains with no process group (mgpu-tui exec), its
                              trainings one after another (a pool worker's tasks)
        params/rank<N>.pt     trained parameters, with --verify; verify.log beside them
        telemetry.jsonl       the machine during the run (run/figures/telemetry_log.py)
        monitor.lock          locked while a process follows the run (run/monitor.py)
        monitor.json          that process's own record of itself: pid, start time, boot, host
        summary.json          written when the run ends
        mgpu-tui.log          the run's own log (run/runlog.py)
        verify.log            --verify's comparison of the trained parameters (run/verify.py)
        requests/fr, requests/stacks
                              the engine's requests to every rank (its flight records, its Python
                              stacks): files that each rank's reporter thread polls, never a signal
        stacks/rank<N>.txt    a rank's answer: every thread's Python stack (a trainer's: trainer<PID>.txt)
        fr/rank<N>.json       a rank's flight record, the engine's reading of it; torch's own dump
                              under fr/torch/rank<N>, and fr/torch-readable/rank<N> (gloo's groups
                              named, for fr_trace)

Every path of it is spelled here, and only here (tests/unit/test_layers.py checks): a rank,
which knows only the folder's path, uses the same ``RunDir``.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mgpu_tui.engine.protocol.folder import dumps, entries, write_atomic
from mgpu_tui.engine.protocol.rundir_make import NAME as NAME  # their first home: importable here still
from mgpu_tui.engine.protocol.rundir_make import RunDirError as RunDirError
from mgpu_tui.engine.protocol.rundir_make import folder_name as folder_name
from mgpu_tui.engine.protocol.rundir_make import make_run_dir

_RANK_FILE = re.compile(r"rank([0-9]{1,7})\.jsonl$")
_TRAINER_FILE = re.compile(r"trainer([0-9]{1,7})\.jsonl$")
_NODE_SPEC = re.compile(r"spec-node([0-9]{1,5})\.json")
_PARAMS_FILE = re.compile(r"rank([0-9]{1,7})\.pt")
_NCCL_LOG = re.compile(r"nccl-.*\.log")
_SPEC_FILE = re.compile(r"spec(-node[0-9]{1,5})?\.json")
# The engine's requests to the ranks, under requests/ (the ranks' reporter threads poll for them).
FR_REQUEST = "fr"
STACKS_REQUEST = "stacks"
# Asked for (a stall), torch's own dump is kept too, as torch writes it, for torch's own analyser:
# python -m torch.distributed.flight_recorder.fr_trace RUN/fr/torch (docs/your-script.md).
FR_TORCH_DIR = "torch"
# gloo's dumps name their groups "" in pg_config, which fr_trace cannot match to the entries (a
# KeyError, torch 2.13): the rank writes a copy whose pg_config it rebuilds from its own groups.
FR_READABLE_DIR = "torch-readable"
# The rank a command's own output is shown under (mgpu-tui exec): its lines are every process's,
# merged as the command's launcher printed them, not one rank's.
JOB_OUTPUT = -1


@dataclass(frozen=True)
class RankFiles:
    """Where one local rank's output went, in the latest attempt."""

    local_rank: int
    stdout: Path
    stderr: Path
    error_json: Path


class RunDir:
    """One run's folder. With several nodes, each node's own files carry ``-node<R>``
    (and its logs sit under ``logs/node<R>``), so nodes can share one folder on a
    shared file system; event files are named by global rank and never collide."""

    def __init__(self, path: str | os.PathLike, node: int | None = None) -> None:
        self.path = Path(path)
        self.node = node
        self._suffix = "" if node is None else f"-node{node}"

    # ---- creation ----------------------------------------------------------

    @classmethod
    def create(
        cls,
        root: str | os.PathLike,
        mode: str,
        now: dt.datetime | None = None,
        *,
        node: int | None = None,
        shared: str | None = None,
    ) -> RunDir:
        """Make a new, empty run folder ``<root>/<UTC timestamp>-<mode>`` (rundir_make.py).

        Two runs started in the same second get ``-2``, ``-3``... so they never share one.
        ``shared`` names a folder that the nodes of one job share (``<root>/<shared>-<mode>``).
        Its path is absolute: the ranks are handed it, and a rank may change directory first.
        """
        run = make_run_dir(cls, root, mode, now, node=node, shared=shared)
        run.path = run.path.absolute()
        return run

    # ---- well-known paths --------------------------------------------------

    @property
    def spec_path(self) -> Path:
        return self.path / f"spec{self._suffix}.json"

    @property
    def summary_path(self) -> Path:
        return self.path / f"summary{self._suffix}.json"

    @property
    def telemetry_path(self) -> Path:
        """The machine during the run, a JSON line a sample (run/figures/telemetry_log.py)."""
        return self.path / f"telemetry{self._suffix}.jsonl"

    @property
    def monitor_lock_path(self) -> Path:
        """Locked by the process following the run while it does (run/monitor.py)."""
        return self.path / f"monitor{self._suffix}.lock"

    @property
    def link_log(self) -> Path:
        """The node link's own output (several nodes: engine/nodes/watch.py)."""
        return self.path / f"node-link{self._suffix}.log"

    @property
    def launcher_log(self) -> Path:
        return self.path / f"launcher{self._suffix}.log"

    @property
    def logs_dir(self) -> Path:
        return self.path / "logs" if self.node is None else self.path / "logs" / f"node{self.node}"

    @property
    def params_dir(self) -> Path:
        """Trained parameters, one file per rank, saved for --verify."""
        return self.path / "params"

    @property
    def events_dir(self) -> Path:
        return self.path / "events"

    @property
    def run_log(self) -> Path:
        """The run's own log (run/runlog.py): one for the folder, each node's lines say its node."""
        return self.path / "mgpu-tui.log"

    @property
    def verify_log(self) -> Path:
        """--verify's own output (run/verify.py)."""
        return self.path / "verify.log"

    def events_path(self, rank: int, trainer: bool = False) -> Path:
        """A rank's event stream, named by global rank (events.py); a trainer's (``trainer``: ``rank``
        is its pid), named by its process."""
        return self.events_dir / f"{'trainer' if trainer else 'rank'}{rank}.jsonl"

    def request_path(self, name: str) -> Path:
        """The engine's request ``name`` (FR_REQUEST, STACKS_REQUEST) to every rank."""
        return self.path / "requests" / name

    @property
    def stacks_dir(self) -> Path:
        return self.path / "stacks"

    def stacks_path(self, rank: int, trainer: bool = False) -> Path:
        """A rank's answer to STACKS_REQUEST: every thread's Python stack (a trainer's: by pid)."""
        return stacks_file(self.stacks_dir, rank, trainer)

    def flight_record_path(self, rank: int) -> Path:
        """A rank's answer to FR_REQUEST: its flight record, as the engine reads it."""
        return self.path / "fr" / f"rank{rank}.json"

    def torch_dumps_dir(self, *, readable: bool = False) -> Path:
        """torch's own dumps of the ranks' flight records (FR_TORCH_DIR), or their copies with
        gloo's groups named (FR_READABLE_DIR): the folder torch's fr_trace reads."""
        return self.path / "fr" / (FR_READABLE_DIR if readable else FR_TORCH_DIR)

    def torch_dump_path(self, rank: int, *, readable: bool = False) -> Path:
        return self.torch_dumps_dir(readable=readable) / f"rank{rank}"

    @property
    def verify_out(self) -> Path:
        """--verify's outcome, a JSON line (run/verify.py)."""
        return self.path / "verify.json"

    @property
    def nccl_log_pattern(self) -> str:
        """NCCL_DEBUG_FILE for the ranks: NCCL fills in the host (%h) and the pid (%p)."""
        return str(self.path / "nccl-%h.%p.log")

    def nccl_logs(self) -> list[Path]:
        """NCCL's own logs in the folder now, by name (one bounded listing)."""
        return sorted(Path(e.path) for e in entries(self.path) if _NCCL_LOG.fullmatch(e.name))

    def python_error_file(self) -> Path:
        """A single-process mode's error file, where torch's @record writes it (TORCHELASTIC_ERROR_FILE)."""
        return self.python_rank_dir() / "error.json"

    # ---- mgpu-tui --check: its own run folder --------------------------------

    @property
    def check_report_path(self) -> Path:
        return self.path / "check.json"

    @property
    def check_results_dir(self) -> Path:
        """Each check rank's records, a JSON line each (checks/rank<N>.jsonl)."""
        return self.path / "checks"

    def check_results_path(self, rank: int) -> Path:
        return self.check_results_dir / f"rank{rank}.jsonl"

    def check_results(self) -> list[Path]:
        """Every check rank's records file there now, by name."""
        return sorted(Path(e.path) for e in entries(self.check_results_dir) if _RANK_FILE.fullmatch(e.name))

    @property
    def smoke_dir(self) -> Path:
        """The check's smoke runs, a folder a mode (smoke_folder)."""
        return self.path / "smoke"

    def command_output(self) -> RankFiles:
        """mgpu-tui exec: the command's own stdout and stderr (no error file: the ranks tell theirs)."""
        folder = self.logs_dir / "command"
        return RankFiles(JOB_OUTPUT, folder / "stdout.log", folder / "stderr.log", folder / "error.json")

    def python_rank_dir(self) -> Path:
        """Where a single-process mode's output goes: torchrun's shape, id "python"."""
        return self.logs_dir / "python" / "attempt_0" / "0"

    # ---- discovery (files appear while the run goes) -------------------------

    def event_files(self, trainers: bool = False) -> dict[int, Path]:
        """Global rank -> its event file, for the files that exist now (``trainers``: pid -> a
        trainer's file)."""
        found = {}
        pattern = _TRAINER_FILE if trainers else _RANK_FILE
        for entry in entries(self.events_dir):
            name = entry.name
            match = pattern.fullmatch(name)
            if match:
                found[int(match.group(1))] = self.events_dir / name
        return found

    def first_spec(self) -> tuple[Path, int | None]:
        """The run's marker and its node: spec.json; where the nodes of a job share the folder and
        none wrote it, the lowest node's spec-node<N>.json (spec.json's path when neither is there)."""
        plain_spec = RunDir(self.path).spec_path
        if plain_spec.exists() or plain_spec.is_symlink():
            return plain_spec, None
        nodes = self.node_specs()
        return (RunDir(self.path, min(nodes)).spec_path, min(nodes)) if nodes else (plain_spec, None)

    def node_specs(self) -> set[int]:
        """The nodes whose own spec (spec-node<N>.json) is in the shared folder now: one bounded
        listing, however many nodes a spec claims."""
        return {int(m.group(1)) for e in entries(self.path) if (m := _NODE_SPEC.fullmatch(e.name))}

    def rank_files(self, local_ranks: int | None = None) -> dict[int, RankFiles]:
        """Local rank -> its log files in the latest attempt, for the ranks started so far (below
        ``local_ranks`` when given: a rank may make a thousand folders, none of which is read).
        The launcher's ``<run id>/attempt_<N>/<local rank>/`` folders only: links, files and names
        that are not ASCII numbers are passed over."""
        latest: dict[int, tuple[int, Path]] = {}
        for launch in entries(self.logs_dir):
            if not launch.is_dir(follow_symlinks=False):
                continue
            for attempt_dir in entries(Path(launch.path)):
                number = attempt_dir.name.removeprefix("attempt_")
                if number == attempt_dir.name or not _number(number):
                    continue
                if not attempt_dir.is_dir(follow_symlinks=False):
                    continue
                attempt = int(number)
                for rank_dir in entries(Path(attempt_dir.path)):
                    if not _number(rank_dir.name) or not rank_dir.is_dir(follow_symlinks=False):
                        continue
                    local = int(rank_dir.name)
                    if local_ranks is not None and local >= local_ranks:
                        continue
                    if local not in latest or latest[local][0] < attempt:
                        latest[local] = (attempt, Path(rank_dir.path))
        return {
            local: RankFiles(local, d / "stdout.log", d / "stderr.log", d / "error.json")
            for local, (_, d) in sorted(latest.items())
        }

    # ---- JSON documents ----------------------------------------------------

    def write_json(self, path: Path, document: Any) -> None:
        """Write atomically, so a reader never sees half a file; on failure (a full disk, say)
        no temporary file is left behind, and RunDirError says why in one sentence."""
        try:
            write_atomic(path, dumps(document, indent=2) + "\n")
        except OSError as exc:
            raise RunDirError(f"cannot write {path}: {exc.strerror or exc}.") from None

    def discard(self) -> None:
        """Remove a run directory that never ran (what it holds is ours: spec.json, our log)."""
        for path in (self.spec_path, self.spec_path.with_suffix(".json.tmp"), self.path / "mgpu-tui.log"):
            path.unlink(missing_ok=True)
        for folder in (self.events_dir, self.path):  # only when empty: another node may share them
            try:
                folder.rmdir()
            except OSError:
                pass

    def open_launcher_output(self, *, one_process: bool, command: bool = False):
        """(stdout, stderr) for the launcher, opened for writing: ``launcher.log`` for torchrun;
        for a one-process mode, whose process is rank 0 itself, where torchrun would put a rank's;
        for a command (mgpu-tui exec), its own files. RunDirError when they cannot be made (a full
        disk, a folder made read-only meanwhile)."""
        try:
            self.logs_dir.mkdir(parents=True, exist_ok=True)
            if command:
                files = self.command_output()
                files.stdout.parent.mkdir(exist_ok=True)
                return open(files.stdout, "wb"), open(files.stderr, "wb")
            if not one_process:
                out = open(self.launcher_log, "wb")
                return out, out
            rank_dir = self.python_rank_dir()
            rank_dir.mkdir(parents=True, exist_ok=True)
            return open(rank_dir / "stdout.log", "wb"), open(rank_dir / "stderr.log", "wb")
        except OSError as exc:
            raise RunDirError(f"cannot write the run's logs in {self.path}: {exc.strerror or exc}.") from None

    def require_room(self, min_bytes: int) -> None:
        """RunDirError unless the disk holds at least ``min_bytes`` free for the run's files."""
        free = self.free_bytes()
        if free is not None and free < min_bytes:
            raise RunDirError(
                f"the disk that holds {self.path.parent} has {free >> 10} KiB free; a run "
                f"needs at least {min_bytes >> 20} MiB for its logs."
            )

    def free_bytes(self) -> int | None:
        """Space left for the run's files on the disk that holds them (None when unknown)."""
        try:
            st = os.statvfs(self.path)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize


def is_spec_file(name: str) -> bool:
    """Whether a file of the folder is a run's marker: spec.json, or a node's spec-node<N>.json."""
    return _SPEC_FILE.fullmatch(name) is not None


def stacks_file(stacks_dir: Path | str, rank: int, trainer: bool = False) -> Path:
    """A rank's stacks in a run's ``stacks_dir`` (a stall keeps the folder's path); a trainer's by pid."""
    return Path(stacks_dir) / f"{'trainer' if trainer else 'rank'}{rank}.txt"


def params_path(folder: Path | str, rank: int) -> Path:
    """A rank's trained parameters in ``folder`` (the run's params_dir, given to a demo by
    --save-params; run/verify.py compares them)."""
    return Path(folder) / f"rank{rank}.pt"


def params_files(folder: Path) -> list[Path]:
    """Every rank's parameters saved in ``folder``, by name."""
    return sorted(Path(e.path) for e in entries(folder) if _PARAMS_FILE.fullmatch(e.name))


def smoke_folder(smoke_dir: Path, mode: str) -> Path:
    """--check's smoke run of ``mode`` (its params/ as a run's)."""
    return Path(smoke_dir) / mode


def monitor_record_path(lock: Path) -> Path:
    """The record beside a run's monitor lock (monitor.json): the monitor's account of itself."""
    return lock.with_suffix(".json")


def _number(name: str) -> bool:
    """An ASCII number of at most 7 digits ("²" is a digit to str.isdigit, not to int)."""
    return name.isascii() and name.isdigit() and len(name) <= 7

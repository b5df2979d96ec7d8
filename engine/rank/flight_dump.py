"""A rank's flight records and Python stacks, written by a thread of its own: every FR_PERIOD_S
unasked (who arrives late at the collectives), and at once when the engine asks (a file it
polls, never a signal), also while the main thread hangs inside a collective."""

from __future__ import annotations

import faulthandler
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mgpu_tui.engine.protocol.rundir import FR_REQUEST, STACKS_REQUEST, RunDir
from mgpu_tui.engine.rank.threads import stop_before_exit

# The flight recorder's entries a dump keeps, and the fields of each the engine reads.
FR_ENTRIES = 64


FR_FIELDS = (
    "collective_seq_id",
    "profiling_name",
    "process_group",
    "input_sizes",
    "input_dtypes",
    "output_sizes",
    "state",
    "time_created_ns",
    "duration_ms",  # NCCL with TORCH_NCCL_ENABLE_TIMING: how long the collective ran on the GPU
)


FR_POLL_S = 0.5


FR_PERIOD_S = 5.0  # unasked, a dump this often: when ranks enter their collectives names stragglers


class FlightRecorderDump:
    """Answers the engine's request for this rank's flight-recorder trace (its recent collectives).

    A rank that hangs is blocked inside a collective or elsewhere in C code, where no Python
    signal handler runs; so a thread of its own looks, every FR_POLL_S, for the engine's request
    file (``requests/fr``) and writes ``fr/rank<N>.json`` from torch's own recorder. Nothing is
    imported: if the rank's program has not imported torch, there is nothing to dump.

    A trainer (``trainer``: its pid; a process that trains with no process group) has no flight
    records: it answers the stack request alone, into its own file. ``thread()`` names the thread
    that trains, put first in the stacks (the main thread where it gives none).
    """

    def __init__(self, run_dir: Path, rank: int, *, trainer: int | None = None) -> None:
        folder = RunDir(run_dir)
        self.request = folder.request_path(FR_REQUEST)
        self.stacks_request = folder.request_path(STACKS_REQUEST)
        self.stacks_out = folder.stacks_path(rank) if trainer is None else folder.stacks_path(trainer, True)
        self.thread: Callable[[], int | None] = lambda: None
        self._stacks_answered: float | None = None
        self.out = folder.flight_record_path(rank) if trainer is None else None
        self.torch_out = folder.torch_dump_path(rank)
        self.readable_out = folder.torch_dump_path(rank, readable=True)
        self._answered: float | None = None
        self._stopped = threading.Event()
        self._dumping = threading.Lock()  # the thread's dumps and the bootstrap's, one at a time
        self._thread = threading.Thread(target=self._loop, name="mgpu-fr", daemon=True)
        self._thread.start()
        stop_before_exit(self.stop)

    def stop(self) -> None:
        """Stop the thread, and wait for a dump in flight: one still inside torch while the
        interpreter shuts down (a daemon thread goes on in C++ code) aborts the process."""
        self._stopped.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        last = time.monotonic()
        while not self._stopped.wait(FR_POLL_S):
            self._answer_stacks()
            try:
                asked = self.request.stat().st_mtime
            except OSError:
                asked = None
            requested = asked is not None and asked != self._answered
            if self.out is not None and (requested or time.monotonic() - last >= FR_PERIOD_S):
                self._answered = asked
                last = time.monotonic()
                with self._dumping:
                    self._dump(keep_older=not requested)
                    if requested:
                        self._dump_as_torch_does()

    def _answer_stacks(self) -> None:
        """Every thread's Python stack into stacks/rank<N>.txt, when the engine asked since the last
        answer: from this thread, with no signal, so a script's own SIGUSR2 handler (a preemption
        handler) or its reset of SIGUSR2 is never touched. A main thread waiting in a collective, a
        sleep or a data loader lets this thread run; one stuck in C code holding the interpreter
        does not, and the engine says it did not answer."""
        try:
            asked = self.stacks_request.stat().st_mtime
        except OSError:
            return
        if asked == self._stacks_answered:
            return
        self._stacks_answered = asked
        try:
            self.stacks_out.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.stacks_out.with_name(self.stacks_out.name + ".tmp")
            main = threading.main_thread().ident or 0
            training = self.thread()
            if training is None or training == main or training not in sys._current_frames():
                training = None
            first = f"training thread 0x{training:016x}" if training else f"main thread 0x{main:016x}"
            with open(tmp, "w") as f:  # the thread to read first: the one that trains
                f.write(first + "\n")
                f.flush()
                faulthandler.dump_traceback(file=f, all_threads=True)
            tmp.replace(self.stacks_out)
        except (OSError, ValueError, RuntimeError):
            return

    def dump_now(self) -> None:
        if self.out is None:
            return
        with self._dumping:
            self._dump(keep_older=True)

    def _dump(self, keep_older: bool = False) -> None:
        """``keep_older``: an unasked dump with no entries (the process group already gone, at the
        end) does not replace the last one that had some."""
        assert self.out is not None
        c10d = getattr(getattr(sys.modules.get("torch"), "_C", None), "_distributed_c10d", None)
        dump = getattr(c10d, "_dump_fr_trace_json", None)
        if dump is None:
            return
        try:
            entries = json.loads(dump(includeCollectives=True, onlyActive=False)).get("entries") or []
            document: dict[str, Any] = {
                "entries": [{k: e.get(k) for k in FR_FIELDS} for e in entries[-FR_ENTRIES:]]
            }
        except Exception as exc:  # noqa: BLE001 (said to the engine; the rank's own work goes on)
            document = {"entries": [], "error": f"{type(exc).__name__}: {exc}"[:300]}
        if keep_older and not document["entries"] and self.out.exists():
            return
        _write_whole(self.out, json.dumps({**document, "t_ns": time.time_ns()}).encode())

    def _dump_as_torch_does(self) -> None:
        """torch's own pickle, its bytes unchanged (stack traces off: they cost, and fr_trace needs
        none), for ``fr_trace``; mgpu-tui itself never unpickles it."""
        c10d = getattr(getattr(sys.modules.get("torch"), "_C", None), "_distributed_c10d", None)
        dump = getattr(c10d, "_dump_fr_trace", None)
        if dump is None:
            return
        try:
            data = dump(includeCollectives=True, includeStackTraces=False, onlyActive=False)
        except Exception:  # noqa: BLE001 (the JSON dump beside it says why, if anything does)
            return
        _write_whole(self.torch_out, data)
        readable = _with_named_groups(data)
        if readable is not None:
            _write_whole(self.readable_out, readable)


def _with_named_groups(data: bytes) -> bytes | None:
    """torch's dump with its pg_config rebuilt from this rank's own process groups (name, description,
    global ranks), where torch left a group unnamed (gloo); None when it needs no help or cannot get it.
    The bytes are this process's own, just made by torch: unpickling them here trusts no one else."""
    try:
        import pickle

        document = pickle.loads(data)
        if "" not in document.get("pg_config", {}):
            return None
        world = sys.modules["torch.distributed.distributed_c10d"]._world
        config = {}
        for group, name in world.pg_names.items():
            ranks = sorted(world.pg_group_ranks.get(group, {}))
            desc = getattr(group, "group_desc", "") or name
            config[name] = {"name": name, "desc": desc, "ranks": str(ranks)}
        if not config:
            return None
        document["pg_config"] = config
        return pickle.dumps(document)
    except Exception:  # noqa: BLE001 (a torch whose internals differ: the unchanged dump stays)
        return None


def _write_whole(path: Path, data: bytes) -> None:
    """Write a file whole (a temporary file, then a rename): a reader never sees half of it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError:  # a full disk: the engine's watchdog says that one
        return

"""The reporter: how a rank tells mgpu-tui what it is doing.

Two lines in any training script (an unchanged script gets its steps, samples, loss and memory
from the bootstrap instead: bootstrap.py)::

    from mgpu_tui import Reporter
    reporter = Reporter()                                   # once, after init
    reporter.step(step, samples=len(batch), loss=loss)      # once per step

Under ``mgpu-tui run`` (which sets ``MGPU_RUN_DIR``) each call appends one JSON
line to ``events/rank<N>.jsonl``. Without it the reporter writes nothing and
prints a short progress line every few steps from rank 0, so the same script
runs unchanged under bare torchrun.

It imports no torch: a loss tensor is turned into a number with ``float()``,
which the caller would pay for anyway. A step event costs a few microseconds
(``python bench/run.py reporter`` measures it).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import traceback as traceback_module
from pathlib import Path
from typing import Any, TextIO

from mgpu_tui.engine.protocol import events
from mgpu_tui.engine.protocol.environment import RUN_DIR_ENV
from mgpu_tui.engine.rank.event_files import EventFiles
from mgpu_tui.engine.rank.flight_dump import FlightRecorderDump

# A progress line every tenth of the run, and at least this often: a long run's log is never silent.
PRINT_AT_LEAST_EVERY_S = 10.0


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return default


# Descriptors the reporter let go (a file the script's own file took the number of, a forked
# parent's): kept referenced for the process's life, so that no collection ever closes them.
_LET_GO: list[Any] = []

# In a script run's rank, the bootstrap's own reporter (ScriptReporter, below): a Reporter the
# script makes itself then speaks through it (one hello, one file, one stack handler) and its steps
# replace the ones the bootstrap counts.
_bootstrap: Reporter | None = None


class Reporter:
    """Writes one rank's events. Safe to use without a run directory."""

    _trainer: int | None = None  # a trainer's pid (ScriptReporter): its files are named by it
    _waits = False  # its step lines wait (event_files.FLUSH_S): the watch's, whose beats flush them

    def __init__(
        self,
        *,
        rank: int | None = None,
        local_rank: int | None = None,
        world_size: int | None = None,
        run_dir: str | os.PathLike | None = None,
        print_every: int | None = None,
        stream: TextIO | None = None,
    ) -> None:
        self.rank = _env_int("RANK", 0) if rank is None else rank
        self.local_rank = _env_int("LOCAL_RANK", self.rank) if local_rank is None else local_rank
        self.world_size = _env_int("WORLD_SIZE", 1) if world_size is None else world_size
        run_dir = os.environ.get(RUN_DIR_ENV) if run_dir is None else run_dir
        self.run_dir = Path(run_dir) if run_dir else None
        self.print_every = print_every
        self._stream = stream
        self._files: EventFiles | None = None  # its event files (event_files.py: bounded, however long)
        self._flight_recorder: FlightRecorderDump | None = None
        self._said_hello = False
        self._lock = threading.Lock()  # one line at a time: a thread of the bootstrap writes too
        self._host = _bootstrap if _bootstrap is not None and self.run_dir == _bootstrap.run_dir else None
        if self._host is not None:
            self._said_hello = True  # the bootstrap said it, with this process's pid
            self._host.adopt(self)
        elif self.run_dir is not None:
            trainer = self._trainer  # a trainer's files are named by its pid
            self._files = EventFiles(self.run_dir, self.rank, _LET_GO, trainer=trainer, waits=self._waits)
            self._flight_recorder = FlightRecorderDump(self.run_dir, self.rank, trainer=trainer)
        self._last = time.time()
        self._samples_since_print = 0
        self._time_at_print = self._last

    @property
    def recording(self) -> bool:
        """True when events go to a run directory."""
        return self._files is not None or (self._host is not None and self._host.recording)

    def dump_flight_records(self) -> None:
        """Dump the flight recorder now (the bootstrap does, before a script ends its process group)."""
        if self._flight_recorder is not None:
            self._flight_recorder.dump_now()

    def adopt(self, reporter: Reporter) -> None:
        """A Reporter of the script's own now speaks for this rank (the bootstrap's reporter hears it)."""

    def _write(self, kind: str, fields: dict[str, Any], now: float | None = None) -> None:
        if self._host is not None:
            self._host._write(kind, fields, now)
            return
        if self._files is None:
            return
        now = now or time.time()
        line = events.encode(kind, self.rank, now, fields)
        with self._lock:
            files = self._files
            if files is None:
                return
            try:
                files.write(line, kind, fields, now)
            except OSError as exc:
                self._unrecorded(exc)

    def flush(self) -> None:
        """The step events waiting (event_files.py's FLUSH_S) written now: the beat thread's, each beat,
        so that a rank that stops after a step has that step on record."""
        if self._host is not None:
            self._host.flush()
            return
        with self._lock:
            if self._files is not None:
                try:
                    self._files.flush(time.time())
                except OSError as exc:
                    self._unrecorded(exc)

    def _unrecorded(self, exc: OSError) -> None:
        """A full disk: the training goes on, unrecorded, and says so once."""
        self._files = None
        print(f"mgpu-tui reporter: events no longer recorded ({exc.strerror or exc})", file=sys.stderr)

    def hello(
        self,
        *,
        mode: str,
        device: str,
        device_uuid: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        """Say who this rank is. Call once, before the first step (a script that does not gets a
        plain hello with its first step, so the engine can ask for its stacks when it hangs)."""
        self._said_hello = True
        config = dict(config or {})
        if self.print_every is None:
            self.print_every = max(1, int(config.get("steps", 100)) // 10)
        if self._host is not None:  # the bootstrap said hello: what this one adds is what it runs on
            self._write("about", {"device": device, "device_uuid": device_uuid, "backend": None})
            return
        self._write(
            "hello",
            {
                "local_rank": self.local_rank,
                "world_size": self.world_size,
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "device": device,
                "device_uuid": device_uuid,
                "mode": mode,
                "config": config,
                # Whether a stack request is answered (by the thread that polls for it).
                "stacks": self._flight_recorder is not None,
            },
        )
        steps = config.get("steps")
        # Said at once, so a rank's log (and the app's log pane) shows it started, long before the
        # first progress line: a tenth of a long run can be minutes.
        self._print(
            f"{mode} on {device}, rank {self.rank} of {self.world_size}, pid {os.getpid()}"
            + (f", {int(steps):,} steps" if isinstance(steps, int) else "")
        )
        # Step time is measured from here, so the first step includes its own warm-up.
        self._last = self._time_at_print = time.time()

    def _print(self, message: str) -> None:
        """One line on stdout as ``[rank N] message``: every rank under the engine, rank 0 alone without.

        Under the engine every rank has its own log file, so each may print; under bare
        torchrun all ranks share one console, so only rank 0 does.
        """
        if not (self.recording or self.rank == 0):
            return
        stream = self._stream or sys.stdout
        # One write for the whole line: print() writes the newline apart, and another thread
        # of the script printing meanwhile would land between the two.
        stream.write(f"[rank {self.rank}] {message}\n")
        stream.flush()

    def step(
        self,
        step: int,
        *,
        samples: int,
        loss: Any = None,
        tokens: int = 0,
        mem_bytes: int | None = None,
        mem_peak_bytes: int | None = None,
        data_s: float | None = None,
        state_bytes: int | None = None,
        tensor_peak_bytes: int | None = None,
        parts: dict[str, float] | None = None,
        at: float | None = None,
        flops: int | None = None,
        recomputed_flops: int | None = None,
        observed: bool = False,
        aside_s: float = 0.0,
        memory_parts: dict[str, int] | None = None,
        activations_bytes: int | None = None,
        kept_graphs: int | None = None,
        kept_by: str | None = None,
    ) -> None:
        """Record the end of a training step.

        ``samples`` counts only samples that are new to the job on this rank.
        ``loss`` may be a float, a 0-d tensor or None (a tensor is detached first: no autograd
        warning, no graph kept). ``data_s``: of this step, the seconds spent before its compute
        (loading the batch): with it, a rank that arrives late at the step's collectives is named,
        and why (a straggler). ``parts``: seconds in each of the step's parts (STEP_PARTS), where
        they were measured. ``at``: when the step ended (``time.time()``), if not now. ``flops``: the
        step's floating-point operations on this rank, where counted (rank/watch/flops/), without the
        activations it recomputed, which are ``recomputed_flops``; ``observed``: its FLOPs were counted
        as it ran, which slowed it (the figures leave its time out); ``aside_s``: seconds of
        mgpu-tui's own work inside the step, left out of its time; ``memory_parts``: the bytes of
        each of MEMORY_PARTS it holds, ``activations_bytes``: those saved for backward, ``kept_graphs``
        and ``kept_by``: earlier steps' losses still alive with their graphs (a leak; events.py).
        """
        if not self._said_hello and self._files is not None:
            self._quiet_hello()
        now = time.time() if at is None else at
        step_s = max(0.0, now - self._last - aside_s)
        self._last = now
        detach = getattr(loss, "detach", None)
        loss_value = None if loss is None else float(detach() if detach is not None else loss)
        self._write(
            "step",
            {
                "step": step,
                "samples": samples,
                "tokens": tokens,
                "loss": loss_value,
                "step_s": step_s,
                "mem_bytes": mem_bytes,
                "mem_peak_bytes": mem_peak_bytes,
                **({"data_s": data_s} if data_s is not None else {}),
                **({"state_bytes": state_bytes} if state_bytes is not None else {}),
                **({"tensor_peak_bytes": tensor_peak_bytes} if tensor_peak_bytes is not None else {}),
                **({"parts": {k: round(v, 6) for k, v in parts.items()}} if parts is not None else {}),
                **({"flops": int(flops)} if flops is not None else {}),
                **({"recomputed_flops": int(recomputed_flops)} if recomputed_flops else {}),
                **({"observed": True} if observed else {}),
                **({"memory_parts": memory_parts} if memory_parts is not None else {}),
                **({"activations_bytes": activations_bytes} if activations_bytes is not None else {}),
                **({"kept_graphs": kept_graphs, "kept_by": kept_by} if kept_graphs else {}),
            },
            now,
        )
        self._samples_since_print += samples
        every = self.print_every or 10
        if step % every == 0 or now - self._time_at_print >= PRINT_AT_LEAST_EVERY_S:
            rate = self._samples_since_print / max(now - self._time_at_print, 1e-9)
            loss_text = "n/a" if loss_value is None else f"{loss_value:.4f}"
            self._print(f"step {step}  loss {loss_text}  {rate:,.0f} samples/s")
            self._samples_since_print = 0
            self._time_at_print = now

    def _quiet_hello(self) -> None:
        """The hello of a script that did not say one: who it is, written, not printed."""
        self._said_hello = True
        self._write(
            "hello",
            {
                "local_rank": self.local_rank,
                "world_size": self.world_size,
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "device": "unknown",
                "device_uuid": None,
                "mode": "script",
                "config": {},
                "stacks": self._flight_recorder is not None,
            },
        )

    def done(self, steps: int, **summary: Any) -> None:
        """Record that this rank finished all its steps."""
        self._write("done", {"steps": steps, **summary})

    def error(self, message: str, traceback: str = "", **exception: Any) -> None:
        """Record why this rank is about to fail (``exception``: the bootstrap's type and
        whole_message, and an out-of-memory's figures, events.py)."""
        self._write("error", {"message": message, "traceback": traceback, **exception})

    def abandon(self) -> None:
        """In a forked child: let go of the parent's rank without a word (its file stays the
        parent's, the parent's flight-recorder thread was not copied) and of its stack handler."""
        global _bootstrap
        if self._files is not None:
            self._files.let_go()  # the parent's: never closed (nor flushed) from here
        self._files = None
        self._flight_recorder = None
        self._host = None
        if _bootstrap is self:
            _bootstrap = None

    def close(self) -> None:
        global _bootstrap
        if _bootstrap is self:  # a Reporter the script makes later speaks for itself
            _bootstrap = None
        if self._flight_recorder is not None:
            self._flight_recorder.stop()
            self._flight_recorder = None
        with self._lock:
            files, self._files = self._files, None
            if files is not None:
                files.close()  # a file whose number is the script's now is never closed from here

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is not None and not isinstance(exc, KeyboardInterrupt):
            self.error(
                f"{exc_type.__name__}: {exc}",
                "".join(traceback_module.format_exception(exc_type, exc, tb)),
            )
        self.close()


class ScriptReporter(Reporter):
    """The reporter of a script that does not know mgpu-tui: it prints nothing (the script's own
    output stays its own) and says what the script used (``about``) and that it moves (``beat``).
    Made, it is the rank's one reporter: a Reporter the script makes speaks through it. A trainer's
    (``trainer``: a process that trains with no process group, mgpu-tui exec) writes its own file,
    named by its pid, as rank 0 of a job of its own."""

    _waits = True

    def __init__(self, *, trainer: bool = False, **kwargs: Any) -> None:
        if trainer:
            self._trainer = os.getpid()
        super().__init__(**kwargs)
        global _bootstrap
        _bootstrap = self

    def _print(self, message: str) -> None:
        return

    def about(self, **fields: Any) -> None:
        self._write("about", fields)

    def beat(self, where: str | None) -> None:
        self._write("beat", {"where": where})

    def follow_thread(self, thread: Any) -> None:
        """``thread()``: the thread that trains, whose stack is put first when the engine asks."""
        if self._flight_recorder is not None:
            self._flight_recorder.thread = thread

    def adopt(self, reporter: Reporter) -> None:
        self.script_reports_steps = True

    script_reports_steps = False  # the script made a Reporter: its steps are the rank's, not ours

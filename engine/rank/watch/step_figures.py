"""A script rank's figures, read from torch once a step is counted (script_watch.py counts it): the
batch's size, the loss without draining the GPU's stream, the memory, the steps written in order
once their loss is known, and what the rank ran on (``about``)."""

from __future__ import annotations

import collections
import contextlib
import os
import resource
import threading
import time
from dataclasses import dataclass
from typing import Any

from mgpu_tui.engine.rank import event_files
from mgpu_tui.engine.rank.watch.flops import Counted, StepFlops
from mgpu_tui.engine.rank.watch.model_root import LOADER_SOURCE
from mgpu_tui.engine.rank.watch.wrapping import backend_for

MAX_PENDING = 64  # steps whose loss the GPU has not delivered yet; beyond this, read at once
READ_EVERY_S = 0.05  # the process's memory (the CPU's): a step reads it at most this often


@dataclass
class Step:
    step: int
    at: float
    samples: int
    tokens: int
    data_s: float | None
    mem: tuple[int | None, int | None]
    loss: Any  # a float, None, or (pinned tensor, CUDA event) until the GPU has delivered it
    parts: dict[str, float] | None  # where its time went (step_clock.py); None for the first
    counted: Counted  # its floating-point operations, counted as it ran (flops/)
    accounted: dict[str, int] | None = None  # the bytes of what the rank holds (memory/accounting.py)
    activations: int | None = None  # an observed step's bytes saved for backward (memory/saved.py)
    kept_graphs: int | None = None  # earlier steps' losses still alive with their graphs (memory/creep.py)
    kept_by: str | None = None


def first_tensor(values: tuple, depth: int = 0) -> Any:
    """The first tensor among ``values`` (looking into lists, tuples and dicts, not deeply)."""
    for value in values:
        if hasattr(value, "dim") and hasattr(value, "shape") and hasattr(value, "is_floating_point"):
            return value
        if depth < 2 and isinstance(value, (list, tuple)):
            found = first_tensor(tuple(value), depth + 1)
        elif depth < 2 and isinstance(value, dict):
            found = first_tensor(tuple(value.values()), depth + 1)
        else:
            continue
        if found is not None:
            return found
    return None


def batch_size(batch: Any) -> tuple[int, int] | None:
    """(samples, tokens) of a batch: its first dimension, and for a 2-D integer batch (token ids)
    all its elements as tokens; None for no batch (no tensor, or a scalar)."""
    if batch is None or batch.dim() == 0:
        return None
    tokens = (
        batch.numel() if batch.dim() == 2 and not batch.is_floating_point() and not batch.is_complex() else 0
    )
    return int(batch.shape[0]), int(tokens)


def loss_of(torch: Any, losses: list[Any]) -> Any:
    """The step's loss, the sum of its micro-batches': a float, or on a GPU (a non-blocking copy
    into pinned memory, its CUDA event) to be read once the event has completed."""
    if not losses:
        return None
    try:
        total = losses[0].float() if len(losses) == 1 else torch.stack([x.float() for x in losses]).sum()
        if total.device.type != "cuda":
            return float(total)
        copy = torch.empty((), dtype=torch.float32, pin_memory=True)
        copy.copy_(total, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        return copy, done
    except Exception:  # noqa: BLE001 (an odd loss, a device gone: the step is still counted)
        return None


class Memory:
    """(now, peak) bytes: the CUDA allocator's on ``device`` once the script initialised CUDA (never
    the watch: it would open a context on GPU 0 in every rank); else the process's RSS and its peak
    (the kernel's high-water mark, exact whenever it is read).

    The RSS is read from /proc/self/statm through a descriptor kept open: opening it each step cost
    the step ten times the read (bench/run.py job-costs). /proc/self is the process that opened it,
    so a forked child makes its own (``close`` in the child, ScriptWatch.after_fork_in_child); a
    descriptor the script closed, or closed and reused for a file of its own, is let go (never
    closed by us: the number is the script's) and opened again."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._id: tuple[int, int] | None = None  # (st_dev, st_ino) of the statm it opened
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._last: tuple[int | None, int | None] | None = None  # the process's, read at _read_at
        self._read_at = 0.0

    def read(self, torch: Any, device: Any, fresh: bool = False) -> tuple[int | None, int | None]:
        """(now, peak); the process's read at most every READ_EVERY_S unless ``fresh`` (three system
        calls, tens of microseconds in a busy process): its peak, the kernel's high-water mark, is
        exact whenever it is read, so the end's (``fresh``) is the run's."""
        if device is not None and device.type == "cuda" and torch.cuda.is_initialized():
            return torch.cuda.memory_allocated(device), torch.cuda.max_memory_allocated(device)
        now = time.monotonic()
        if fresh or self._last is None or now - self._read_at >= READ_EVERY_S:
            self._last = self._rss(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            self._read_at = now
        return self._last

    def _rss(self) -> int | None:
        for _ in range(2):  # a descriptor no longer ours: once more, opened anew
            try:
                if self._fd is None:
                    self._fd = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
                    info = os.fstat(self._fd)
                    self._id = (info.st_dev, info.st_ino)
                else:
                    info = os.fstat(self._fd)
                    if (info.st_dev, info.st_ino) != self._id:
                        self._fd = None  # the script's file now: let go, never read or closed
                        continue
                return int(os.pread(self._fd, 128, 0).split()[1]) * self._page
            except (OSError, ValueError, IndexError):
                self._fd = None
        return None

    def close(self) -> None:
        """A forked child's copy of its parent's descriptor (its parent's statm) closed: it reads its own."""
        fd, self._fd, self._last = self._fd, None, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


class PendingSteps:
    """Steps counted and not written yet: each waits for its loss from the GPU, and they are
    written in order (a step's event is recorded when its loss is known), together once
    event_files.FLUSH_S passed (:meth:`due`): a step's event made alone, between two steps of the
    script, cost it ten times its making in a loop. The beat thread writes them too (a script that
    stopped after a step): a lock keeps them in order."""

    def __init__(self) -> None:
        self._steps: collections.deque[Step] = collections.deque()
        self._lock = threading.Lock()
        self.written_at = 0.0  # when they were last written (time.time())

    def due(self, now: float) -> bool:
        """Whether to write now: FLUSH_S passed, or more wait than MAX_PENDING."""
        return now - self.written_at >= event_files.FLUSH_S or len(self._steps) > MAX_PENDING

    def __len__(self) -> int:
        return len(self._steps)

    def add(self, step: Step) -> None:
        self._steps.append(step)

    def clear(self) -> None:
        self._steps.clear()

    def write_ready(self, reporter: Any, wait: bool = False) -> bool:
        """Write the steps whose loss is known, in order (``wait``: the oldest, whatever it takes);
        whether one was written. With no reporter, or a script that reports its own steps, they
        are let go unwritten."""
        with self._lock:
            self.written_at = time.time()
            return self._write_ready(reporter, wait)

    def _write_ready(self, reporter: Any, wait: bool) -> bool:
        wrote = False
        while self._steps:
            step = self._steps[0]
            if isinstance(step.loss, tuple):
                copy, done = step.loss
                if not (wait or done.query()):
                    return wrote
                done.synchronize()
                step.loss = float(copy)
            self._steps.popleft()
            wait = False
            mem, peak = step.mem
            if mem is not None and peak is not None:
                peak = max(peak, mem)  # the kernel's peak RSS lags its current one a little
            if reporter is None or reporter.script_reports_steps:
                continue
            reporter.step(
                step.step,
                samples=step.samples,
                tokens=step.tokens,
                loss=step.loss,
                mem_bytes=mem,
                mem_peak_bytes=peak,
                data_s=step.data_s,
                parts=step.parts,
                at=step.at,
                flops=step.counted.flops,
                recomputed_flops=step.counted.recomputed or None,
                observed=step.counted.observed,
                memory_parts=step.accounted,
                activations_bytes=step.activations,
                kept_graphs=step.kept_graphs,
                kept_by=step.kept_by,
            )
            wrote = True
        return wrote


def about_fields(
    torch: Any,
    device_seen: Any,
    backend: str | None,
    *,
    batch: int,
    batch_source: str | None,
    loader_workers: int | None,
    counted: StepFlops | None,
) -> dict[str, Any]:
    """What the rank ran on: its device (the loss's), its GPU's identity, the process group's
    backend, its batch (where it was counted), its DataLoader's workers and how its FLOPs were
    counted."""
    device, uuid = "unknown", None
    if device_seen is None:
        # No loss seen (no backward yet, or none at all): a process that never started CUDA ran
        # on the CPU; one that did may have used either, so it is not said (a script that failed
        # in its first forward on a GPU was called a CPU run).
        device = "unknown" if torch.cuda.is_initialized() else "cpu"
    elif device_seen.type == "cuda" and torch.cuda.is_initialized():
        index = device_seen.index if device_seen.index is not None else torch.cuda.current_device()
        device, uuid = f"cuda:{index}", f"GPU-{torch.cuda.get_device_properties(index).uuid}"
    else:
        device = str(device_seen)
    fields: dict[str, Any] = {"device": device, "device_uuid": uuid, "backend": backend_for(backend, device)}
    if batch and batch_source:
        fields.update(batch=batch, batch_source=batch_source)
    if loader_workers is not None:
        fields["loader_workers"] = loader_workers
    if device.startswith("cuda:"):
        fields["device_name"] = torch.cuda.get_device_name(int(device.split(":")[1]))
    if counted is not None:
        if counted.precision is not None:
            fields["precision"] = counted.precision
        if counted.note is not None:
            fields["flops_note"] = counted.note
    return fields


class Lead:
    """Which optimizer's step is the iteration's: the first to step leads. Several optimizers (a
    GAN's two), or a ZeroRedundancyOptimizer and the one inside it, count once an iteration; should
    another step twice while the lead does not, it leads from then on."""

    def __init__(self) -> None:
        self._lead: int | None = None  # id() of the leading optimizer
        self._others: dict[int, int] = {}  # id() of another optimizer -> its steps since the lead's

    def leads(self, optimizer: Any) -> bool:
        """Whether ``optimizer``'s step (now) is the iteration's."""
        key = id(optimizer)
        if self._lead is None or key == self._lead:
            self._lead = key
            self._others.clear()
            return True
        self._others[key] = self._others.get(key, 0) + 1
        if self._others[key] >= 2:  # the lead stopped stepping: this one leads now
            self._lead = key
            self._others.clear()
            return True
        return False


class StepBatch:
    """What the step under way trained on: the batches its root's forward (or a framework's
    training step: frameworks.py) counted, else those its training DataLoaders gave; and when the
    first one entered the model (the step's data time runs from the last step to then)."""

    def __init__(self, source: str) -> None:
        self._whole_source = source  # where a framework's training step counted the batch
        self._since = time.time()
        self._clear()

    def _clear(self) -> None:
        self.samples = self.tokens = 0
        self._loader_samples = self._loader_tokens = 0
        self._first_at: float | None = None
        self._whole = False  # this step's batch was counted at a framework's training step

    def count(self, args: tuple, kwargs: dict, *, whole: bool = False) -> None:
        """A training forward's batch: its first tensor's first dimension, and for token ids all
        its elements as tokens."""
        batch = first_tensor(args)
        if batch is None:
            batch = first_tensor(tuple(kwargs.values()))
        size = batch_size(batch)
        if size is None:
            return
        self.samples += size[0]
        self.tokens += size[1]
        self._whole = self._whole or whole
        if self._first_at is None:
            self._first_at = time.time()

    def loader(self, batch: Any) -> None:
        """A batch a DataLoader gave while gradients are on."""
        size = batch_size(first_tensor((batch,)))
        if size is not None:
            self._loader_samples += size[0]
            self._loader_tokens += size[1]

    def take(self, now: float, root_source: str | None) -> tuple[int, int, str | None, float | None]:
        """The step's (samples, tokens, where they were counted, data_s), and a new step from now."""
        samples, tokens = self.samples, self.tokens
        source = self._whole_source if self._whole else root_source
        if not samples and self._loader_samples:  # no model's forward counted them: the loader's
            samples, tokens, source = self._loader_samples, self._loader_tokens, LOADER_SOURCE
        data_s = None if self._first_at is None else max(0.0, self._first_at - self._since)
        self._since = now
        self._clear()
        return samples, tokens, source, data_s

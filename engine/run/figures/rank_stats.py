"""One rank's figures: what is shown of it (RankStats), read from its track (whole_run.py: every event
of it as it arrives, kept as the figures need it, bounded however long the run)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from mgpu_tui.engine.run.figures.long_run.whole_run import RankTrack as RankTrack  # its first home
from mgpu_tui.engine.run.figures.mfu import Compute
from mgpu_tui.engine.run.memory.memory_parts import MemoryParts


@dataclass(frozen=True)
class RankStats:
    rank: int
    last_step: int
    samples_per_s: float | None
    loss: float | None  # at its last step
    mem_bytes: int | None
    mem_peak_bytes: int | None
    last_event_t: float | None
    done: bool
    error: str | None
    device: str | None
    pid: int | None
    state_bytes: int | None = None  # its parameters, gradients and optimizer state, as it measured them
    tensor_peak_bytes: int | None = None  # the peak of its live tensors (CPU: torch's MemTracker)
    backend: str | None = None  # its default process group's, as a script's bootstrap saw it
    batch: int | None = None  # samples a step, where a script's bootstrap counted them
    batch_source: str | None = None
    where: str | None = None  # a script's rank: where its main thread was at its latest beat
    device_uuid: str | None = None
    # How it ended, beyond done: the process group at its end ("alive", "destroyed", "none"), if said.
    process_group: str | None = None
    tokens_per_s: float | None = None  # where it counts tokens (a GPT's, a script's token ids)
    collectives: int | None = None  # the collectives it entered, as its flight records say (ingest.py)
    diverged_at: int | None = None  # the first step whose loss was NaN or infinite: no loss, diverged
    compute: Compute | None = None  # its TF/s and MFU, where it counted its steps' FLOPs (mfu.py)
    step_s: float | None = None  # its mean step time over its steady steps (aggregate.py)
    memory_parts: MemoryParts | None = None  # where its memory goes, where it said (memory_parts.py)


def rank_stats_of(
    rank: int,
    t: RankTrack,
    rate: float | None,
    tokens_rate: float | None,
    compute: Compute | None,
    step_s: float | None = None,
) -> RankStats:
    """A rank's figures from its track, with its rates and compute over the steady steps."""
    about, hello = t.about, t.hello
    return RankStats(
        rank=rank,
        last_step=t.last_step,
        samples_per_s=rate,
        loss=found[0] if t.n and (found := t.loss_at(t.last_step)) else None,
        mem_bytes=t.mem_bytes,
        mem_peak_bytes=t.mem_peak_bytes,
        last_event_t=t.last_t,
        done=t.done is not None,
        error=t.error.message if t.error else None,
        device=about.device if about else hello.device if hello else None,
        pid=hello.pid if hello else None,
        state_bytes=t.state_bytes,
        tensor_peak_bytes=t.tensor_peak_bytes,
        backend=about.backend if about else None,
        batch=_batch(t),
        batch_source=about.batch_source if about else None,
        where=t.where,
        device_uuid=about.device_uuid if about else hello.device_uuid if hello else None,
        process_group=_text(t.done.extra.get("process_group")) if t.done else None,
        tokens_per_s=tokens_rate,
        diverged_at=t.diverged_at,
        compute=compute,
        step_s=step_s,
        memory_parts=t.memory.figures(rank, t.mem_peak_bytes),
    )


BATCH_STEPS = 256  # the latest steps whose samples say a rank's batch


def _batch(t: RankTrack) -> int | None:
    """Samples a step, where a script's bootstrap counts them (it says so in its ``about``): the
    median of its latest steps after the first, which may differ from the rest (a DataLoader read
    ahead, gradient accumulation that steps after one micro-batch first, as accelerate's examples
    do), else the first step's, as the rank said it."""
    said = t.about.batch if t.about else None
    if said is None:
        return None
    steady = t.samples[max(0 if t.folded else 1, len(t.samples) - BATCH_STEPS) :]
    return int(statistics.median_low(steady)) or said if steady else said


def _text(value: object) -> str | None:
    """A short word a rank wrote in its ``done`` (unchecked by the schema): text, or nothing."""
    return value[:40] if isinstance(value, str) else None

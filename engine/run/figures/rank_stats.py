"""One rank's figures: its track (every event of it as it arrives, kept as the figures need it) and
what is shown of it (RankStats), read from the track."""

from __future__ import annotations

import statistics
from array import array
from dataclasses import dataclass, field

from mgpu_tui.engine.protocol.events import (
    About,
    Done,
    Error,
    Hello,
)
from mgpu_tui.engine.run.figures.mfu import Compute
from mgpu_tui.engine.run.memory.memory_parts import MemoryParts, MemoryTrack


@dataclass
class RankTrack:
    hello: Hello | None = None
    steps: array = field(default_factory=lambda: array("q"))
    samples: array = field(default_factory=lambda: array("q"))
    tokens: array = field(default_factory=lambda: array("q"))
    step_s: array = field(default_factory=lambda: array("d"))
    data_s: array = field(default_factory=lambda: array("d"))  # NaN where the step did not say
    flops: array = field(default_factory=lambda: array("d"))  # NaN where the step was not counted
    recomputed: array = field(default_factory=lambda: array("d"))  # FLOPs it ran again (not in flops)
    counted: bool = False  # some step of it said its FLOPs
    observed: set[int] = field(default_factory=set)  # the indexes of steps run under the FLOP count
    loss: dict[int, tuple[float, int]] = field(default_factory=dict)  # step -> (loss, samples)
    first_step_t: float | None = None
    step_offset: int = 0  # added to its steps: those of its earlier phases (a fit before a test)
    last_t: float | None = None
    mem_bytes: int | None = None
    mem_peak_bytes: int | None = None
    state_bytes: int | None = None  # parameters, gradients, optimizer state, as the rank measured them
    tensor_peak_bytes: int | None = None  # the peak of its live tensors, as it measured it
    done: Done | None = None
    error: Error | None = None
    about: About | None = None  # what a script really used (the bootstrap says it after its first step)
    where: str | None = None  # its main thread's place at its latest beat
    diverged_at: int | None = None  # the first step whose loss was NaN or infinite
    memory: MemoryTrack = field(default_factory=MemoryTrack)  # where its memory goes (memory_parts.py)


@dataclass(frozen=True)
class Steady:
    """A rank's steady steps (from ``lo`` on), without those run under the FLOP count (slowed by
    it: their FLOPs are counted, their time is not the job's)."""

    steps: list[int]
    step_s: list[float]
    samples: list[int]
    tokens: list[int]
    flops: list[float]
    recomputed: list[float]

    @classmethod
    def of(cls, t: RankTrack, lo: int) -> Steady:
        if not t.observed:
            return cls(*(list(values[lo:]) for values in _columns(t)))
        kept = [i for i in range(lo, len(t.steps)) if i not in t.observed]
        return cls(*([values[i] for i in kept] for values in _columns(t)))


def _columns(t: RankTrack) -> tuple[array, ...]:
    """A track's columns, in Steady's order."""
    return t.steps, t.step_s, t.samples, t.tokens, t.flops, t.recomputed


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
        last_step=t.steps[-1] if t.steps else 0,
        samples_per_s=rate,
        loss=t.loss[t.steps[-1]][0] if t.steps and t.steps[-1] in t.loss else None,
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
    steady = t.samples[max(1, len(t.samples) - BATCH_STEPS) :]
    return int(statistics.median_low(steady)) or said if steady else said


def _text(value: object) -> str | None:
    """A short word a rank wrote in its ``done`` (unchecked by the schema): text, or nothing."""
    return value[:40] if isinstance(value, str) else None

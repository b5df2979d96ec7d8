"""A rank's track over the whole run, bounded whatever its length (docs/long-runs.md).

A rank keeps its latest steps whole (its window: WINDOW steps, fewer a rank in a job of many:
:func:`window_for`) and folds the older ones, an eighth of a window at a time, into buckets, each
of a block of step numbers: their count, samples, seconds (sum, min, max) and loss (the sum weighted
by samples, the plain sum, min, max), while the job keeps its step times (job_times.py: in bins 2% wide,
protocol/long_run/digest.py). A long run's digests read back from its files (events.py's ``digest``)
go into the same buckets. At most BUCKETS buckets (fewer a rank in a job of many: buckets_for):
past that, neighbours merge and a block doubles. Its first HEAD steps are kept apart (the warm-up is
at most that many).

What this keeps exact whatever the run's length: every sum over the steady steps (a rank's samples/s,
tokens/s, step time, TF/s, MFU and HFU, the steps run under the FLOP count, ``observed``, left out: a running
sum from each step the warm-up may end at, added in the order the steps came, as ``sum()`` adds them), the
peaks, the first diverged step; and what is read from the latest steps (the recent series, the loss, the
batch, the stragglers, the anatomy).
What comes from the buckets once a run is longer than its window: the job's step-time median and
percentiles over the folded steps (the slowest rank's histogram: within 1%), and the whole-run chart's
points there (a point a bucket: its samples over its slowest rank's seconds). A run that fits in its
window has no bucket: its figures are worked out as they always were, from every step.
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mgpu_tui.engine.protocol.events import About, Digest, Done, Error, Hello
from mgpu_tui.engine.run.figures.long_run.job_times import JobTimes
from mgpu_tui.engine.run.memory.memory_parts import MemoryTrack

HEAD = 5  # the first steps kept apart: the warm-up is at most this many (aggregate.warmup_steps)
WINDOW = 16384  # steps a rank keeps whole
WINDOW_BUDGET = 1 << 17  # steps kept whole over every rank of a job
MIN_WINDOW = 1024  # (the stragglers look at the latest 500, the batch at 256)
FOLD_SHARE, MIN_FOLD = 8, 64  # folded at a time, once the window holds that many more: an eighth of it
BUCKETS, MIN_BUCKETS = 256, 32  # a rank's at most (fewer in a job of many: buckets_for)
BUCKET_BUDGET = 1 << 14  # over every rank of a job
BLOCK = 1024  # step numbers a bucket holds at first

# A bucket's figures, an array("d") of these: its first and last step, steps, samples; its seconds'
# sum, min, max; its loss's sum weighted by samples, its weight, its plain sum, count, min, max.
(FIRST, LAST, N, SAMPLES, SECONDS, LOW, HIGH) = range(7)
(LOSS_WEIGHTED, LOSS_WEIGHT, LOSS_SUM, LOSS_N, LOSS_LOW, LOSS_HIGH) = range(7, 13)


def window_for(ranks: int) -> int:
    """The steps a rank keeps whole in a job of ``ranks`` ranks."""
    return max(MIN_WINDOW, min(WINDOW, WINDOW_BUDGET // max(1, ranks)))


def fit(tracks: Iterable[RankTrack], sharers: int) -> None:
    """Each of ``tracks`` made its share of a job's memory, ``sharers`` tracks holding it together."""
    for t in tracks:
        t.fit(window_for(sharers), buckets_for(sharers))


def fold_for(window: int) -> int:
    return max(MIN_FOLD, window // FOLD_SHARE)


def buckets_for(ranks: int) -> int:
    """The buckets a rank keeps at most in a job of ``ranks`` ranks."""
    return min(BUCKETS, max(MIN_BUCKETS, BUCKET_BUDGET // max(1, ranks)))


def _sums() -> list[float]:
    return [0.0] * (HEAD + 1)


@dataclass(eq=False)
class RankTrack:
    hello: Hello | None = None
    # Its window: the latest steps, whole.
    steps: array = field(default_factory=lambda: array("q"))
    samples: array = field(default_factory=lambda: array("q"))
    step_s: array = field(default_factory=lambda: array("d"))
    data_s: array = field(default_factory=lambda: array("d"))  # NaN where the step did not say
    loss: array = field(default_factory=lambda: array("d"))  # NaN where the step had none
    observed: array = field(default_factory=lambda: array("b"))  # 1: it ran under the FLOP count
    counted: bool = False  # some step of it said its FLOPs
    n: int = 0  # steps in all
    folded: int = 0  # of them, older than the window (in its buckets)
    last_step: int = 0
    # From the lo-th step on (lo = 0..HEAD), in the order they came, the observed steps left out: seconds,
    # FLOPs, recomputed FLOPs, steps not counted; and the observed steps.
    seconds: list[float] = field(default_factory=_sums)
    flops_sums: list[float] = field(default_factory=_sums)
    recomputed: list[float] = field(default_factory=_sums)
    uncounted: list[int] = field(default_factory=lambda: [0] * (HEAD + 1))
    observed_n: list[int] = field(default_factory=lambda: [0] * (HEAD + 1))
    samples_total: int = 0  # (of its steps not observed, as tokens_total)
    tokens_total: int = 0
    head: list[tuple[int, int, float, int]] = field(default_factory=list)  # samples, tokens, step_s, step
    head_observed: list[bool] = field(default_factory=list)
    buckets: dict[int, array] = field(default_factory=dict)  # step // block -> its figures
    block: int = field(default_factory=lambda: BLOCK)
    digested: dict[int, int] = field(default_factory=dict)  # its digests' step times (a histogram)
    job: JobTimes | None = None  # where its folded steps' times go (the aggregator's)
    ordered: bool = True  # the window's steps rise (else a step number came again: a restart)
    window: int = field(default_factory=lambda: WINDOW)
    most: int = field(default_factory=lambda: BUCKETS)  # buckets at most
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

    # ---- taking steps in -----------------------------------------------------------------

    def add_step(
        self,
        step: int,
        samples: int,
        tokens: int,
        step_s: float,
        data_s: float,
        flops: float,
        loss: float,
        recomputed: float = 0.0,
        observed: bool = False,
    ) -> None:
        """One step (``data_s``, ``flops``, ``loss``: NaN where it said none; ``observed``: it ran under
        the FLOP count, left out of every steady sum)."""
        i, self.n = self.n, self.n + 1
        steps = self.steps
        if steps and step <= steps[-1]:
            self.ordered = False
        steps.append(step)
        self.samples.append(samples)
        self.step_s.append(step_s)
        self.data_s.append(data_s)
        self.loss.append(loss)
        self.observed.append(observed)
        self.last_step = step
        if i < HEAD:
            self.head.append((samples, tokens, step_s, step))
            self.head_observed.append(observed)
        if observed:
            for lo in range(min(i, HEAD) + 1):
                self.observed_n[lo] += 1
        else:
            self._add_steady(i, samples, tokens, step_s, flops, recomputed)
        if len(steps) > self.window + (fold := fold_for(self.window)):
            self.fold(fold)

    def _add_steady(self, i: int, samples: int, tokens: int, step_s: float, flops: float, again: float):
        """The ``i``-th step's figures added to the steady sums."""
        self.samples_total += samples
        self.tokens_total += tokens
        # Added to each sum from the lo-th step on, in the order they came, as sum() adds them (past
        # the head, to all of them: written out, as this is every step's cost).
        if i < HEAD:
            self._add_to(i + 1, step_s, flops, again)
        else:
            # fmt: off
            a = self.seconds
            a[0] += step_s; a[1] += step_s; a[2] += step_s; a[3] += step_s; a[4] += step_s; a[5] += step_s  # noqa: E702
            if again:
                r = self.recomputed
                r[0] += again; r[1] += again; r[2] += again; r[3] += again; r[4] += again; r[5] += again  # noqa: E702
            if flops == flops:
                b = self.flops_sums
                b[0] += flops; b[1] += flops; b[2] += flops; b[3] += flops; b[4] += flops; b[5] += flops  # noqa: E702
            else:
                c = self.uncounted
                c[0] += 1; c[1] += 1; c[2] += 1; c[3] += 1; c[4] += 1; c[5] += 1  # noqa: E702
            # fmt: on

    def _add_to(self, reach: int, seconds: float, flops: float, again: float) -> None:
        """A step's figures added to the sums from each of the first ``reach`` steps on."""
        for lo in range(reach):
            self.seconds[lo] += seconds
            self.recomputed[lo] += again
            if flops == flops:
                self.flops_sums[lo] += flops
            else:
                self.uncounted[lo] += 1

    def add_digest(self, d: Digest, offset: int = 0) -> None:
        """A digest of steps read back (a segment a reader passed over): they come after the window's."""
        self.fold(len(self.steps))
        self.n += d.n
        self.folded += d.n
        steady = d.steady or (d.n, d.samples, d.tokens, d.step_s[0], *d.flops)
        n, samples, tokens, seconds, flops, counted = steady
        for lo in range(HEAD + 1):
            self.seconds[lo] += seconds
            self.flops_sums[lo] += flops
            self.recomputed[lo] += d.recomputed
            self.uncounted[lo] += n - counted
            self.observed_n[lo] += d.n - n
        self.counted = self.counted or d.flops[1] > 0
        self.samples_total += samples
        self.tokens_total += tokens
        self.last_step = d.last + offset
        loss = d.loss or (0.0, 0.0, 0.0, 0, math.inf, -math.inf)
        figures = (d.first + offset, d.last + offset, d.n, d.samples, *d.step_s, *loss)
        self._merge(self.buckets, (d.last + offset) // self.block, array("d", figures))
        for b, count in d.hist:
            self.digested[b] = self.digested.get(b, 0) + count
        self._coarsen()

    def fit(self, window: int, most: int) -> None:
        """Its window and its buckets at most made these (its job has more ranks now): past them, folded."""
        self.window, self.most = window, most
        if len(self.steps) > window + fold_for(window):
            self.fold(len(self.steps) - window)
        self._coarsen()

    def fold(self, count: int) -> None:
        """The window's oldest ``count`` steps into their buckets, and their times (past the head) to
        the job's (JobTimes)."""
        count = min(count, len(self.steps))
        if not count:
            return
        start = 0
        while start < count:  # a run of steps of one block at a time (one, where steps came again)
            block = self.steps[start] // self.block
            end = start + 1
            if self.ordered:
                end = min(count, bisect.bisect_left(self.steps, (block + 1) * self.block, start, count))
            self._merge(self.buckets, block, self._bucket_of(start, max(end, start + 1)))
            start = max(end, start + 1)
        if self.job is not None:
            past = max(0, HEAD - self.folded)
            if not any(self.observed[past:count]):
                self.job.take(self.steps[past:count], self.step_s[past:count])
            else:
                kept = [i for i in range(past, count) if not self.observed[i]]
                self.job.take([self.steps[i] for i in kept], [self.step_s[i] for i in kept])
        for column in self._columns():
            del column[:count]
        self.folded += count
        if not self.ordered:
            self.ordered = all(a < b for a, b in zip(self.steps, self.steps[1:]))
        self._coarsen()

    def _columns(self) -> tuple[array, ...]:
        return (self.steps, self.samples, self.step_s, self.data_s, self.loss, self.observed)

    def _bucket_of(self, a: int, b: int) -> array:
        seconds = self.step_s[a:b]
        losses = [(x, w) for x, w in zip(self.loss[a:b], self.samples[a:b]) if x == x]
        values = [x for x, _ in losses]
        return array(
            "d",
            (
                self.steps[a], self.steps[b - 1], b - a, sum(self.samples[a:b]),
                math.fsum(seconds), min(seconds), max(seconds),
                math.fsum(x * w for x, w in losses), sum(w for _, w in losses), math.fsum(values),
                len(values), min(values, default=math.inf), max(values, default=-math.inf),
            ),
        )  # fmt: skip

    @staticmethod
    def _merge(buckets: dict[int, array], block: int, figures: array) -> None:
        into = buckets.get(block)
        if into is None:
            buckets[block] = figures
            return
        for i in (N, SAMPLES, SECONDS, LOSS_WEIGHTED, LOSS_WEIGHT, LOSS_SUM, LOSS_N):
            into[i] += figures[i]
        for i in (FIRST, LOW, LOSS_LOW):
            into[i] = min(into[i], figures[i])
        for i in (LAST, HIGH, LOSS_HIGH):
            into[i] = max(into[i], figures[i])

    def _coarsen(self) -> None:
        while len(self.buckets) > self.most:
            self.block *= 2
            self.buckets = coarser(self.buckets, 2)

    # ---- what the figures read -------------------------------------------------------------

    def steady_samples(self, lo: int) -> int:
        return self.samples_total - sum(s for (s, _, _, _), seen in self._head(0, lo) if not seen)

    def steady_tokens(self, lo: int) -> int:
        return self.tokens_total - sum(t for (_, t, _, _), seen in self._head(0, lo) if not seen)

    def _head(self, a: int, b: int) -> zip:
        """Its ``a``-th to ``b``-th first steps, each (its figures, whether it was observed)."""
        return zip(self.head[a:b], self.head_observed[a:b])

    def steady_n(self, lo: int) -> int:
        """Its steps from the lo-th on, the observed ones left out."""
        return self.n - lo - self.observed_n[lo]

    def window_from(self, lo: int) -> int:
        """Where in the window the steps from the lo-th of the run on begin."""
        return max(0, lo - self.folded)

    def loss_at(self, step: int) -> tuple[float, int] | None:
        """(loss, samples) of the latest step ``step`` in the window that had a loss."""
        steps = self.steps
        if self.ordered:
            i = bisect.bisect_left(steps, step)
            found = [i] if i < len(steps) and steps[i] == step else []
        else:
            found = [i for i in range(len(steps) - 1, -1, -1) if steps[i] == step]
        for i in found:
            if self.loss[i] == self.loss[i]:
                return self.loss[i], self.samples[i]
        return None

    @property
    def frontier(self) -> int:
        """The first step it still holds whole (every one before it is folded)."""
        return self.steps[0] if self.steps else self.last_step + 1

    def folded_mean(self) -> float:
        """The mean seconds of its folded steps."""
        return sum(b[SECONDS] for b in self.buckets.values()) / self.folded if self.folded else 0.0

    def folded_head(self, lo: int) -> list[tuple[int, float]]:
        """(step, seconds) of its first steps, from the lo-th, that are folded (kept whole apart)."""
        end = min(self.folded, len(self.head))
        return [(step, s) for (_, _, s, step), seen in self._head(lo, end) if not seen]


def coarser(buckets: dict[int, array], factor: int) -> dict[int, array]:
    """Buckets of blocks ``factor`` times larger (neighbours merged)."""
    merged: dict[int, array] = {}
    for block in sorted(buckets):
        RankTrack._merge(merged, block // factor, array("d", buckets[block]))
    return merged


def folded_points(
    tracks: Sequence[RankTrack], cut: int, limit: int
) -> tuple[list[int], list[float], list[float | None]]:
    """The whole-run chart before step ``cut``, at most ``limit`` points: a point a block of steps
    that every rank holds (folded, or in its window), its samples over its slowest rank's seconds and
    its loss weighted by samples, at its last step."""
    size = max(t.block for t in tracks)
    each = [_blocks_before(t, cut, size) for t in tracks]
    shared = sorted(set.intersection(*(set(b) for b in each)))
    factor = 1
    while len(shared) > limit * factor:
        factor *= 2
    if factor > 1:
        each = [coarser(b, factor) for b in each]
        shared = sorted({block // factor for block in shared})
    steps, rates, losses = [], [], []
    for block in shared:
        figures = [b[block] for b in each if block in b]
        if len(figures) < len(each):
            continue
        slowest = max(f[SECONDS] for f in figures)
        weight, count = sum(f[LOSS_WEIGHT] for f in figures), sum(f[LOSS_N] for f in figures)
        steps.append(int(min(f[LAST] for f in figures)))
        rates.append(sum(f[SAMPLES] for f in figures) / slowest if slowest > 0 else 0.0)
        if weight > 0:
            losses.append(sum(f[LOSS_WEIGHTED] for f in figures) / weight)
        else:
            losses.append(sum(f[LOSS_SUM] for f in figures) / count if count else None)
    return steps, rates, losses


def _blocks_before(t: RankTrack, cut: int, size: int) -> dict[int, array]:
    """A rank's figures before step ``cut`` in blocks of ``size`` step numbers: its buckets, and the
    steps of its window before it."""
    blocks = coarser(t.buckets, size // t.block)  # (copies: the track's own stay as they are)
    steps = t.steps
    end = bisect.bisect_left(steps, cut) if t.ordered else len(steps)
    i = 0
    while i < end:
        block, j = steps[i] // size, i + 1
        if t.ordered:
            j = max(j, min(end, bisect.bisect_left(steps, (block + 1) * size, i, end)))
        if steps[i] < cut:
            RankTrack._merge(blocks, block, t._bucket_of(i, j))
        i = j
    return blocks

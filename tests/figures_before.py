"""The figures as the engine worked them out before issue 64 (commit 2ac661f), verbatim: every step of
every rank held in memory. The oracle of tests/unit/test_long_run_figures.py, which holds the bounded
figures (engine/run/figures/long_run/whole_run.py) to it on recorded runs. Not to be changed but to follow a
change of what a figure means (then both change, and the test says why): issue 56's verdicts say
the job's advice (``job``, ``_job_here``: as the engine's aggregator); issue 54's FLOP count (main at
00dce83): a step's recomputed FLOPs (HFU beside MFU) and its observed steps, left out of the steady steps
(``Steady``, ``of_rank``, verbatim as main's rank_stats.py and mfu.py)."""

from __future__ import annotations

import bisect
import dataclasses
import math
import statistics
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mgpu_tui.engine.machine import peaks
from mgpu_tui.engine.protocol.events import (
    MAX_BYTES,
    MAX_LINE_BYTES,
    About,
    Beat,
    Done,
    Error,
    Event,
    Hello,
    MalformedEvent,
    Step,
    parse_line,
)
from mgpu_tui.engine.protocol.folder import open_regular
from mgpu_tui.engine.protocol.rundir import RunDir
from mgpu_tui.engine.run.figures.advice import device_of, job_of
from mgpu_tui.engine.run.figures.aggregate import RunStats
from mgpu_tui.engine.run.figures.anatomy import StepParts
from mgpu_tui.engine.run.figures.mfu import NOT_COUNTED, Compute, of_job
from mgpu_tui.engine.run.figures.rank_stats import RankStats
from mgpu_tui.engine.run.figures.stragglers import STRAGGLER_WINDOW, Straggler, stragglers_among


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


def of_rank(
    flops: Sequence[float], step_s: Sequence[float], about: About | None, recomputed: Sequence[float] = ()
) -> Compute:
    """``flops`` and ``step_s``: the rank's steady steps' (NaN where a step was not counted);
    ``recomputed``: the FLOPs each of them ran again (activation checkpointing)."""
    note = about.flops_note if about is not None else None
    seconds = sum(step_s)
    if not flops or any(math.isnan(f) for f in flops) or seconds <= 0:
        return Compute(None, None, note or NOT_COUNTED)
    tflops = sum(flops) / seconds / 1e12
    again = sum(recomputed) / seconds / 1e12 or None
    device_name = about.device_name if about is not None and about.device.startswith("cuda") else None
    peak, why = peaks.peak(device_name, about.precision if about is not None else None)
    if peak is None:
        return Compute(tflops, None, why, recomputed_tflops=again)
    row = peaks.find(device_name)
    basis = f"{row.model if row else device_name} {about.precision if about else ''}".strip()
    hfu = (tflops + again) * 1e12 / peak if again else None
    return Compute(tflops, tflops * 1e12 / peak, None, peak / 1e12, basis, again, hfu)


def warmup_steps(n: int) -> int:
    """Steps left out of steady-state figures when n steps are known: 5, or a fifth of short runs."""
    return min(5, n // 5)


def _merged(earlier: About | None, later: About) -> About:
    """A rank's about: what a later one says, over what an earlier one (of an earlier phase: a fit
    before a test) said and it does not (its batch, where the test trains on none)."""
    if earlier is None:
        return later
    said = {f.name: getattr(later, f.name) for f in dataclasses.fields(later)}
    return dataclasses.replace(earlier, **{k: v for k, v in said.items() if v is not None})


class Aggregator:
    """Feed it events in any order of ranks; ask it for a :class:`RunStats` at any time."""

    def __init__(self, job=None) -> None:
        self._ranks: dict[int, RankTrack] = {}
        self._parts = StepParts()
        self.job = job

    def add(self, event: Event) -> None:
        track = self._ranks.setdefault(event.rank, RankTrack())
        track.last_t = event.t
        if isinstance(event, Step):
            if track.step_offset:  # a later phase of the rank counts on from its earlier ones
                event = dataclasses.replace(event, step=event.step + track.step_offset)
            if track.first_step_t is None:
                track.first_step_t = event.t
            track.steps.append(event.step)
            track.samples.append(event.samples)
            track.tokens.append(event.tokens)
            if event.state_bytes is not None and track.state_bytes is None:
                track.state_bytes = event.state_bytes
            if event.tensor_peak_bytes is not None:
                track.tensor_peak_bytes = max(event.tensor_peak_bytes, track.tensor_peak_bytes or 0)
            track.step_s.append(event.step_s)
            track.data_s.append(math.nan if event.data_s is None else event.data_s)
            track.flops.append(math.nan if event.flops is None else float(event.flops))
            track.recomputed.append(float(event.recomputed_flops or 0))
            track.counted = track.counted or event.flops is not None
            if event.observed:
                track.observed.add(len(track.steps) - 1)
            if event.parts is not None:
                self._parts.add(event.rank, event.step, event.step_s, event.parts)
            if event.loss is not None:
                track.loss[event.step] = (event.loss, event.samples)
            elif event.loss_nonfinite and track.diverged_at is None:
                track.diverged_at = event.step
            if event.mem_bytes is not None:
                track.mem_bytes = event.mem_bytes
            if event.mem_peak_bytes is not None:
                track.mem_peak_bytes = max(track.mem_peak_bytes or 0, event.mem_peak_bytes)
        elif isinstance(event, Beat):
            track.where = event.where
        elif isinstance(event, Hello):
            if track.hello is not None and track.done is not None:  # a later phase (ingest.py)
                track.step_offset = track.steps[-1] if track.steps else 0
                track.done = None
            track.hello = event
        elif isinstance(event, About):
            track.about = _merged(track.about, event)
            self._parts.loader_workers(event.rank, event.loader_workers)
        elif isinstance(event, Done):
            track.done = event
            peak = event.extra.get("mem_peak_bytes")  # a script's rank says its peak at its end, too
            if isinstance(peak, int) and not isinstance(peak, bool) and 0 <= peak <= MAX_BYTES:
                track.mem_peak_bytes = max(track.mem_peak_bytes or 0, peak)
        elif isinstance(event, Error):
            track.error = event

    def liveness(self) -> list[tuple[int, float | None, int, bool]]:
        """(rank, time of its last event, its last step, done) for every rank heard from."""
        return [
            (rank, t.last_t, t.steps[-1] if t.steps else 0, t.done is not None)
            for rank, t in sorted(self._ranks.items())
        ]

    def recent_step_time(self, last: int = 50) -> float | None:
        """The median step time over the last steps of every rank: what "slow" means for this job."""
        recent = [x for t in self._ranks.values() for x in t.step_s[-last:]]
        return statistics.median(recent) if recent else None

    def rank_processes(self) -> dict[int, tuple[int, str | None]]:
        """Rank -> (pid, CUDA UUID or None), for the ranks that have said hello (a script's UUID comes
        later, with what it used)."""
        return {rank: (t.hello.pid, t.about.device_uuid if t.about else t.hello.device_uuid)
                for rank, t in self._ranks.items() if t.hello}  # fmt: skip

    def errors(self) -> dict[int, Error]:
        """Rank -> the ``error`` event it wrote (why it is about to fail), for the ranks that did."""
        return {rank: t.error for rank, t in self._ranks.items() if t.error is not None}

    def stack_answering(self) -> dict[int, int]:
        """Rank -> pid, for the ranks that answer a stack request and have not said done."""
        return {
            rank: t.hello.pid
            for rank, t in self._ranks.items()
            if t.hello and t.hello.stacks and t.done is None
        }

    def series(self, max_points: int = 200) -> tuple[list[int], list[float], list[float | None]]:
        """(steps, global samples/s, global-batch loss) per step every rank reached, the last points.

        A step's rate is the samples of all ranks over the slowest rank's step time.
        """
        tracks = [t for t in self._ranks.values() if t.steps]
        if not tracks:
            return [], [], []
        common = min(t.steps[-1] for t in tracks)
        samples: dict[int, int] = {}
        slowest: dict[int, float] = {}
        for t in tracks:
            for i in range(max(0, len(t.steps) - max_points - 1), len(t.steps)):
                step = t.steps[i]
                if step <= common:
                    samples[step] = samples.get(step, 0) + t.samples[i]
                    slowest[step] = max(slowest.get(step, 0.0), t.step_s[i])
        steps = sorted(samples)[-max_points:]
        rates = [samples[s] / slowest[s] if slowest[s] > 0 else 0.0 for s in steps]
        return steps, rates, [self._loss_at(s) for s in steps]

    def whole_series(self, max_points: int = 300) -> tuple[list[int], list[float], list[float | None]]:
        """(steps, global samples/s, global-batch loss) over the whole run, at most ``max_points``
        of them: every k-th step from the first to the last that every rank reached (and that
        last one), each figured as in :meth:`series`. A chart of the whole run draws these."""
        tracks = [t for t in self._ranks.values() if t.steps]
        if not tracks:
            return [], [], []
        first, common = max(t.steps[0] for t in tracks), min(t.steps[-1] for t in tracks)
        if common < first:
            return [], [], []
        stride = max(1, math.ceil((common - first + 1) / max_points))
        wanted = list(range(first, common + 1, stride))
        if wanted[-1] != common:
            wanted[-1] = common  # the run's end is always in view
        steps, rates = [], []
        for step in wanted:
            samples, slowest = 0, 0.0
            for t in tracks:
                i = bisect.bisect_left(t.steps, step)
                if i == len(t.steps) or t.steps[i] != step:
                    break  # a step some rank did not report: left out, not made up
                samples += t.samples[i]
                slowest = max(slowest, t.step_s[i])
            else:
                steps.append(step)
                rates.append(samples / slowest if slowest > 0 else 0.0)
        return steps, rates, [self._loss_at(s) for s in steps]

    def stragglers(self) -> tuple[Straggler, ...]:
        """The ranks that arrive last at the collectives, from the time each rank's steps spent on
        their batch (``data_s``): in synchronous training every rank's step takes the slowest's, so
        step times cannot tell; when each is ready can. Over the latest STRAGGLER_WINDOW steps."""
        tracks = {r: t for r, t in self._ranks.items() if t.steps and t.data_s}
        if len(tracks) < 2:
            return ()
        common = min(t.steps[-1] for t in tracks.values())
        per_step: dict[int, dict[int, float]] = {}
        for rank, t in tracks.items():
            for i in range(max(0, len(t.steps) - STRAGGLER_WINDOW - 1), len(t.steps)):
                if t.steps[i] <= common and not math.isnan(t.data_s[i]):
                    per_step.setdefault(t.steps[i], {})[rank] = t.data_s[i]
        full = [ready for ready in per_step.values() if len(ready) == len(tracks)][-STRAGGLER_WINDOW:]
        return stragglers_among(full, with_data=True, step_s=self.recent_step_time())

    def stats(self, *, fresh: bool = True) -> RunStats:
        """The figures now; not ``fresh`` (a live view's): a large job's anatomy and verdicts may be
        a second or two old (anatomy.py)."""
        tracks = self._ranks
        stepping = {r: t for r, t in tracks.items() if t.steps}
        common = min((t.steps[-1] for t in stepping.values()), default=0)
        n_known = max((len(t.steps) for t in stepping.values()), default=0)
        warm = warmup_steps(n_known)

        rank_stats = []
        total_rate, token_rate = 0.0, 0.0
        any_rate = False
        per_step_max: dict[int, float] = {}
        computes: list[Compute] = []
        for rank in sorted(tracks):
            t = tracks[rank]
            rate = tokens_rate = step_s = None
            compute = None
            if t.steps:
                steady = Steady.of(t, warm if len(t.steps) > warm else 0)
                seconds = sum(steady.step_s)
                step_s = seconds / len(steady.step_s) if steady.step_s else None
                # A rank that counts no samples by design (tp peers, later pipeline stages: a sample
                # is counted once, where it enters) has no rate of its own: n/a, not 0.
                if seconds > 0 and any(steady.samples):
                    rate = sum(steady.samples) / seconds
                    total_rate += rate
                    tokens_rate = sum(steady.tokens) / seconds or None
                    token_rate += tokens_rate or 0.0
                    any_rate = True
                if t.counted or (t.about and t.about.flops_note):
                    compute = of_rank(steady.flops, steady.step_s, t.about, steady.recomputed)
                    computes.append(compute)
                for step, secs in zip(steady.steps, steady.step_s):
                    if step <= common:
                        per_step_max[step] = max(per_step_max.get(step, 0.0), secs)
            rank_stats.append(rank_stats_of(rank, t, rate, tokens_rate, compute, step_s))

        times = sorted(per_step_max.values())
        median = statistics.median(times) if times else None
        spread = None
        if len(times) >= 2:
            q = statistics.quantiles(times, n=10, method="inclusive")
            spread = (q[0], q[-1])

        world = next((t.hello.world_size for t in tracks.values() if t.hello), None)
        anatomy, verdicts = self._parts.figures(warm, world, fresh=fresh, **self._job_here())
        return RunStats(
            compute=of_job(computes) if computes else None,
            anatomy=anatomy,
            verdicts=verdicts,
            ranks=tuple(rank_stats),
            world_size=world,
            steps=common,
            samples_per_s=total_rate if any_rate else None,
            tokens_per_s=token_rate if token_rate > 0 else None,
            step_time_s_median=median,
            step_time_s_spread=spread,
            final_loss=self._loss_at(common),
            stragglers=self.stragglers(),
            first_step_t=min(
                (t.first_step_t for t in tracks.values() if t.first_step_t is not None), default=None
            ),
        )

    def _loss_at(self, step: int) -> float | None:
        weighted, weight, plain = 0.0, 0, []
        for t in self._ranks.values():
            if step not in t.loss:
                continue
            loss, samples = t.loss[step]
            plain.append(loss)
            weighted += loss * samples
            weight += samples
        if weight:
            return weighted / weight
        return statistics.fmean(plain) if plain else None

    def _job_here(self) -> dict:
        """The job and its device, as its verdicts' advice reads them (advice.py)."""
        abouts = [t.about for t in self._ranks.values() if t.about is not None]
        job = self.job
        if job == "script's own":  # what its ranks said they train under
            job = job_of(a.batch_source for a in abouts)
        said = [a.device for a in abouts] + [t.hello.device for t in self._ranks.values() if t.hello]
        return {"job": job, "device": device_of(said)}


MAX_EVENT_FILE_BYTES = 256 << 20  # of one rank's events read back after a run: ~2,000,000 steps


def read_events(run_dir: Path, world_size: int | None = None, job=None) -> Aggregator:
    """Every event a finished run wrote (its ``events/rank<N>.jsonl``), reduced; bad lines skipped.
    Read as untrusted (the ranks wrote them): the ranks of the job only (when ``world_size`` is
    known), each a regular file below the run folder (never a FIFO, a device or a link), its first
    MAX_EVENT_FILE_BYTES at most."""
    aggregator = Aggregator(job)
    for rank, path in sorted(RunDir(run_dir).event_files().items()):
        if world_size is not None and rank >= world_size:
            continue
        try:
            fd = open_regular(path, root=Path(run_dir))
        except OSError:  # Unreadable among them: a FIFO, a link, gone
            continue
        with open(fd, "rb") as f:
            budget = MAX_EVENT_FILE_BYTES
            while budget > 0 and (line := f.readline(MAX_LINE_BYTES + 1)):  # a longer line is refused
                budget -= len(line)
                try:
                    aggregator.add(parse_line(line))
                except MalformedEvent:
                    continue
    return aggregator

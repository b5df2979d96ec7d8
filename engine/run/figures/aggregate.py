"""Reduce rank events to the figures the tool shows.

Definitions, so that every number on screen can be checked by hand:

- Warm-up: the first ``warmup_steps(n)`` steps (n = steps seen) are left out of every rate and time; they hold
  one-off costs (first allocations, DDP's lazy imports, the first all-reduce, and on the CPU the demos' first
  three steps under torch's MemTracker: from 15 steps on, all within the warm-up). So is a step run under the
  FLOP count (Step.observed, slowed by it): its seconds, and with them its samples and FLOPs.
- A rank's samples/s: its samples over its seconds, both summed over the steady steps. Each ``step_s`` runs
  from the end of the previous step to the end of this one: the sum is the rank's wall time, data included.
- Global samples/s: the sum over ranks. Ranks only count samples new to the job, so nothing is counted twice.
- Step time of the job at step s: the slowest rank's ``step_s`` (a synchronous job moves at the pace of its
  slowest rank); the median over steady steps. A rank's own step time: the mean of its steady steps'
  ``step_s`` (its seconds over its steps).
- Final loss: at the last step every rank reached, the mean of the ranks' losses weighted by their samples,
  which is the loss of the full global batch when each rank's loss is the mean over its own samples.
- Peak memory per rank: the largest ``mem_peak_bytes`` it reported (the CUDA allocator's peak, or peak RSS on
  the CPU); its tensors' peak, the largest ``tensor_peak_bytes`` (the allocator's on CUDA, MemTracker's, CPU).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mgpu_tui.engine.planning.modes import Job
from mgpu_tui.engine.protocol.events import (
    MAX_BYTES,
    MAX_LINE_BYTES,
    About,
    Beat,
    Digest,
    Done,
    Error,
    Event,
    Hello,
    MalformedEvent,
    Step,
    parse_line,
)
from mgpu_tui.engine.protocol.file_tail import READ_CHUNK
from mgpu_tui.engine.protocol.long_run.tail import EventTail
from mgpu_tui.engine.protocol.rundir import RunDir
from mgpu_tui.engine.run.figures import mfu
from mgpu_tui.engine.run.figures.advice import device_of, job_of
from mgpu_tui.engine.run.figures.anatomy import RankAnatomy, StepParts, Verdict
from mgpu_tui.engine.run.figures.long_run.job_times import JobTimes, job_step_time
from mgpu_tui.engine.run.figures.long_run.whole_run import RankTrack, fit, folded_points
from mgpu_tui.engine.run.figures.mfu import Compute
from mgpu_tui.engine.run.figures.rank_stats import RankStats, rank_stats_of
from mgpu_tui.engine.run.figures.stragglers import STRAGGLER_WINDOW, Straggler, stragglers_among

if TYPE_CHECKING:
    from mgpu_tui.engine.run.figures.trainers import Phase, TrainerStats


def warmup_steps(n: int) -> int:
    """Steps left out of steady-state figures when n steps are known: 5, or a fifth of short runs."""
    return min(5, n // 5)


@dataclass(frozen=True)
class RunStats:
    ranks: tuple[RankStats, ...]
    world_size: int | None  # from hello events
    steps: int  # the last step every rank reached
    samples_per_s: float | None
    step_time_s_median: float | None
    step_time_s_spread: tuple[float, float] | None  # 10th and 90th percentile
    final_loss: float | None
    first_step_t: float | None  # when the first step event of any rank was written
    stragglers: tuple[Straggler, ...] = ()
    tokens_per_s: float | None = None  # where the ranks count tokens (a GPT): over the same steps
    anatomy: tuple[RankAnatomy, ...] = ()  # where each rank's step goes, where it took it apart (anatomy.py)
    verdicts: tuple[Verdict, ...] = ()  # why the job is slow, where that is clear (anatomy.py)
    compute: Compute | None = None  # the job's TF/s and MFU, where its ranks counted FLOPs (mfu.py)
    # A command's processes that trained with no process group, each its own (trainers.py), and its
    # phases, where it had several (a learning-rate finder, then the job).
    trainers: tuple[TrainerStats, ...] = ()
    phases: tuple[Phase, ...] = ()

    def peak_mem_bytes(self) -> dict[int, int | None]:
        return {r.rank: r.mem_peak_bytes for r in self.ranks}


def _merged(earlier: About | None, later: About) -> About:
    """A rank's about: what a later one says, over what an earlier one (of an earlier phase: a fit
    before a test) said and it does not (its batch, where the test trains on none)."""
    if earlier is None:
        return later
    said = {f.name: getattr(later, f.name) for f in dataclasses.fields(later)}
    return dataclasses.replace(earlier, **{k: v for k, v in said.items() if v is not None})


class Aggregator:
    """Feed it events in any order of ranks; ask it for a :class:`RunStats` at any time. ``job``:
    what the job's ranks communicate (its mode's, engine/planning/modes.py), for the words and the
    advice of its verdicts; a user's script's is learned from its ranks (advice.job_of); None: not
    known, and no advice is given."""

    def __init__(self, job: Job | None = None) -> None:
        self._ranks: dict[int, RankTrack] = {}
        self._parts = StepParts()
        self._job = JobTimes()  # the job's step times once folded out of the ranks' windows (whole_run.py)
        self.job = job
        self._sharers = 1  # aggregators that share one job's memory (share())

    def add(self, event: Event) -> None:
        track = self._ranks.get(event.rank)
        if track is None:
            track = self._ranks[event.rank] = RankTrack(job=self._job)
            self._job.tracks.append(track)
            fit(self._ranks.values(), len(self._ranks) * self._sharers)  # a job of many: fewer steps a rank
        track.last_t = event.t
        if isinstance(event, Step):
            if track.step_offset:  # a later phase of the rank counts on from its earlier ones
                event = dataclasses.replace(event, step=event.step + track.step_offset)
            if track.first_step_t is None:
                track.first_step_t = event.t
            if event.state_bytes is not None and track.state_bytes is None:
                track.state_bytes = event.state_bytes
            if event.tensor_peak_bytes is not None:
                track.tensor_peak_bytes = max(event.tensor_peak_bytes, track.tensor_peak_bytes or 0)
            track.add_step(
                event.step,
                event.samples,
                event.tokens,
                event.step_s,
                math.nan if event.data_s is None else event.data_s,
                math.nan if event.flops is None else float(event.flops),
                math.nan if event.loss is None else event.loss,
                float(event.recomputed_flops or 0),
                event.observed,
            )
            track.counted = track.counted or event.flops is not None
            if event.parts is not None:
                self._parts.add(event.rank, event.step, event.step_s, event.parts)
            if event.loss is None and event.loss_nonfinite and track.diverged_at is None:
                track.diverged_at = event.step
            track.memory.add(event)
            if event.mem_bytes is not None:
                track.mem_bytes = event.mem_bytes
            if event.mem_peak_bytes is not None:
                track.mem_peak_bytes = max(track.mem_peak_bytes or 0, event.mem_peak_bytes)
        elif isinstance(event, Digest):  # the steps of a segment read back as one (whole_run.py)
            track.add_digest(event, track.step_offset)
            if track.diverged_at is None and event.diverged_at is not None:
                track.diverged_at = event.diverged_at + track.step_offset
            if event.mem_peak_bytes is not None:
                track.mem_peak_bytes = max(track.mem_peak_bytes or 0, event.mem_peak_bytes)
        elif isinstance(event, Beat):
            track.where = event.where
        elif isinstance(event, Hello):
            if track.hello is not None and track.done is not None:  # a later phase (ingest.py)
                track.step_offset = track.last_step
                track.done = None
            track.hello = event
            self._job.world = event.world_size
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

    def share(self, sharers: int) -> None:
        """Its ranks keep a ``sharers``-th of what a job's may: so many aggregators (a command's
        trainings: trainers.py) hold together what the ranks of one job may (whole_run.py)."""
        self._sharers = sharers
        fit(self._ranks.values(), len(self._ranks) * sharers)

    def liveness(self) -> list[tuple[int, float | None, int, bool]]:
        """(rank, time of its last event, its last step, done) for every rank heard from."""
        return [(rank, t.last_t, t.last_step, t.done is not None) for rank, t in sorted(self._ranks.items())]

    def span(self) -> tuple[float, float] | None:
        """(the first hello, the latest event) of the ranks heard from: when they trained."""
        hellos = [t.hello.t for t in self._ranks.values() if t.hello]
        latest = [t.last_t for t in self._ranks.values() if t.last_t is not None]
        return (min(hellos), max(latest)) if hellos and latest else None

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
        last one), each figured as in :meth:`series`. A chart of the whole run draws these. In a
        run longer than the ranks' windows, the steps before them are a point a bucket of steps
        (whole_run.py: their samples over the slowest rank's seconds), in at most two thirds of them."""
        tracks = [t for t in self._ranks.values() if t.n]
        if not tracks:
            return [], [], []
        steps: list[int] = []
        rates: list[float] = []
        losses: list[float | None] = []
        cut = max((t.steps[0] if t.steps else t.last_step + 1 for t in tracks if t.folded), default=None)
        if cut is not None:
            steps, rates, losses = folded_points(tracks, cut, max_points * 2 // 3)
        first = max(t.steps[0] if t.steps else t.last_step + 1 for t in tracks)
        first, common = max(first, cut or 0), min(t.last_step for t in tracks)
        if common < first:
            return steps, rates, losses
        stride = max(1, math.ceil((common - first + 1) / (max_points - len(steps))))
        wanted = list(range(first, common + 1, stride))
        if wanted[-1] != common:
            wanted[-1] = common  # the run's end is always in view
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
                losses.append(self._loss_at(step))
        return steps, rates, losses

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
        stepping = {r: t for r, t in tracks.items() if t.n}
        common = min((t.last_step for t in stepping.values()), default=0)
        n_known = max((t.n for t in stepping.values()), default=0)
        warm = warmup_steps(n_known)

        rank_stats = []
        total_rate, token_rate = 0.0, 0.0
        any_rate = False
        computes: list[Compute] = []
        for rank in sorted(tracks):
            t = tracks[rank]
            rate = tokens_rate = step_s = None
            compute = None
            if t.n:
                lo = warm if t.n > warm else 0
                seconds = t.seconds[lo]  # (the steady steps' step_s, added in order; the observed left out)
                steady = t.steady_n(lo)
                step_s = seconds / steady if steady else None
                # A rank that counts no samples by design (tp peers, later pipeline stages: a sample
                # is counted once, where it enters) has no rate of its own: n/a, not 0.
                samples = t.steady_samples(lo)
                if seconds > 0 and samples:
                    rate = samples / seconds
                    total_rate += rate
                    tokens_rate = t.steady_tokens(lo) / seconds or None
                    token_rate += tokens_rate or 0.0
                    any_rate = True
                if t.counted or (t.about and t.about.flops_note):
                    every = t.uncounted[lo] == 0
                    flops, again = t.flops_sums[lo], t.recomputed[lo]
                    compute = mfu.of_rank_sums(flops, every, steady, seconds, t.about, again)
                    computes.append(compute)
            rank_stats.append(rank_stats_of(rank, t, rate, tokens_rate, compute, step_s))

        median, spread = job_step_time(self._job, stepping, warm, common)
        world = next((t.hello.world_size for t in tracks.values() if t.hello), None)
        anatomy, verdicts = self._parts.figures(warm, world, fresh=fresh, **self._job_here())
        return RunStats(
            compute=mfu.of_job(computes) if computes else None,
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

    def _job_here(self) -> dict:
        """The job and its device, as its verdicts' advice reads them (advice.py)."""
        abouts = [t.about for t in self._ranks.values() if t.about is not None]
        job = self.job
        if job == "script's own":  # what its ranks said they train under
            job = job_of(a.batch_source for a in abouts)
        said = [a.device for a in abouts] + [t.hello.device for t in self._ranks.values() if t.hello]
        return {"job": job, "device": device_of(said)}

    def _loss_at(self, step: int) -> float | None:
        weighted, weight, plain = 0.0, 0, []
        for t in self._ranks.values():
            found = t.loss_at(step)
            if found is None:
                continue
            loss, samples = found
            plain.append(loss)
            weighted += loss * samples
            weight += samples
        if weight:
            return weighted / weight
        return statistics.fmean(plain) if plain else None


MAX_EVENT_FILE_BYTES = 256 << 20  # of one rank's events read back after a run: ~2,000,000 steps


def read_events(run_dir: Path, world_size: int | None = None, job: Job | None = None) -> Aggregator:
    """Every event a finished run wrote (each rank's files: long_run/tail.py, its older segments as
    their digests), reduced; bad lines skipped. Read as untrusted (the ranks wrote them): the ranks
    of the job only (when ``world_size`` is known), each file a regular file below the run folder
    (never a FIFO, a device or a link), MAX_EVENT_FILE_BYTES of each rank's at most. The ranks are
    read a chunk each in turn, as a live run's are, so that they fold their steps together."""
    aggregator = Aggregator(job)
    folder = RunDir(run_dir)
    ranks = [r for r in sorted(folder.event_files()) if world_size is None or r < world_size]
    tails = {rank: EventTail(folder, rank, max_line=MAX_LINE_BYTES) for rank in ranks}
    budgets = dict.fromkeys(ranks, MAX_EVENT_FILE_BYTES)
    for _ in range(2 * MAX_EVENT_FILE_BYTES // READ_CHUNK):  # (each read moves on, or it has ended)
        for rank, tail in list(tails.items()):
            lines = tail.read_lines(min(READ_CHUNK, budgets[rank]))
            budgets[rank] -= sum(len(line) + 1 for line in lines)
            for line in lines:
                try:
                    aggregator.add(parse_line(line))
                except MalformedEvent:
                    continue
            if budgets[rank] <= 0 or not (lines or tail.behind):
                tails.pop(rank).close()
        if not tails:
            break
    for tail in tails.values():
        tail.close()
    return aggregator

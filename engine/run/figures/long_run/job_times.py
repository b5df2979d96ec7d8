"""The job's step time over a long run (docs/long-runs.md): its slowest rank's at each step, those
folded out of the ranks' windows (whole_run.py) kept as a histogram of 2% bins
(protocol/long_run/digest.py), so that its median and percentiles stay within 1% whatever the run's
length, and exact for a run that fits in its window.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mgpu_tui.engine.protocol.long_run.digest import bin_seconds, step_bin

if TYPE_CHECKING:
    from mgpu_tui.engine.run.figures.long_run.whole_run import RankTrack

PENDING = 1 << 16  # steps folded by some ranks, not yet by all (JobTimes)


class JobTimes:
    """The job's step time (its slowest rank's) at each step folded out of the ranks' windows, past
    their first HEAD steps: a histogram of them, once every rank has folded the step; till then, the
    slowest time so far (at most PENDING steps: past that the oldest count as they are)."""

    def __init__(self) -> None:
        self.hist: dict[int, int] = {}
        self.pending: dict[int, float] = {}
        self.tracks: list[RankTrack] = []
        self.world: int | None = None  # the job's ranks, as a hello said: no step is final before all came

    def take(self, steps: Sequence[int], seconds: Sequence[float]) -> None:
        pending = self.pending
        for step, x in zip(steps, seconds):
            known = pending.get(step)
            pending[step] = x if known is None or x > known else known
        known_all = self.world is None or len(self.tracks) >= self.world
        frontier = min(t.frontier for t in self.tracks) if known_all and self.tracks else -1
        final = [step for step in pending if step < frontier]
        if (over := len(pending) - len(final) - PENDING) > 0:
            final += sorted(step for step in pending if step >= frontier)[:over]
        for step in final:
            b = step_bin(pending.pop(step))
            self.hist[b] = self.hist.get(b, 0) + 1


def job_step_time(
    job: JobTimes, stepping: dict[int, RankTrack], warm: int, common: int
) -> tuple[float | None, tuple[float, float] | None]:
    """The job's step time at each steady step every rank reached (its slowest rank's; a step run under
    the FLOP count left out): the median and the 10th and 90th percentiles. A long run's steps folded
    out of the ranks' windows count by their bins (``job``); those read back as digests (a segment
    passed over) as the slowest rank's own."""
    per_step_max = {step: x for step, x in job.pending.items() if step <= common}
    for rank in sorted(stepping):
        t = stepping[rank]
        lo = warm if t.n > warm else 0
        start = t.window_from(lo)
        whole = zip(t.steps[start:], t.step_s[start:], t.observed[start:])
        for step, secs in [*t.folded_head(lo), *((step, x) for step, x, seen in whole if not seen)]:
            if step <= common:
                per_step_max[step] = max(per_step_max.get(step, 0.0), secs)
    hist = job.hist
    digested = [t for t in stepping.values() if t.digested]
    if digested:
        slowest = max(digested, key=lambda t: t.folded_mean())
        hist = {b: hist.get(b, 0) + slowest.digested.get(b, 0) for b in {*hist, *slowest.digested}}
    return step_time(sorted(per_step_max.values()), hist)


def step_time(
    times: Sequence[float], hist: dict[int, int]
) -> tuple[float | None, tuple[float, float] | None]:
    """The median and the 10th and 90th percentiles ("inclusive", as statistics.quantiles) of step
    times: ``times`` (sorted) with a histogram's (each bin as the time it stands for)."""
    if not hist:
        median = statistics.median(times) if times else None
        if len(times) < 2:
            return median, None
        q = statistics.quantiles(times, n=10, method="inclusive")
        return median, (q[0], q[-1])
    runs = sorted([(x, 1) for x in times] + [(bin_seconds(b), c) for b, c in hist.items() if c > 0])
    ends, total = [], 0
    for _, count in runs:
        total += count
        ends.append(total)

    def kth(k: int) -> float:
        return runs[bisect.bisect_right(ends, k)][0]

    median = kth(total // 2) if total % 2 else (kth(total // 2 - 1) + kth(total // 2)) / 2
    if total < 2:
        return median, None
    m, spread = total - 1, []
    for i in (1, 9):
        j, delta = divmod(i * m, 10)
        spread.append((kth(j) * (10 - delta) + kth(j + 1) * delta) / 10)
    return median, (spread[0], spread[1])

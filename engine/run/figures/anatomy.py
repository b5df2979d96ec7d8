"""Where each rank's step goes, and why the job is slow: the step's parts and the verdicts.

A rank that took its steps apart (engine/rank/watch/step_clock.py: a script's watch) writes, with each
step, the seconds it spent in each part: ``data`` (in its DataLoader), ``forward``, ``backward``,
``comm`` (the end of backward that waited for the gradients' all-reduce: what backward did not
hide), ``optimizer`` and ``host`` (every other moment). Over its latest steady steps (the warm-up
left out, as everywhere: aggregate.py), a rank's figure of a part is its mean seconds a step, and
its share that over the rank's mean step time; compute is forward, backward and the optimizer.

A verdict is named only when its margin is clear and consistent: the steps looked at are cut into
CHUNKS runs of consecutive steps, and its condition holds on the figures of each of them but one at
most, on every rank it speaks of. (Not step by step: a step of a few milliseconds on a busy machine
flips between its parts from one step to the next, while what holds over a few steps holds.)

- **input-bound**: data is at least SHARE_INPUT of the step. On some ranks only, and the others' data
  share below theirs by SHARE_APART: those ranks hold the job back, the others wait for them (in
  communication) and are not called communication-bound.
- **straggler**: a rank's compute or host time above the others' median by STRAGGLER_MIN_S and
  STRAGGLER_STEP_SHARE of the step, while the others wait longer in communication than it does by
  half that (over the steps looked at, and over each run of them but one).
- **communication-bound**: on every rank, a straggler's included (its own wait is not for it),
  communication is the largest part (over the steps looked at) and at least SHARE_COMM of the step.
  Named before compute-bound: where both hold, communication is the larger single cost, the one
  to cut.
- **compute-bound**: on every rank, compute is at least SHARE_COMPUTE of the step.
- **host-bound**: on every rank, host time is at least SHARE_HOST of the step.

Each verdict says its number and, where one applies to the job and its device, one change to try
(advice.py: a table of a row a verdict and a kind of job). Input-bound ranks are the whole story (the
others wait for them); a straggler may come with what the whole job is bound by (every rank
compute-bound, one slower at it). Nothing is named where nothing is clear.
"""

from __future__ import annotations

import bisect
import statistics
import time
from collections import deque
from dataclasses import dataclass

from mgpu_tui.engine.planning.modes import Job
from mgpu_tui.engine.protocol.events import STEP_PARTS
from mgpu_tui.engine.run.figures.advice import Device, advice, loader_words, says

WINDOW = 200  # the latest steps of a rank looked at: why it is slow now
LARGE = 64  # ranks past which a live job's figures are worked out again at most every AGAIN_S
AGAIN_S = 2.0
MIN_STEPS = 5  # steady steps before a verdict is named
CHUNKS = 4
SHARE_INPUT = 0.3
SHARE_APART = 0.2
SHARE_COMM = 0.3
SHARE_COMPUTE = 0.5
SHARE_HOST = 0.5
STRAGGLER_MIN_S = 0.010
STRAGGLER_STEP_SHARE = 0.2  # (twice the collectives' rule, aggregate.py: a busy machine's noise)
COMPUTE = ("forward", "backward", "optimizer")
# Every verdict's kind, a fixed set (the metrics' verdicts: engine/run/metrics/).
KINDS = ("input-bound", "straggler", "communication-bound", "compute-bound", "host-bound")
COMM_SAYS = "communication after backward's graph"  # a job nobody named: what the clock measured
HOST_SAYS = "spent outside the DataLoader, the model and the optimizer"


@dataclass(frozen=True)
class RankAnatomy:
    """A rank's step taken apart: its mean seconds a step in each part, over ``steps`` steady steps."""

    rank: int
    steps: int
    step_s: float  # its mean step time over them (the events' step_s)
    data_s: float
    forward_s: float
    backward_s: float
    comm_s: float
    optimizer_s: float
    host_s: float

    def seconds(self, part: str) -> float:
        if part == "compute":
            return self.forward_s + self.backward_s + self.optimizer_s
        value: float = getattr(self, f"{part}_s")
        return value

    def share(self, part: str) -> float:
        return self.seconds(part) / self.step_s if self.step_s > 0 else 0.0

    @property
    def parts_s(self) -> float:
        """The parts added up: the step time again, where they were all measured (a check)."""
        return sum(self.seconds(part) for part in STEP_PARTS)


@dataclass(frozen=True)
class Verdict:
    """Why the job is slow, with its number, and the change to try."""

    kind: str  # one of KINDS
    ranks: tuple[int, ...]  # the ranks it names (every rank, for a job-wide one)
    text: str
    hint: str | None  # None: no change to try applies to this job and device (advice.py)


class StepParts:
    """The latest steps' parts of each rank, kept as they come (at most WINDOW a rank)."""

    def __init__(self) -> None:
        self._ranks: dict[int, deque[tuple[int, float, tuple[float, ...]]]] = {}
        self._workers: dict[int, int] = {}
        self._kept: tuple[float, tuple, tuple] | None = None  # (when, what it was asked, figures)

    def add(self, rank: int, step: int, step_s: float, parts: tuple[float, ...]) -> None:
        self._ranks.setdefault(rank, deque(maxlen=WINDOW)).append((step, step_s, parts))

    def loader_workers(self, rank: int, workers: int | None) -> None:
        """The worker processes of the rank's training DataLoader, as it said (for the hint)."""
        if workers is not None:
            self._workers[rank] = workers

    def _steady(self, rank: int, warm: int) -> list[tuple[float, tuple[float, ...]]]:
        return [
            (step_s, parts) for step, step_s, parts in self._ranks.get(rank, ()) if step > warm and step_s > 0
        ]

    def figures(
        self,
        warm: int,
        world_size: int | None = None,
        *,
        fresh: bool = True,
        job: Job | None = None,
        device: Device | None = None,
    ) -> tuple[tuple[RankAnatomy, ...], tuple[Verdict, ...]]:
        """Each rank's anatomy, over its steady steps (after step ``warm``) in the window, and the
        verdicts (module docstring), once every rank of the job (``world_size``, where known) has
        MIN_STEPS steady steps, their words and advice those of its ``job`` on its ``device``
        (advice.py). Not ``fresh`` (a live view's): for a job of over LARGE ranks, the figures of at
        most AGAIN_S ago (at 1,024 ranks they take a fifth of a second)."""
        asked = (warm, world_size, job, device)
        kept = self._kept
        now = time.monotonic()
        if not fresh and kept is not None and kept[1] == asked and now - kept[0] < AGAIN_S:
            return kept[2]
        found = self._figures(warm, world_size, job, device)
        if len(self._ranks) > LARGE:
            self._kept = (now, asked, found)
        return found

    def _figures(
        self, warm: int, world_size: int | None, job: Job | None, device: Device | None
    ) -> tuple[tuple[RankAnatomy, ...], tuple[Verdict, ...]]:
        steady = {rank: steps for rank in sorted(self._ranks) if (steps := self._steady(rank, warm))}
        ranks = tuple(_anatomy_of(rank, steps) for rank, steps in steady.items())
        if not ranks or any(r.steps < MIN_STEPS for r in ranks):
            return ranks, ()
        if world_size is not None and len(ranks) < world_size:
            return ranks, ()
        chunks = {rank: _chunks(steps) for rank, steps in steady.items()}
        return ranks, _verdicts(ranks, chunks, self._workers, job, device)

    def anatomy(self, warm: int) -> tuple[RankAnatomy, ...]:
        return self.figures(warm)[0]

    def verdicts(
        self, warm: int, world_size: int | None = None, job: Job | None = None, device: Device | None = None
    ) -> tuple[Verdict, ...]:
        return self.figures(warm, world_size, job=job, device=device)[1]


Steps = list[tuple[float, tuple[float, ...]]]  # (step_s, the seconds of each part), in order


def _anatomy_of(rank: int, steps: Steps) -> RankAnatomy:
    n = len(steps)
    sums = [0.0] * len(STEP_PARTS)
    total = 0.0
    for step_s, parts in steps:
        total += step_s
        for i, seconds in enumerate(parts):
            sums[i] += seconds
    return RankAnatomy(rank, n, total / n, *(x / n for x in sums))


def _chunks(steps: Steps) -> list[dict[str, float]]:
    """CHUNKS runs of consecutive steps (the last takes the remainder), each as its step time and
    its parts' seconds ("compute": forward, backward and the optimizer), the means of its steps."""
    size = max(1, len(steps) // CHUNKS)
    runs = [steps[i : i + size] for i in range(0, size * (CHUNKS - 1), size)] + [steps[size * (CHUNKS - 1) :]]
    found = []
    for run in runs:
        n = len(run)
        seconds = {part: sum(parts[i] for _, parts in run) / n for i, part in enumerate(STEP_PARTS)}
        seconds["compute"] = sum(seconds[p] for p in COMPUTE)
        seconds["step"] = sum(step_s for step_s, _ in run) / n
        found.append(seconds)
    return found


Chunks = list[dict[str, float]]  # a rank's CHUNKS runs of steps (_chunks)


def _often(chunks: Chunks, holds) -> bool:  # noqa: ANN001
    """Whether ``holds(shares)`` is true over each of the CHUNKS runs of steps but one at most
    (shares: part -> its share of those steps' time)."""
    count = 0
    for chunk in chunks:
        count += bool(holds({part: x / chunk["step"] for part, x in chunk.items()}))
    return count >= CHUNKS - 1


def _median_without(ordered: list[float], value: float) -> float:
    """The median of ``ordered`` (sorted) with one ``value`` taken out: the others' median, without
    sorting the others again for each rank (a job of 1,024 ranks asks it 1,024 times)."""
    gone = bisect.bisect_left(ordered, value)
    n = len(ordered) - 1

    def at(i: int) -> float:
        return ordered[i if i < gone else i + 1]

    return at(n // 2) if n % 2 else (at(n // 2 - 1) + at(n // 2)) / 2


class _Others:
    """Each part's values over the ranks, sorted once: the means, and each run of steps'."""

    def __init__(self, ranks: tuple[RankAnatomy, ...], chunks: dict[int, Chunks]) -> None:
        self.means = {part: sorted(r.seconds(part) for r in ranks) for part in ("compute", "host", "comm")}
        self.runs = {
            part: [sorted(chunks[r.rank][c][part] for r in ranks) for c in range(CHUNKS)]
            for part in ("compute", "host", "comm")
        }


def _slower(own: Chunks, others: _Others, part: str, margin: float) -> bool:
    """Whether a rank spends longer in ``part`` than the others' median by ``margin``, while they wait
    longer in communication than it does by half that, over each run of steps but one at most."""
    count = 0
    for c, chunk in enumerate(own):
        typical = _median_without(others.runs[part][c], chunk[part])
        waiting = _median_without(others.runs["comm"][c], chunk["comm"])
        count += chunk[part] - typical >= margin and waiting - chunk["comm"] >= margin / 2
    return count >= CHUNKS - 1


def _pct(share: float) -> str:
    return f"{share * 100:.0f}%"


def _span(shares: list[float]) -> str:
    low, high = min(shares), max(shares)
    return _pct(low) if round(low * 100) == round(high * 100) else f"{_pct(low)}-{_pct(high)}"


def _ranks_text(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _straggler(
    ranks: tuple[RankAnatomy, ...], chunks: dict[int, Chunks], job: Job | None, device: Device | None
) -> Verdict | None:
    """The first rank slower at the same compute or host work than the others, who wait for it."""
    if len(ranks) < 2:
        return None
    others = _Others(ranks, chunks)
    for part, words in (
        ("compute", "in compute (forward, backward, the optimizer)"),
        ("host", "on the host"),
    ):
        for r in ranks:
            typical = _median_without(others.means[part], r.seconds(part))
            margin = max(STRAGGLER_MIN_S, STRAGGLER_STEP_SHARE * r.step_s)
            waiting = _median_without(others.means["comm"], r.seconds("comm"))
            if (
                r.seconds(part) - typical >= margin
                and waiting - r.seconds("comm") >= margin / 2
                and _slower(chunks[r.rank], others, part, margin)
            ):
                return Verdict(
                    "straggler",
                    (r.rank,),
                    f"rank {r.rank} is slow {words}: {r.seconds(part) * 1000:.0f} ms a step, the "
                    f"others {typical * 1000:.0f} ms; they wait for it in communication",
                    advice("straggler", job, device),
                )
    return None


def _verdicts(
    ranks: tuple[RankAnatomy, ...],
    chunks: dict[int, Chunks],
    workers: dict[int, int],
    job: Job | None = None,
    device: Device | None = None,
) -> tuple[Verdict, ...]:
    """Input-bound ranks are the whole story (the others wait for them); else a straggler, and what
    the whole job is bound by."""
    starved = _input_bound(ranks, chunks, workers, job, device)
    if starved is not None:
        return (starved,)
    found = [v for v in (_straggler(ranks, chunks, job, device), _bound(ranks, chunks, job, device)) if v]
    return tuple(found)


def _input_bound(
    ranks: tuple[RankAnatomy, ...],
    chunks: dict[int, Chunks],
    workers: dict[int, int],
    job: Job | None,
    device: Device | None,
) -> Verdict | None:
    """Every rank waiting for its data, or some ranks, apart from the others who wait for them."""

    def hint(names: tuple[int, ...]) -> str | None:
        return advice("input-bound", job, device, loader_words({workers[r] for r in names if r in workers}))

    starved = [r for r in ranks if _often(chunks[r.rank], lambda s: s["data"] >= SHARE_INPUT)]
    fed = [r for r in ranks if r not in starved]
    if starved and not fed:
        everyone = tuple(r.rank for r in ranks)
        span = _span([r.share("data") for r in ranks])
        return Verdict(
            "input-bound",
            everyone,
            f"input-bound: every rank waits for its data {span} of each step",
            hint(everyone),
        )
    if not starved:
        return None
    own = statistics.median(r.share("data") for r in starved)
    others = statistics.median(r.share("data") for r in fed)
    if own - others < SHARE_APART:
        return None
    names = [r.rank for r in starved]
    waiting = statistics.median(r.share("comm") for r in fed)
    return Verdict(
        "input-bound",
        tuple(names),
        f"input-bound: {_ranks_text(names)} waits for its data {_pct(own)} of each step, "
        f"the others {_pct(others)}, who wait for it ({_pct(waiting)} of their step in communication)",
        hint(tuple(names)),
    )


def _bound(
    ranks: tuple[RankAnatomy, ...], chunks: dict[int, Chunks], job: Job | None, device: Device | None
) -> Verdict | None:
    """What the whole job is bound by, on every rank (a straggler's included: it waits less)."""
    everyone = tuple(r.rank for r in ranks)
    largest = all(r.comm_s >= max(r.seconds(p) for p in STEP_PARTS) for r in ranks)
    if largest and all(_often(chunks[r.rank], lambda s: s["comm"] >= SHARE_COMM) for r in ranks):
        return Verdict(
            "communication-bound",
            everyone,
            f"communication-bound: {says('communication-bound', job, COMM_SAYS)}: "
            f"{_span([r.share('comm') for r in ranks])} of each step on every rank",
            advice("communication-bound", job, device),
        )
    if all(_often(chunks[r.rank], lambda s: s["compute"] >= SHARE_COMPUTE) for r in ranks):
        return Verdict(
            "compute-bound",
            everyone,
            "compute-bound: forward, backward and the optimizer take "
            f"{_span([r.share('compute') for r in ranks])} of each step on every rank",
            advice("compute-bound", job, device),
        )
    if all(_often(chunks[r.rank], lambda s: s["host"] >= SHARE_HOST) for r in ranks):
        return Verdict(
            "host-bound",
            everyone,
            f"host-bound: {_span([r.share('host') for r in ranks])} of each step is "
            f"{says('host-bound', job, HOST_SAYS)} on every rank",
            advice("host-bound", job, device),
        )
    return None

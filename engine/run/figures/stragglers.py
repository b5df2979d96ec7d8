"""Who is a straggler: a rank that arrives last at the step's collectives, consistently and by a
clear margin, from the ranks' data times (the demos) or their flight records (any script)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Straggler:
    """A rank that arrives last at the step's collectives, step after step: the others wait for it."""

    rank: int
    late_s: float  # how much later than the earliest rank it is ready: the median over the rounds
    steps: int  # of how many steps (or collectives) it was the last
    of_steps: int
    data_s: float | None = None  # its median time on its batch a step ("loading data"), when reported
    others_data_s: float | None = None  # the other ranks' median
    counted: str = "steps"  # "steps" (from data_s) or "collectives" (from the flight recorder)

    def describe(self) -> str:
        text = (
            f"rank {self.rank} arrives {self.late_s * 1000:.0f} ms late at its collectives in "
            f"{self.steps} of {self.of_steps} {self.counted}"
        )
        if self.data_s is None or self.others_data_s is None:
            return text + " (from the flight recorder: where its time goes is not reported)"
        own, others = self.data_s * 1000, self.others_data_s * 1000
        return f"{text}; it spends them loading data ({own:.0f} ms a step, the others {others:.0f} ms)"


# A straggler is late by a clear margin, consistently: in at least STRAGGLER_SHARE of the rounds it
# is later than the earliest rank by STRAGGLER_MIN_S and by STRAGGLER_STEP_SHARE of the step time.
# Measured (tests/fixtures/stragglers, 2 CPU ranks on 2 busy cores): ten clean runs had no rank
# late by 10 ms in even half of their collectives (median lateness at most 4 ms), where the old
# rule (last in 60%, 5 ms on average) named one in four of them; a rank 50 ms slow a batch was
# about 100 ms late in over 95% of them.
STRAGGLER_SHARE = 0.8


STRAGGLER_MIN_S = 0.010


STRAGGLER_STEP_SHARE = 0.1


STRAGGLER_WINDOW = 500  # the latest steps looked at: a straggler is about now, not the first minute


STRAGGLER_MIN_STEPS = 10


def straggler_margin(step_s: float | None) -> float:
    """How late a rank must be, in a round, to count as late in it."""
    return max(STRAGGLER_MIN_S, STRAGGLER_STEP_SHARE * (step_s or 0.0))


def stragglers_among(
    rounds: list[dict[int, float]],
    *,
    counted: str = "steps",
    with_data: bool = False,
    step_s: float | None = None,
) -> tuple[Straggler, ...]:
    """The straggler rule, over rounds (steps, or collectives) in each of which every rank was seen:
    rank -> when it was ready, in seconds on one clock (or any measure where later is larger). A
    rank late by :func:`straggler_margin` of ``step_s`` (the job's step time) in STRAGGLER_SHARE of
    them is one; its lateness is its median. ``with_data``: the values are the ranks' time on their
    batch (``data_s``), so its median and the others' say where its time goes (a median: a
    script's first step holds its whole start)."""
    ranks = list(rounds[0]) if rounds else []
    if len(ranks) < 2 or len(rounds) < STRAGGLER_MIN_STEPS:
        return ()
    margin = straggler_margin(step_s)
    lateness: dict[int, list[float]] = {rank: [] for rank in ranks}
    for ready in rounds:
        earliest = min(ready.values())
        for rank, seconds in ready.items():
            lateness[rank].append(seconds - earliest)
    found = []
    for rank, late in lateness.items():
        count = sum(1 for x in late if x >= margin)
        if count < STRAGGLER_SHARE * len(rounds):
            continue
        typical = statistics.median(late)
        if with_data:
            own = statistics.median(ready[rank] for ready in rounds)
            others = statistics.median(s for ready in rounds for r, s in ready.items() if r != rank)
            found.append(Straggler(rank, typical, count, len(rounds), own, others, counted))
        else:
            found.append(Straggler(rank, typical, count, len(rounds), counted=counted))
    return tuple(found)

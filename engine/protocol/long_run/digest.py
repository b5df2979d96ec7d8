"""A run of one rank's steps in one line (events.py's ``digest``): what a long run keeps of the steps
that its files no longer hold whole. The rank writes one every DIGEST_STEPS steps, and when a segment
of its events ends (rank/event_files.py); a reader takes them in for the segments it does not read
whole (tail.py), and the engine keeps its own older steps the same way (run/figures/long_run/whole_run.py).

Its step times are kept as a histogram of bins, each 2% wide: a median or a percentile taken from
them is within 1% of the true one (bin b holds (G**(b-1), G**b] seconds; it stands for its middle).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Any

from mgpu_tui.engine.protocol.events import (
    BIN_TOP,
    BIN_ZERO,
    MAX_BYTES,
    MAX_COUNT,
    MAX_FLOPS,
    MAX_SECONDS,
    Digest,
)

G = 1.02
_LOG_G = math.log(G)


def step_bin(seconds: float) -> int:
    """The bin of a step time (BIN_ZERO: no time, or below 5e-11 s)."""
    if not seconds > 0:  # (NaN too)
        return BIN_ZERO
    return min(BIN_TOP, max(BIN_ZERO, math.ceil(math.log(seconds) / _LOG_G)))


def bin_seconds(b: int) -> float:
    """The time a bin stands for: its middle, within 1% of every time in it."""
    return 0.0 if b <= BIN_ZERO else G**b * 2 / (1 + G)


def histogram(seconds: Iterable[float]) -> list[list[int]]:
    """[bin, count] of step times, the bins in order: one pass over them sorted, a logarithm a bin."""
    found: list[list[int]] = []
    upper = -math.inf
    for x in sorted(seconds):
        if x > upper or not found:
            b = step_bin(x)
            upper = G**b if b > BIN_ZERO else G**BIN_ZERO
            if found and found[-1][0] == b:
                found[-1][1] += 1
                continue
            found.append([b, 0])
        found[-1][1] += 1
    return found


_STEP_S, _SAMPLES, _TOKENS, _LOSS = (itemgetter(k) for k in ("step_s", "samples", "tokens", "loss"))


def digest_of(steps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A digest's fields (events.py's Digest, but rank and t) for ``steps``, each a step event's
    fields as the reporter wrote them (its loss NaN or infinite where it diverged), in order. Made
    once every DIGEST_STEPS steps, in the rank: a pass over them a figure, each at C's pace."""
    steady = [f for f in steps if not f.get("observed")]  # (a step run under the FLOP count is no figure's)
    step_s = list(map(_STEP_S, steps))
    times = step_s if len(steady) == len(steps) else list(map(_STEP_S, steady))
    samples = list(map(_SAMPLES, steps))
    losses = list(map(_LOSS, steps))
    flops = [x for f in steady if (x := f.get("flops")) is not None]
    peaks = [x for f in steps if (x := f.get("mem_peak_bytes")) is not None]
    loss, diverged = None, None
    if not (None in losses and losses.count(None) == len(losses)):
        known = [(x, w, f["step"]) for x, w, f in zip(losses, samples, steps) if x is not None]
        finite = [(x, w) for x, w, _ in known if math.isfinite(x)]
        diverged = next((step for x, _, step in known if not math.isfinite(x)), None)
        values = [x for x, _ in finite]
        if finite:
            weighted = math.fsum(x * w for x, w in finite)
            loss = [
                weighted,
                sum(w for _, w in finite),
                math.fsum(values),
                len(values),
                min(values),
                max(values),
            ]
    return {
        "first": steps[0]["step"],
        "last": steps[-1]["step"],
        "n": len(steps),
        "samples": sum(samples),
        "tokens": sum(map(_TOKENS, steps)),
        "step_s": [math.fsum(step_s), min(step_s), max(step_s)],
        "hist": histogram(times),
        "loss": loss,
        "flops": [float(sum(flops)), len(flops)],
        "mem_peak_bytes": max(peaks, default=None),
        "diverged_at": diverged,
        "recomputed": float(sum(f.get("recomputed_flops") or 0 for f in steady)),
        "steady": None if len(steady) == len(steps) else _sums(steady, times, flops),
    }


def _sums(steady: Sequence[dict[str, Any]], times: list[float], flops: list[Any]) -> list[Any]:
    """Digest.steady: the figures of its steps not observed."""
    samples, tokens = sum(map(_SAMPLES, steady)), sum(map(_TOKENS, steady))
    return [len(steady), samples, tokens, math.fsum(times), float(sum(flops)), len(flops)]


def within(d: Digest) -> bool:
    """Whether each figure of a digest (its shape already checked) is within its range (events.py)."""
    steady = d.steady or (d.n, d.samples, d.tokens, d.step_s[0], *d.flops)
    counts = (d.first, d.last, d.samples, d.tokens, d.flops[1], d.diverged_at or 0, *steady[1:3])
    return (
        1 <= d.n <= MAX_COUNT
        and 0 <= steady[5] <= steady[0] <= d.n
        and all(0 <= c <= MAX_COUNT for c in (*counts, *(c for _, c in d.hist)))
        and all(0 <= s <= d.n * MAX_SECONDS for s in (*d.step_s, steady[3]))
        and all(BIN_ZERO <= b <= BIN_TOP for b, _ in d.hist)
        and all(0 <= f <= float(MAX_FLOPS) * d.n for f in (d.flops[0], steady[4], d.recomputed))
        and 0 <= (d.mem_peak_bytes or 0) <= MAX_BYTES
        and (d.loss is None or 0 <= d.loss[3] <= d.n)
    )

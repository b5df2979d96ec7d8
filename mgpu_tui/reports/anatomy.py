"""Where a run's steps went and why it was slow, as the console says it: a table of each rank's
step taken apart (its share of each part, and the seconds), and each verdict with the change to try
(engine/run/figures/anatomy.py defines every figure)."""

from __future__ import annotations

from collections.abc import Sequence

from mgpu_tui.console import fmt_seconds, plain, table
from mgpu_tui.engine.protocol.events import STEP_PARTS
from mgpu_tui.engine.run.figures.anatomy import RankAnatomy, Verdict
from mgpu_tui.engine.run.figures.mfu import Compute

EACH_RANK_AT_MOST = 16  # ranks the table lists one by one; past that, the range over the ranks


def _ms(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.1f} ms"


def part_cell(rank: RankAnatomy, part: str) -> str:
    """A part of a rank's step: its share, then its seconds ("98% 121 ms")."""
    return f"{rank.share(part) * 100:.0f}% {_ms(rank.seconds(part))}"


def anatomy_lines(anatomy: Sequence[RankAnatomy]) -> list[str]:
    """The table of where each rank's step goes (none where no rank took its steps apart)."""
    if not anatomy:
        return []
    fewest, most = min(r.steps for r in anatomy), max(r.steps for r in anatomy)
    steps = str(fewest) if fewest == most else f"{fewest}-{most}"
    head = f"where a step goes (each rank's mean over its last {steps} steady steps)"
    headers = ["", "step", *STEP_PARTS]
    if len(anatomy) <= EACH_RANK_AT_MOST:
        rows = [
            [f"rank {r.rank}", fmt_seconds(r.step_s), *(part_cell(r, p) for p in STEP_PARTS)] for r in anatomy
        ]
    else:
        first, last = anatomy[0].rank, anatomy[-1].rank
        rows = [
            [
                f"ranks {first}-{last}",
                _range([r.step_s * 1000 for r in anatomy], " ms"),
                *(_range([r.share(p) * 100 for r in anatomy], "%") for p in STEP_PARTS),
            ]
        ]
    return [head, table(headers, rows, right=tuple(range(1, len(headers))))]


def _range(values: list[float], unit: str) -> str:
    low, high = min(values), max(values)
    return f"{low:.0f}{unit}" if round(low) == round(high) else f"{low:.0f}-{high:.0f}{unit}"


def verdict_lines(verdicts: Sequence[Verdict]) -> list[str]:
    """Each verdict, then the change to try where one applies to the job."""
    lines = []
    for verdict in verdicts:
        lines += [f"why it is slow: {verdict.text}", *([f"  try: {verdict.hint}"] if verdict.hint else [])]
    return [plain(line) for line in lines]


def fmt_tflops(tflops: float) -> str:
    return f"{tflops:,.0f}" if tflops >= 100 else f"{tflops:.3g}"


def compute_line(compute: Compute | None, ranks: int = 1) -> str | None:
    """The job's TF/s and MFU, as torch's counter and the peak table give them (None: not counted)."""
    if compute is None:
        return None
    if compute.tflops is None:
        return f"compute n/a: {compute.note}"
    line = f"compute {fmt_tflops(compute.tflops)} TFLOP/s (torch's FLOP count of each step)"
    again = compute.recomputed_tflops
    if again:  # MFU never counts what checkpointing ran again; HFU does
        line += f", and {fmt_tflops(again)} TFLOP/s recomputing activations"
    if compute.mfu is None:
        return f"{line}, MFU n/a: {compute.note}"
    each = f"{ranks} x " if ranks > 1 and compute.basis != "mixed" else ""
    peak = (compute.peak_tflops or 0) / (ranks if each else 1)
    line += f", MFU {compute.mfu * 100:.1f}% of {each}{peak:,g} TFLOP/s ({compute.basis} dense peak)"
    return line + (f", HFU {compute.hfu * 100:.1f}% (recomputation counted)" if compute.hfu else "")

"""TF/s and MFU from what the ranks counted: each step's FLOPs (torch's counter, in the rank:
engine/rank/watch/flops/) over its seconds, against its GPU's peak for the precision it ran in
(engine/machine/peaks.py).

- a rank's TF/s: its steady steps' FLOPs over their seconds (the same steps as its samples/s;
  warm-up, and the steps run under the count, left out), where every one of them was counted; the
  model's FLOPs, activation recomputation left out;
- its MFU: that over its GPU's dense peak; n/a, with the reason, on the CPU, a GPU not in the
  table, a MIG slice, or a step not counted (a compiled graph whose FLOPs cannot be seen, ...);
- its HFU, where it recomputed activations (checkpointing): the FLOPs it ran, recomputation
  counted, over the same peak;
- the job's: the ranks' TF/s summed, over their peaks summed (n/a unless every rank has both).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from mgpu_tui.engine.machine import peaks
from mgpu_tui.engine.protocol.events import About

NOT_COUNTED = "no step's FLOPs were counted"


@dataclass(frozen=True)
class Compute:
    tflops: float | None  # TFLOP/s
    mfu: float | None  # of the peak, 0..1 (more where the table or the count is wrong)
    note: str | None = None  # why the MFU (or both) is n/a
    peak_tflops: float | None = None
    basis: str | None = None  # the peak's GPU and precision ("H200 SXM bf16"); "mixed" across ranks
    recomputed_tflops: float | None = None  # TFLOP/s of activation recomputation, not in tflops (None: none)
    hfu: float | None = None  # (tflops + recomputed_tflops) over the peak, where activations were recomputed


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


def of_job(ranks: Sequence[Compute]) -> Compute:
    if not ranks:
        return Compute(None, None, NOT_COUNTED)
    if any(r.tflops is None for r in ranks):
        return Compute(None, None, next(r.note for r in ranks if r.tflops is None))
    tflops = sum(r.tflops or 0.0 for r in ranks)
    again = sum(r.recomputed_tflops or 0.0 for r in ranks) or None
    if any(r.peak_tflops is None for r in ranks):
        why = next(r.note for r in ranks if r.peak_tflops is None)
        return Compute(tflops, None, why, recomputed_tflops=again)
    peak = sum(r.peak_tflops or 0.0 for r in ranks)
    bases = {r.basis for r in ranks}
    basis = bases.pop() if len(bases) == 1 else "mixed"
    hfu = (tflops + again) / peak if again else None
    return Compute(tflops, tflops / peak, None, peak, basis, again, hfu)
